"""What the engine extractors share: the wheel's sources, ast helpers and the Flag record."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from engine_flags.archive import Sources

HELP_CHARACTERS = 120
# Subscripted annotations whose first argument is the type: typing's and pydantic's markers.
TYPE_WRAPPERS = {
    "Annotated",
    "A",
    "SkipValidation",
    "ClassVar",
    "Final",
    "InitVar",
    "Required",
    "NotRequired",
    "ReadOnly",
}
UNKNOWN = object()


# ----------------------------------------------------------------------------- ast helpers


def literal(node: ast.AST | None) -> Any:
    if node is None:
        return UNKNOWN
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


def short_help(text: Any) -> str:
    if not isinstance(text, str):
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= HELP_CHARACTERS else flat[: HELP_CHARACTERS - 3].rstrip() + "..."


def joined_text(node: ast.AST | None) -> str:
    """Literal text of a str constant, implicit concatenation or f-string (placeholders dropped)."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(joined_text(part) for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return joined_text(node.left) + joined_text(node.right)
    return ""


def json_safe(value: Any) -> Any:
    if value is UNKNOWN:
        return None
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple, set)):
        items = [json_safe(item) for item in value]
        return sorted(items, key=str) if isinstance(value, set) else items
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    return None


def call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


@dataclass
class Flag:
    """One command-line flag, as the tables store it."""

    name: str
    aliases: list[str] = field(default_factory=list)
    type: str = "str"  # bool, int, float, str, json
    takes_value: str = "one"  # none, one, optional, many
    choices: list[Any] | None = None
    default: Any = None
    negations: list[str] = field(default_factory=list)
    deprecated: bool = False
    renamed_to: str | None = None
    help: str = ""
    choice_constants: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.type, "takes_value": self.takes_value}
        for key in ("aliases", "choices", "negations"):
            value = getattr(self, key)
            if value:
                data[key] = value
        default = json_safe(self.default)
        if default not in (None, "", [], {}):
            data["default"] = default
        if self.deprecated:
            data["deprecated"] = True
        if self.renamed_to:
            data["renamed_to"] = self.renamed_to
        if self.help:
            data["help"] = self.help
        return data


RENAMED_PATTERN = re.compile(r"(?:[Uu]se|[Rr]eplaced by|[Rr]enamed to|alias for)\s+`?(--[a-z0-9][a-z0-9-]*)")


def mark_deprecation(flag: Flag, help_text: str, new_flag: str | None = None) -> None:
    lowered = help_text.lower()
    if new_flag or "deprecated" in lowered or "will be removed" in lowered:
        flag.deprecated = True
        match = RENAMED_PATTERN.search(help_text)
        flag.renamed_to = new_flag or (match.group(1) if match else None)


# ----------------------------------------------------------------------------- type annotations


@dataclass
class FieldInfo:
    annotation: ast.AST | None
    default: Any
    doc: str


@dataclass
class ClassInfo:
    name: str
    bases: list[str]
    fields: dict[str, FieldInfo]
    node: ast.ClassDef


def field_default(value: ast.AST | None) -> Any:
    if value is None:
        return UNKNOWN
    if isinstance(value, ast.Call) and call_name(value.func) in {"field", "Field"}:
        for keyword in value.keywords:
            if keyword.arg == "default":
                return literal(keyword.value)
            if keyword.arg == "default_factory":
                return {"list": [], "dict": {}, "set": []}.get(call_name(keyword.value), UNKNOWN)
        return UNKNOWN
    return literal(value)


def index_classes(sources: Sources, names: list[str]) -> tuple[dict[str, ClassInfo], dict[str, ast.AST]]:
    """Classes with annotated fields, and module-level type aliases / constants, by name."""
    classes: dict[str, ClassInfo] = {}
    aliases: dict[str, ast.AST] = {}
    for name in names:
        try:
            tree = sources.tree(name)
        except SyntaxError:
            continue
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                aliases.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                aliases.setdefault(node.target.id, node.value)
            elif sys.version_info >= (3, 12) and isinstance(node, ast.TypeAlias):
                aliases.setdefault(node.name.id, node.value)
            elif isinstance(node, ast.ClassDef):
                fields: dict[str, FieldInfo] = {}
                body = node.body
                for position, statement in enumerate(body):
                    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                        following = body[position + 1] if position + 1 < len(body) else None
                        doc = ""
                        if isinstance(following, ast.Expr):
                            doc = joined_text(following.value)
                        fields[statement.target.id] = FieldInfo(
                            statement.annotation, field_default(statement.value), doc
                        )
                bases = [call_name(base) for base in node.bases]
                classes.setdefault(node.name, ClassInfo(node.name, bases, fields, node))
    return classes, aliases


