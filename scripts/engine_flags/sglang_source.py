"""SGLang: flags from add_argument calls and A[type, Arg(...)] fields, and the parser names."""

from __future__ import annotations

import ast
from typing import Any

from engine_flags.archive import Sources
from engine_flags.common import (
    FieldInfo,
    Flag,
    apply_argparse_keywords,
    call_name,
    index_classes,
    joined_text,
    literal,
    literal_choices,
    new_flag_from,
    option_names,
    type_atoms,
)

# ----------------------------------------------------------------------------- SGLang


def sglang_flag_from_field(name: str, info: FieldInfo, aliases: dict[str, ast.AST]) -> Flag | None:
    """Mirror ``add_cli_args_from_dataclass`` for one ``A[type, Arg(...)]`` field (None: no flag)."""
    annotation = info.annotation
    if not (isinstance(annotation, ast.Subscript) and call_name(annotation.value) in {"A", "Annotated"}):
        return None
    items = list(annotation.slice.elts) if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    metadata: dict[str, ast.AST] | None = None
    for item in items[1:]:
        if isinstance(item, ast.Call) and call_name(item.func) == "Arg":
            metadata = {keyword.arg: keyword.value for keyword in item.keywords if keyword.arg}
            break
        text = joined_text(item)
        if text:
            metadata = {"help": item}
            break
    if metadata is None or literal(metadata.get("no_cli")) is True:
        return None
    cli_name = literal(metadata.get("cli_name"))
    flag = Flag(name=cli_name if isinstance(cli_name, str) else "--" + name.replace("_", "-"))
    extra = literal(metadata.get("aliases"))
    flag.aliases = [alias for alias in extra if isinstance(alias, str)] if isinstance(extra, list) else []
    flag.default = info.default
    atoms = type_atoms(items[0], aliases)
    simple = {atom for atom in atoms if isinstance(atom, str)}
    choices = literal_choices(atoms)
    type_parser = ast.unparse(metadata["type_parser"]) if "type_parser" in metadata else ""
    if "action" in metadata:
        keywords = {"action": metadata["action"]}
    elif choices:
        flag.choices = choices
        keywords = {}
    elif "list" in simple and not type_parser:
        flag.takes_value = "many"
        keywords = {}
    elif simple - {"None"} == {"bool"}:
        flag.type, flag.takes_value = "bool", "none"
        keywords = {}
    else:
        flag.type = (
            "int" if simple - {"None"} == {"int"} else "float" if simple - {"None"} == {"float"} else "str"
        )
        keywords = {}
    if "json" in type_parser.lower():
        flag.type, flag.takes_value = "json", "one"
    for key in ("choices", "nargs", "help"):
        if key in metadata:
            keywords[key] = metadata[key]
    apply_argparse_keywords(flag, keywords, aliases)
    return flag


def sglang_flags(sources: Sources) -> dict[str, Flag]:
    files = sources.matching(r"^sglang/srt/(server_args\.py|arg_groups/.*\.py)$")
    constants = sources.matching(r"^sglang/srt/(arg_groups/choices\.py|server_args\.py)$")
    classes, aliases = index_classes(sources, constants + [name for name in files if name not in constants])
    defaults: dict[str, Any] = {}
    flags: dict[str, Flag] = {}
    for info in classes.values():
        for name, field_info in info.fields.items():
            defaults.setdefault(name, field_info.default)
            flag = sglang_flag_from_field(name, field_info, aliases)
            if flag is not None:
                flags[flag.name] = flag
    for name in files:
        for node in ast.walk(sources.tree(name)):
            if not (isinstance(node, ast.Call) and call_name(node.func) == "add_argument"):
                continue
            names = option_names(node)
            if not names:
                continue
            flag = new_flag_from(names)
            keywords: dict[str, ast.AST] = {
                keyword.arg: keyword.value for keyword in node.keywords if keyword.arg
            }
            default_node = keywords.get("default")
            apply_argparse_keywords(flag, keywords, aliases)
            if isinstance(default_node, ast.Attribute) and default_node.attr in defaults:
                flag.default = defaults[default_node.attr]
            if isinstance(default_node, ast.Call) and default_node.args:
                field_name = literal(default_node.args[0])
                if isinstance(field_name, str) and field_name in defaults:
                    flag.default = defaults[field_name]
            flags[flag.name] = flag
    return flags


SGLANG_PARSER_REGISTRIES = {
    # kind -> (the list of names 0.5.23 keeps apart, the detector dict every version has)
    "tool": ("TOOL_CALL_PARSER_NAMES", "ToolCallParserEnum"),
    "reasoning": ("REASONING_PARSER_NAMES", "DetectorMap"),
}


def sglang_parser_names(sources: Sources, kind: str) -> list[str]:
    """The ``kind`` (``tool``, ``reasoning``) parser names: the keys of ``ToolCallParserEnum`` /
    ``DetectorMap`` wherever they live (``srt/function_call_parser.py`` in 0.4.2-0.4.6,
    ``srt/function_call/`` later; ``srt/reasoning_parser.py``, then ``srt/parser/``), and the
    name lists of 0.5.23."""
    list_name, registry = SGLANG_PARSER_REGISTRIES[kind]
    names: set[str] = set()
    for name in sources.matching(r"^sglang/srt/.*\.py$"):
        text = sources.text(name)
        if list_name not in text and registry not in text:
            continue
        for node in ast.walk(sources.tree(name)):
            if isinstance(node, ast.Assign):
                target, assigned = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, assigned = node.target, node.value
            else:
                continue
            if call_name(target) == list_name:
                value = literal(assigned)
                if isinstance(value, (list, tuple, set, frozenset)):
                    names.update(item for item in value if isinstance(item, str))
            if call_name(target) == registry and isinstance(assigned, ast.Dict):
                names.update(
                    key.value
                    for key in assigned.keys
                    if isinstance(key, ast.Constant) and isinstance(key.value, str)
                )
    return sorted(names)
