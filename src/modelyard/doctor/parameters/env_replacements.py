"""What replaced an engine variable a release no longer reads, and how loudly the release says so.

A variable dropped from the engine's ``envs.py`` (vLLM) or ``environ.py`` (SGLang) changes nothing
when set: vLLM logs ``Unknown vLLM environment variable detected: NAME`` and goes on, SGLang says
nothing. The setting usually moved to a flag. ``replacement_of`` names it, from two sources:

- the flag the variable's own name becomes (``VLLM_ATTENTION_BACKEND`` -> ``--attention-backend``,
  ``VLLM_ALL2ALL_BACKEND`` -> ``--all2all-backend``), when the release's flag table has it;
- ``MOVED``: the variables whose setting went elsewhere, each with the release that dropped it
  (from the flag tables' history) and what the engine's code reads instead.

Severity (``env_severity``): a warning, since the engine starts without the setting, except on
vLLM with ``--fail-on-environ-validation`` (0.17+), where ``EngineArgs.create_engine_config``
raises ``ValueError("Unknown vLLM environment variable detected: ...")`` and the start fails.

Usage::

    replacement_of(table, "VLLM_ATTENTION_BACKEND")   # Replacement(text="--attention-backend", ...)
"""

from __future__ import annotations

from dataclasses import dataclass

from modelyard.backends.flag_tables import FlagTable
from modelyard.backends.parameters import ParsedParameters
from modelyard.doctor.findings import Severity

ENGINE_PREFIXES = {"vllm": ("VLLM_",), "sglang": ("SGLANG_", "SGL_")}
# vLLM 0.17+: an unknown VLLM_* variable is an error with this switch (EngineArgs field
# fail_on_environ_validation; vllm/envs.py validate_environ(hard_fail=True)).
FAIL_ON_UNKNOWN_ENV_FLAG = "--fail-on-environ-validation"


@dataclass(frozen=True)
class Replacement:
    """What to use instead of a variable: a flag (``flag``), written out in ``text``."""

    text: str
    flag: str | None = None
    note: str = ""


# Variables whose setting moved somewhere their name does not say. Each was read up to the
# release before the one named in the flag tables' history (``load_engine_history``).
MOVED: dict[str, dict[str, Replacement]] = {
    "vllm": {
        # vllm/config/attention.py AttentionConfig.flash_attn_version (0.13+); the variable was
        # dropped in 0.15.0.
        "VLLM_FLASH_ATTN_VERSION": Replacement(
            "--attention-config '{\"flash_attn_version\": 3}'", flag="--attention-config"
        ),
        # vllm/config/profiler.py ProfilerConfig (0.13+); the variable was dropped in 0.16.0.
        "VLLM_TORCH_PROFILER_DIR": Replacement(
            '--profiler-config \'{"profiler": "torch", "torch_profiler_dir": "/path"}\'',
            flag="--profiler-config",
        ),
        # The V0 engine was removed in 0.11.x; V1 is the only engine, nothing selects it.
        "VLLM_USE_V1": Replacement(
            "nothing: the V1 engine is the only one", note="the V0 engine and its switch are gone"
        ),
        "VLLM_USE_RAY_SPMD_WORKER": Replacement(
            "nothing: V1's executors replace the V0 Ray SPMD worker",
            note="--distributed-executor-backend ray still selects Ray",
        ),
    },
    "sglang": {},
}


def _prefix_stripped(engine: str, name: str) -> str:
    for prefix in ENGINE_PREFIXES.get(engine, ()):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def replacement_of(engine: str, table: FlagTable, name: str) -> Replacement | None:
    """The flag or setting that replaced ``name`` in ``table``'s release, when one is known."""
    moved = MOVED.get(engine, {}).get(name)
    if moved is not None and (moved.flag is None or table.lookup(moved.flag) is not None):
        return moved
    derived = "--" + _prefix_stripped(engine, name).lower().replace("_", "-")
    spec = table.lookup(derived)
    if spec is not None and spec.name == derived:
        return Replacement(derived, flag=derived)
    return None


def env_severity(engine: str, parameters: ParsedParameters) -> Severity:
    """Warning (the engine ignores the variable), or error where the engine refuses unknown ones."""
    if engine == "vllm" and parameters.switch(FAIL_ON_UNKNOWN_ENV_FLAG):
        return Severity.ERROR
    return Severity.WARNING