def _names_in(node: ast.AST | None) -> set[str]:
    """Capitalised names (types, constants) a node refers to: what may be defined elsewhere."""
    if node is None:
        return set()
    names = {item.id for item in ast.walk(node) if isinstance(item, ast.Name) and item.id[:1].isupper()}
    for item in ast.walk(node):  # string annotations: "ModelConfig | None"
        if isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value[:1].isupper():
            try:
                names |= _names_in(ast.parse(item.value, mode="eval"))
            except SyntaxError:
                continue
    return names


def _root_references(sources: Sources, files: list[str], classes: dict[str, ClassInfo]) -> set[str]:
    """What the classes of ``files`` name in their fields and bases, and their choices and types."""
    wanted: set[str] = set()
    for info in classes.values():
        wanted.update(info.bases)
        for field_info in info.fields.values():
            wanted |= _names_in(field_info.annotation)
    for name in files:
        for node in ast.walk(sources.tree(name)):
            if isinstance(node, ast.keyword) and node.arg in {"choices", "type"}:
                wanted |= _names_in(node.value)
    return wanted


def index_reachable(
    sources: Sources, roots: list[str], candidates: list[str], rounds: int = 5
) -> tuple[dict[str, ClassInfo], dict[str, ast.AST]]:
    """``index_classes`` of ``roots`` and of the ``candidates`` that define what they refer to.

    Parsing every file of a large package takes most of an extraction (vLLM 0.33: 640 files,
    13 s); a text search for the definitions of the names still unknown finds the few needed.
    Names are followed through the aliases and base classes that define them.
    """
    classes, aliases = index_classes(sources, roots)
    frontier = _root_references(sources, roots, classes)
    expanded: set[str] = set()
    searched: set[str] = set()
    indexed = set(roots)
    for _ in range(rounds):
        missing: set[str] = set()
        while frontier:
            name = frontier.pop()
            if name in expanded:
                continue
            if name in aliases:
                expanded.add(name)
                frontier |= _names_in(aliases[name])
            elif name in classes:
                expanded.add(name)
                frontier.update(classes[name].bases)
            elif name not in searched:
                missing.add(name)
        missing = {name for name in missing if name.isidentifier()}
        if not missing:
            break
        searched |= missing
        group = "|".join(sorted(map(re.escape, missing)))
        pattern = re.compile(
            rf"^(?:class\s+(?:{group})\b|(?:{group})\s*(?::[^=\n]*)?=[^=]|type\s+(?:{group})\b)", re.M
        )
        files = [name for name in candidates if name not in indexed and pattern.search(sources.text(name))]
        indexed.update(files)
        more_classes, more_aliases = index_classes(sources, files)
        for key, info in more_classes.items():
            classes.setdefault(key, info)
        for key, value in more_aliases.items():
            aliases.setdefault(key, value)
        frontier = missing
    return classes, aliases


def all_fields(classes: dict[str, ClassInfo], name: str, depth: int = 0) -> dict[str, FieldInfo]:
    info = classes.get(name)
    if info is None or depth > 10:
        return {}
    merged: dict[str, FieldInfo] = {}
    for base in info.bases:
        merged.update(all_fields(classes, base, depth + 1))
    merged.update(info.fields)
    return merged


def type_atoms(node: ast.AST | None, aliases: dict[str, ast.AST], depth: int = 0) -> list[Any]:
    """Flatten an annotation into atoms: builtin names, ('literal', values), ('class', name)."""
    if node is None or depth > 12:
        return []
    if isinstance(node, ast.Constant):
        if node.value is None:
            return ["None"]
        if isinstance(node.value, str):  # a string annotation
            try:
                return type_atoms(ast.parse(node.value, mode="eval").body, aliases, depth + 1)
            except SyntaxError:
                return []
        return []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return type_atoms(node.left, aliases, depth + 1) + type_atoms(node.right, aliases, depth + 1)
    if isinstance(node, ast.Subscript):
        outer = call_name(node.value)
        inner = node.slice
        items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if outer == "Literal":
            values: list[Any] = []
            for item in items:  # Literal["auto", RunnerType] nests another Literal alias
                value = literal(item)
                if value is not UNKNOWN:
                    values.append(value)
                elif isinstance(item, ast.Name):
                    values.extend(literal_choices(type_atoms(item, aliases, depth + 1)))
            return [("literal", values)]
        if outer in {"Optional", "Union"}:
            return [atom for item in items for atom in type_atoms(item, aliases, depth + 1)]
        if outer in TYPE_WRAPPERS:  # Annotated[int, ...], SkipValidation[int]: the type inside
            return type_atoms(items[0], aliases, depth + 1)
        lowered = outer.lower()
        if lowered in {"list", "tuple", "set", "sequence"}:
            return [lowered if lowered != "sequence" else "list"]
        if lowered in {"dict", "mapping"}:
            return ["dict"]
        return type_atoms(node.value, aliases, depth + 1)
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = call_name(node)
        if name in {"bool", "int", "float", "str", "dict", "list", "tuple", "set", "None", "Any"}:
            return [name]
        if name in {"Dict", "List", "Tuple", "Set"}:
            return [name.lower()]
        if name in aliases:
            return type_atoms(aliases[name], aliases, depth + 1)
        return [("class", name)]
    return []


