"""The environment variables an engine wheel reads, and those it only warns about as removed."""

from __future__ import annotations

import ast
import re

from engine_flags.archive import Sources
from engine_flags.common import call_name, joined_text, short_help

ENV_PREFIXES = {"vllm": ("VLLM_",), "sglang": ("SGLANG_", "SGL_")}


def _deprecated_registry(tree: ast.Module) -> dict[str, str]:
    """SGLang's ``_DEPRECATED_ENVS = {"NAME": _DeprecatedEnv(note=...)}``: name -> note."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and call_name(node.targets[0]) == "_DEPRECATED_ENVS"):
            continue
        if not isinstance(node.value, ast.Dict):
            continue
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                keywords = value.keywords if isinstance(value, ast.Call) else []
                note = " ".join(joined_text(keyword.value) for keyword in keywords)
                found[key.value] = short_help(note) or "deprecated"
    return found


def environment_variables(sources: Sources, engine: str) -> tuple[list[str], dict[str, str]]:
    """Every env var name the package mentions, and those it only reads to warn they are gone."""
    prefix_group = "(?:" + "|".join(ENV_PREFIXES[engine]) + ")"
    quoted = re.compile(r"[\"'](" + prefix_group + r"[A-Z0-9_]+)[\"']")
    declared = re.compile(r"^\s+(" + prefix_group + r"[A-Z0-9_]+)\s*[:=]", re.MULTILINE)
    removed = re.compile(
        r"\"(" + prefix_group + r"[A-Z0-9_]+ (?:has been|is|was) (?:removed|deprecated)[^\"]*)\""
    )
    renamed = re.compile(r"deprecated_name=\"([A-Z0-9_]+)\"")
    read: set[str] = set()
    deprecated: dict[str, str] = {}
    for name in sources.names:
        if not name.startswith(f"{engine}/") or "/test" in name:
            continue
        text = sources.text(name)
        if not any(prefix in text for prefix in ENV_PREFIXES[engine]):
            continue
        read.update(match.group(1) for match in quoted.finditer(text))
        if name.endswith(("envs.py", "environ.py")):
            read.update(declared.findall(text))
            deprecated.update(_deprecated_registry(sources.tree(name)))
        for sentence in removed.findall(text):
            deprecated[sentence.split()[0]] = short_help(sentence)
        for old_name in renamed.findall(text):
            deprecated.setdefault(old_name, "deprecated alias of a renamed variable")
    for name in deprecated:
        read.discard(name)
    return sorted(read), dict(sorted(deprecated.items()))
