"""An engine's own API key by environment variable instead of on its command line.

Any local user can read a process's command line (``/proc/PID/cmdline`` is world-readable), so
an ``--api-key VALUE`` among a deployment's parameters would show the key to every account on
the engine's host. A backend version that names ``api_key_variable`` (vLLM: ``VLLM_API_KEY``,
read by every release from 0.6.0 when no ``--api-key`` is given) gets the value there instead:
a process's environment is readable by its own user only (``/proc/PID/environ``, mode 0400), and
every runtime passes it outside any argv (Docker by name, ``--env NAME``).

Left on the command line: a flag given several values (vLLM >= 0.10.1 accepts
``--api-key K1 K2``; the variable holds one), and engines with no such variable (SGLang reads
its key from ``--api-key`` only; see docs/security.md).

Usage::

    arguments, env = api_key_into_environment("VLLM_API_KEY", ["--api-key", "k", "--port", "8"], {})
    # (["--port", "8"], {"VLLM_API_KEY": "k"})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

API_KEY_FLAG = "--api-key"


def _is_flag(argument: str) -> bool:
    return argument.startswith("-") and len(argument) > 1


def api_key_into_environment(
    variable: str | None, parameters: Sequence[str], env: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """``parameters`` without their ``--api-key`` flags, and ``env`` with the key in ``variable``
    (the last one given, as the engine would take); unchanged when ``variable`` is None or a flag
    has more than one value."""
    kept: list[str] = []
    key: str | None = None
    index = 0
    while index < len(parameters):
        argument = parameters[index]
        flag, equals, value = argument.partition("=")
        if variable is None or flag.replace("_", "-") != API_KEY_FLAG:
            kept.append(argument)
            index += 1
            continue
        if equals:
            key = value
            index += 1
            continue
        values = []
        following = index + 1
        while following < len(parameters) and not _is_flag(parameters[following]):
            values.append(parameters[following])
            following += 1
        if len(values) != 1:  # none (the engine's own error), or several keys: left as given
            return list(parameters), dict(env)
        key = values[0]
        index = following
    if key is None or variable is None:
        return list(parameters), dict(env)
    return kept, {**env, variable: key}
