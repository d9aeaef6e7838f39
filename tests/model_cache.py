"""The test models, each built once and kept in a cache keyed by the source of what builds it.

A recipe is a small function that writes one test model into a folder. Its cache key hashes the
recipe's own source, the source of every ``modelyard`` module the builder imports (followed
transitively), and the versions of torch, transformers and tokenizers: change any of them and
the model is built again; change nothing and a second session (or a second test directory in
the same CI run) copies the folder instead of training again.

The cache lives in ``$MODELYARD_TEST_MODEL_CACHE``, else ``<repo>/.cache/test-models`` (ignored
by git). Builds are serialised by a lock file per key, so two pytest sessions on one host never
build the same model at once, and a half-written build is never seen (each build goes to a
``.partial`` folder renamed when complete).

The costly recipes (a trained model, the field core) can be built in the background while other
tests run: ``conftest.py`` starts ``python tests/model_cache.py build NAME`` for the ones the
collected tests need.

Usage::

    cache = ModelCache.default()
    folder = cache.ensure("tiny-qwen3")           # the cached folder (do not modify it)
    mine = cache.copy("tiny-qwen3", tmp_path / "m")  # a private copy
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import inspect
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CACHE_VARIABLE = "MODELYARD_TEST_MODEL_CACHE"
REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
# Libraries whose version changes what a builder writes.
BUILD_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")


def _tiny_qwen3(path: Path) -> None:
    from modelyard.testing.tiny_model import build_tiny_qwen3

    build_tiny_qwen3(path)


def _tiny_qwen3_small_shards(path: Path) -> None:
    from modelyard.testing.tiny_model import build_tiny_qwen3

    build_tiny_qwen3(path, max_shard_bytes=40_000)


def _trained_tiny_qwen3(path: Path) -> None:
    from modelyard.testing.trained_tiny_model import build_trained_tiny_qwen3

    build_trained_tiny_qwen3(path)


def _field_core(path: Path) -> None:
    """The small local TEST tokenizer in ``tokenizer/`` and a core trained with it in ``core/``."""
    from modelyard.testing.field_core import train_field_core
    from modelyard.testing.tiny_model import write_test_tokenizer

    (path / "tokenizer").mkdir(parents=True)
    write_test_tokenizer(path / "tokenizer")
    train_field_core(path / "tokenizer", path / "core", max_steps=150)


@dataclass(frozen=True)
class Recipe:
    name: str
    build: Callable[[Path], None]
    # The module whose imports are followed for the key.
    builder_module: str
    # Minutes rather than seconds: worth starting in the background at collection.
    costly: bool = False


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe("tiny-qwen3", _tiny_qwen3, "modelyard.testing.tiny_model"),
        Recipe("tiny-qwen3-small-shards", _tiny_qwen3_small_shards, "modelyard.testing.tiny_model"),
        Recipe(
            "trained-tiny-qwen3",
            _trained_tiny_qwen3,
            "modelyard.testing.trained_tiny_model",
            costly=True,
        ),
        Recipe("field-core", _field_core, "modelyard.testing.field_core", costly=True),
    )
}


def _module_file(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _imported_modelyard_modules(source: str) -> set[str]:
    """The ``modelyard`` modules a source file imports, anywhere in it (top level or in functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("modelyard"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if not module.startswith("modelyard"):
                continue
            found.add(module)
            # ``from modelyard.testing import tiny_model`` imports a module by name.
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def builder_sources(module: str) -> dict[str, str]:
    """Source text of ``module`` and of every ``modelyard`` module it imports, transitively."""
    sources: dict[str, str] = {}
    pending = [module]
    while pending:
        name = pending.pop()
        if name in sources:
            continue
        path = _module_file(name)
        if path is None:
            continue
        text = path.read_text(encoding="utf-8")
        sources[name] = text
        pending.extend(_imported_modelyard_modules(text) - sources.keys())
    return sources


def recipe_key(recipe: Recipe) -> str:
    digest = hashlib.sha256()
    digest.update(inspect.getsource(recipe.build).encode())
    for name, text in sorted(builder_sources(recipe.builder_module).items()):
        digest.update(f"\0{name}\0{text}".encode())
    for library in BUILD_LIBRARIES:
        try:
            version = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"\0{library}=={version}".encode())
    return f"{recipe.name}-{digest.hexdigest()[:16]}"


class ModelCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def default(cls) -> ModelCache:
        configured = os.environ.get(CACHE_VARIABLE)
        return cls(Path(configured) if configured else REPOSITORY_ROOT / ".cache" / "test-models")

    def folder(self, name: str) -> Path:
        return self.root / recipe_key(RECIPES[name])

    def is_built(self, name: str) -> bool:
        return self.folder(name).is_dir()

    @contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def ensure(self, name: str) -> Path:
        """The cached folder of ``name``, built first unless it is there (waits for another build)."""
        recipe = RECIPES[name]
        target = self.folder(name)
        if target.is_dir():
            return target
        with self._locked(target.name):
            if target.is_dir():
                return target
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            recipe.build(partial)
            partial.rename(target)
        self._remove_stale(name, keep=target)
        return target

    def _remove_stale(self, name: str, keep: Path) -> None:
        """Builds of the same recipe under an older key."""
        for stale in self.root.glob(f"{name}-*"):
            if stale == keep or not stale.is_dir() or stale.name.endswith(".partial"):
                continue
            if stale.name.removeprefix(f"{name}-").isalnum():
                shutil.rmtree(stale, ignore_errors=True)

    def copy(self, name: str, destination: Path) -> Path:
        """A private copy of ``name`` at ``destination`` (created), for a test that may change it."""
        shutil.copytree(self.ensure(name), destination)
        return destination

    def start_background_build(self, name: str) -> subprocess.Popen[bytes]:
        """Build ``name`` in a child process (lowered priority); its output goes to ``<key>.log``."""
        self.root.mkdir(parents=True, exist_ok=True)
        log_path = self.root / f"{recipe_key(RECIPES[name])}.log"
        with open(log_path, "wb") as log:
            return subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "build", name],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, CACHE_VARIABLE: str(self.root)},
            )


def main(arguments: list[str]) -> int:
    if len(arguments) != 2 or arguments[0] != "build" or arguments[1] not in RECIPES:
        print(f"usage: python tests/model_cache.py build {{{'|'.join(RECIPES)}}}", file=sys.stderr)
        return 2
    os.nice(5)
    print(ModelCache.default().ensure(arguments[1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