def literal_choices(atoms: list[Any]) -> list[Any]:
    """The values of the Literal atoms, in order, each once."""
    values: list[Any] = []
    for atom in atoms:
        if isinstance(atom, tuple) and atom[0] == "literal":
            values.extend(value for value in atom[1] if value is not UNKNOWN and value not in values)
    return values


def resolve_list(node: ast.AST | None, aliases: dict[str, ast.AST], depth: int = 0) -> list[Any] | None:
    """A list of choices from a literal, a module constant, ``list(X)``, ``X + Y`` or a Literal alias."""
    if node is None or depth > 8:
        return None
    value = literal(node)
    if isinstance(value, (set, frozenset)):
        return sorted(json_safe(list(value)), key=str)
    if isinstance(value, (list, tuple)):
        return json_safe(list(value))  # type: ignore[no-any-return]
    if isinstance(value, dict):
        return list(value)
    if isinstance(node, ast.Name) and node.id in aliases:
        target = aliases[node.id]
        if isinstance(target, ast.Subscript) and call_name(target.value) == "Literal":
            return literal_choices(type_atoms(target, aliases))
        return resolve_list(target, aliases, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = resolve_list(node.left, aliases, depth + 1)
        right = resolve_list(node.right, aliases, depth + 1)
        return None if left is None or right is None else left + right
    if (
        isinstance(node, ast.Call)
        and call_name(node.func) in {"list", "sorted", "set", "tuple"}
        and node.args
    ):
        return resolve_list(node.args[0], aliases, depth + 1)
    if isinstance(node, ast.Call) and call_name(node.func) == "get_args" and node.args:
        return literal_choices(type_atoms(node.args[0], aliases))
    return None


def apply_argparse_keywords(flag: Flag, keywords: dict[str, ast.AST], aliases: dict[str, ast.AST]) -> None:
    """Apply the keyword arguments of one ``add_argument`` call to ``flag``."""
    if "type" in keywords:
        type_source = ast.unparse(keywords["type"])
        if "json" in type_source.lower() or "dict" in type_source.lower():
            flag.type, flag.takes_value = "json", "one"
        elif "float" in type_source:
            flag.type = "float"
        elif "int" in type_source and "str" not in type_source:
            flag.type = "int"
        else:
            flag.type = "str"
        if flag.takes_value == "none":
            flag.takes_value = "one"
    if "nargs" in keywords:
        nargs = literal(keywords["nargs"])
        flag.takes_value = {"?": "optional", "+": "many", "*": "many"}.get(str(nargs), "many")
    if "choices" in keywords:
        flag.choices = resolve_list(keywords["choices"], aliases)
        if flag.choices is None:  # e.g. ["auto"] + names computed at run time: keep the constants
            flag.choice_constants = [
                node.value
                for node in ast.walk(keywords["choices"])
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
            ]
    if "default" in keywords:
        default = literal(keywords["default"])
        flag.default = None if default is UNKNOWN else default
    help_text = ""
    if "help" in keywords:
        node = keywords["help"]
        if isinstance(node, ast.Name) and node.id in aliases:
            node = aliases[node.id]
        help_text = joined_text(node)
        if help_text:
            flag.help = short_help(help_text)
    action_name = ""
    if "action" in keywords:
        action = keywords["action"]
        action_name = str(literal(action)) if isinstance(action, ast.Constant) else call_name(action)
        if action_name in {"store_true", "store_false", "store_const", "count"} or "StoreTrue" in action_name:
            flag.type, flag.takes_value = "bool", "none"
        elif action_name == "BooleanOptionalAction":
            flag.type, flag.takes_value = "bool", "none"
            flag.negations = ["--no-" + name.removeprefix("--") for name in [flag.name, *flag.aliases]]
    new_flag = literal(keywords.get("new_flag")) if "new_flag" in keywords else None
    deprecated = literal(keywords.get("deprecated")) is True or "Deprecat" in action_name
    if deprecated or new_flag or help_text:
        mark_deprecation(flag, help_text if not deprecated else help_text + " deprecated", new_flag)


def option_names(call: ast.Call) -> list[str]:
    return [
        argument.value
        for argument in call.args
        if isinstance(argument, ast.Constant)
        and isinstance(argument.value, str)
        and argument.value.startswith("-")
    ]


def new_flag_from(names: list[str]) -> Flag:
    long_names = [name for name in names if name.startswith("--")] or names
    primary = long_names[0]
    return Flag(name=primary, aliases=[name for name in names if name != primary])


def add_negations(flag: Flag, enable_disable: bool) -> None:
    if flag.type != "bool" or flag.takes_value != "none" or not flag.negations:
        return
    if enable_disable:
        for name in [flag.name, *flag.aliases]:
            for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                if name.startswith(prefix):
                    flag.negations.append(inverse + name.removeprefix(prefix))
