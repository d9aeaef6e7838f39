"""How a JSON flag value was mangled on its way to the engine, told from what arrived.

vLLM reads its JSON flags (``--speculative-config``, ``--hf-overrides``, ``--compilation-config``,
``--limit-mm-per-prompt``, ``--override-generation-config``, ...) with ``json.loads`` and then
builds a config dataclass from the object (``vllm/engine/arg_utils.py``: ``parse_type(json.loads)``;
a value that is no JSON is "argument --speculative-config: invalid loads value", exit status 2;
one that decodes to a string or a list fails building the config). SGLang reads
``--json-model-override-args`` with ``json.loads`` when it builds the model config and fails the
same way. So each of these is an error on every release that reads the flag as JSON:

- ``split-on-commas``: a launcher split the value at its commas (``{"method": "mtp"`` then
  ``"num_speculative_tokens": 2}`` as separate arguments); the first piece is an unterminated
  object and the rest are stray words;
- ``python-literal``: Python's repr (``{'method': 'mtp'}``, ``True``, ``None``), or the quotes of
  a shell command kept by a launcher that does not run a shell (``'{"a": 1}'`` with its quotes);
- ``quoted-twice``: the object re-quoted into a JSON string (``"{\\"method\\": \\"mtp\\"}"``): it
  decodes to a string, not to an object;
- ``not-an-object``: JSON, but a list or a number where the engine builds a config from an object.

Usage::

    diagnose('{"method": "mtp"', following=['num_speculative_tokens: 2}'])   # "split-on-commas"
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from functools import cache
from typing import Literal

from modelyard.backends.flag_tables import load_engine_history

Mangling = Literal["split-on-commas", "python-literal", "quoted-twice", "not-an-object", "invalid"]

# Flags whose JSON must be an object (they build a config or a mapping from it). Others typed
# "json" in a table may take a list (--allowed-origins) or, in some releases, a plain number
# (--compilation-config 3 is an optimisation level).
OBJECT_FLAGS = {
    "vllm": frozenset(
        {
            "--speculative-config", "--hf-overrides", "--limit-mm-per-prompt",
            "--override-generation-config", "--kv-transfer-config", "--mm-processor-kwargs",
            "--model-loader-extra-config", "--attention-config", "--profiler-config",
        }
    ),
    "sglang": frozenset({"--json-model-override-args", "--model-loader-extra-config"}),
}  # fmt: skip
# Longer values are not tried as Python literals (a pasted wall of text is no config).
MAX_LITERAL_CHARACTERS = 20_000
# Read as JSON in every release that has them, whatever type the flag table could extract
# (vLLM 0.10+ types --hf-overrides as dict | Callable, which get_kwargs parses with json.loads).
ALWAYS_JSON = {"vllm": frozenset({"--hf-overrides"}), "sglang": frozenset({"--json-model-override-args"})}
EXPLANATIONS: dict[Mangling, str] = {
    "split-on-commas": "it was split at its commas into several arguments (a launcher that splits "
    "values on ','), so the engine gets an unterminated object",
    "python-literal": "it is Python's literal syntax, or carries the quotes of a shell command "
    "that no shell removed; JSON needs double quotes and true/false/null",
    "quoted-twice": "it was quoted twice: it decodes to a JSON string holding the object, not to the object",
    "not-an-object": "it is JSON but not an object; the engine builds its config from an object",
    "invalid": "it is not JSON",
}


def json_flag_in_history(engine: str, flag: str) -> bool:
    """Whether some release of ``engine`` reads ``flag`` as JSON (the newest and a middle release's
    tables; the JSON flags of older ones are in ``OBJECT_FLAGS``)."""
    if flag in OBJECT_FLAGS.get(engine, frozenset()):
        return True
    history = load_engine_history(engine)
    return history is not None and history.normalize(flag) in _json_flags(engine)


@cache
def _json_flags(engine: str) -> frozenset[str]:
    history = load_engine_history(engine)
    if history is None:
        return frozenset()
    names: set[str] = set()
    for release in (history.releases[-1], history.releases[len(history.releases) // 2]):
        names.update(name for name, spec in history.table(release).flags.items() if spec.type == "json")
    return frozenset(names)


def diagnose(value: str, *, following: Sequence[str] = (), must_be_object: bool = False) -> Mangling | None:
    """How ``value`` was mangled (None when it is fine); ``following`` are the stray words after it."""
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError:
        return _undecodable(value, following)
    if isinstance(decoded, str):
        try:
            json.loads(decoded)
        except json.JSONDecodeError:
            return "not-an-object" if must_be_object else None
        return "quoted-twice"
    if must_be_object and not isinstance(decoded, dict):
        return "not-an-object"
    return None


def _undecodable(value: str, following: Sequence[str]) -> Mangling:
    text = value.strip()
    if text.count("{") > text.count("}") and following:
        return "split-on-commas"
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return "python-literal"
    if len(text) > MAX_LITERAL_CHARACTERS:
        return "invalid"
    try:
        literal = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return "invalid"
    return "python-literal" if isinstance(literal, dict | list) else "invalid"
