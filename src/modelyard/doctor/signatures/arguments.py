"""Log signatures of arguments the engine could not read: unknown to llama.cpp or llama-box, and
JSON values a launcher mangled on the way.

llama.cpp's ``common/arg.cpp`` looks every argument up whole (``error: invalid argument: X`` and
exits); llama-box prints ``Unknown argument: X`` and goes on with its defaults. vLLM reads a JSON
flag's value through ``parse_type(json.loads)`` (``vllm/engine/arg_utils.py``), which reports
``argument --X: Value V cannot be converted to <function loads ...>``; releases and engines that
give argparse ``json.loads`` itself get argparse's ``argument --X: invalid loads value: 'V'``. A
setting handed over as a string where vLLM expects a mapping reaches its config check as
``rope_scaling should have a 'rope_type' key``. vLLM logs the overrides it applies to the model's
config as a Python mapping (``Overriding HF config with {...}``, ``vllm/config`` ModelConfig); a
value there that is a list of JSON fragments (a launcher split the JSON at its commas) or a string
holding JSON (a launcher passed it on unparsed) is a mangled value, whatever error follows.
"""

from __future__ import annotations

import ast
import json
import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import LogContext, LogSignature


def _explain_llama_cpp_argument(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    argument = match["argument"].strip()
    joined = " " in argument or "=" in argument
    how = (
        "the flag and its value reached it as one argument"
        if joined
        else "it has no such flag (llama.cpp's are looked up whole: no abbreviations)"
    )
    engine = "llama-box" if match.groupdict().get("box") else "llama.cpp"
    goes_on = "; it went on with its defaults" if engine == "llama-box" else ""
    return (
        f"{engine} did not take the argument {argument!r}: {how}{goes_on}",
        "give each flag and its value as two arguments (`--ctx-size 16384`, not `--ctx-size=16384` or "
        "one item '--ctx-size 16384'); check the flag's spelling in `llama-server --help`",
    )


def _explain_json_not_converted(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    flag = match["flag"]
    value = (match["value"] or match["quoted"] or "").strip()
    escaped = "\\" in value
    cause = (
        'the value reached it with its quotes and commas escaped (\\" and \\,): something between the '
        "command and the engine re-quoted it"
        if escaped
        else "the value is not valid JSON as the engine received it"
    )
    return (
        f"vLLM could not read {flag} as JSON: {cause} (received: {value[:120]})",
        f"pass {flag} as plain JSON in one argument ('{{\"key\": value}}') and check how the launcher "
        "quotes it (a shell script that escapes quotes, a YAML list that re-quotes); or give the "
        "setting as dotted flags where the release has them",
    )


def _explain_rope_scaling_string(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "vLLM's model config found rope_scaling without a 'rope_type' key: the setting reached the engine "
        "as a string (a JSON value a launcher or environment variable passed on unparsed) or as a mapping "
        "without its type",
        'pass rope scaling as JSON where the engine parses it (`--hf-overrides \'{"rope_scaling": '
        '{"rope_type": "yarn", ...}}\'`), leave the launcher\'s rope variable unset to use the model\'s '
        "own config, or use a vLLM release that reads the model's config format",
    )


def _mangled_override(value: object) -> str | None:
    """How a value of vLLM's config overrides was mangled: split at its commas, or left a string."""
    if isinstance(value, list) and len(value) > 1 and all(isinstance(part, str) for part in value):
        joined = ",".join(value)
        if joined.lstrip().startswith(("{", "[")) and _is_json(joined):
            return "split at its commas into a list of fragments"
    if isinstance(value, str) and value.lstrip().startswith(("{", "[")) and _is_json(value):
        return "left as a string holding JSON, not parsed"
    if isinstance(value, dict):
        for inner in value.values():
            how = _mangled_override(inner)
            if how:
                return how
    return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _overrides(match: re.Match[str]) -> dict[str, object] | None:
    try:
        value = ast.literal_eval(match["overrides"])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _mangled_key(match: re.Match[str]) -> tuple[str, str] | None:
    overrides = _overrides(match)
    for key, value in (overrides or {}).items():
        how = _mangled_override(value)
        if how:
            return str(key), how
    return None


def _explain_mangled_override(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    key, how = _mangled_key(match) or ("a setting", "mangled")
    return (
        f"vLLM received the config override {key!r} {how}: something between the command and the engine "
        "(a launcher that splits option values at commas, or one that passes JSON on as text) mangled the "
        "JSON value, so the model's config gets a list or a string where it needs a mapping",
        f"pass {key} as one JSON value where the engine parses it "
        f"(`--hf-overrides '{{\"{key}\": {{...}}}}'`), or, in the launcher, give the setting in its own "
        "JSON or mapping field instead of an option string it splits; leave it unset to use the model's "
        "own config",
    )


SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.unrecognized-arguments",
        Severity.ERROR,
        # At the start of a line: CUDA's "CUDA error: invalid argument" is another failure.
        re.compile(r"^error: invalid argument: (?P<argument>[^\n]+)", re.MULTILINE),
        _explain_llama_cpp_argument,
        "llama.cpp common/arg.cpp (common_params_parse_ex)",
    ),
    # llama-box (GPUStack's llama.cpp server) prints the argument and starts with its defaults.
    LogSignature(
        "log.unrecognized-arguments",
        Severity.WARNING,
        re.compile(r"^(?P<box>Unknown argument): (?P<argument>[^\n]+)", re.MULTILINE),
        _explain_llama_cpp_argument,
        "llama-box param.hpp (unknown)",
    ),
    LogSignature(
        "log.launcher-mangled-json",
        Severity.ERROR,
        re.compile(
            r"error: argument (?P<flag>--[\w-]+): (?:Value (?P<value>[^\n]*?) cannot be converted to "
            r"<function loads|invalid loads value: (?P<quoted>[^\n]*))"
        ),
        _explain_json_not_converted,
        "vllm/engine/arg_utils.py (parse_type: 'cannot be converted to'); argparse (_get_value: "
        "'invalid %(type)s value')",
    ),
    LogSignature(
        "log.launcher-mangled-json",
        Severity.ERROR,
        re.compile(r"rope_scaling should have a 'rope_type' key"),
        _explain_rope_scaling_string,
        "vllm/transformers_utils/config.py (patch_rope_scaling_dict)",
    ),
    LogSignature(
        "log.launcher-mangled-json",
        Severity.ERROR,
        re.compile(r"Overriding HF config with (?P<overrides>\{[^\n]*\})"),
        _explain_mangled_override,
        "vllm/config/model.py (ModelConfig: logger 'Overriding HF config with %s'; earlier vllm/config.py)",
        when=lambda match, text: _mangled_key(match) is not None,
    ),
)
