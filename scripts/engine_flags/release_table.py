"""One release's table: its flags, parser names and env vars, read from its sources."""

from __future__ import annotations

from typing import Any

from engine_flags.archive import Sources
from engine_flags.common import Flag
from engine_flags.environment import environment_variables
from engine_flags.sglang_source import sglang_flags, sglang_parser_names
from engine_flags.vllm_source import VllmExtractor, vllm_parser_names

ENGINES = ("vllm", "sglang")
# Values the parser flags take besides the registered names.
PARSER_KEYWORDS = {"auto", "none"}


def takes_json(flag: Flag) -> bool:
    """String flags whose value is parsed as JSON (``--json-model-override-args '{}'``)."""
    return flag.default in ("{}", "[]") or flag.name.startswith("--json-") or "JSON string" in flag.help


def build_table(engine: str, version: str, sources: Sources, source_name: str) -> dict[str, Any]:
    """The table of ``engine==version`` from ``sources`` (read with ``ast``, never imported)."""
    if engine == "vllm":
        flags = VllmExtractor(sources).extract()
        reasoning = vllm_parser_names(sources, "reasoning")
        tools = vllm_parser_names(sources, "tool")
    elif engine == "sglang":
        flags = sglang_flags(sources)
        reasoning = sglang_parser_names(sources, "reasoning")
        tools = sglang_parser_names(sources, "tool")
    else:
        raise ValueError(f"no extractor for {engine!r}; known: {', '.join(ENGINES)}")
    for flag_name, names in (("--reasoning-parser", reasoning), ("--tool-call-parser", tools)):
        flag = flags.get(flag_name)
        if flag is None:
            continue
        if names:
            known = (flag.choices or []) + flag.choice_constants
            flag.choices = [value for value in known if value in PARSER_KEYWORDS] + names
            flag.type = "str"
        elif flag.choices:  # vLLM 0.6.0: choices=["mistral", "hermes"], nothing registered yet
            names[:] = sorted(str(choice) for choice in flag.choices if choice not in PARSER_KEYWORDS)
    for flag in flags.values():
        if flag.type == "str" and flag.takes_value == "one" and takes_json(flag):
            flag.type = "json"
    env_read, env_deprecated = environment_variables(sources, engine)
    return {
        "version": version,
        "source": source_name,
        "flags": {name: flags[name].to_json() for name in sorted(flags)},
        "reasoning_parsers": reasoning,
        "tool_call_parsers": tools,
        "env_vars": env_read,
        "deprecated_env_vars": env_deprecated,
    }
