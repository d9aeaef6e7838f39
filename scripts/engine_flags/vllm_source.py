"""vLLM: flags from the config dataclasses and add_cli_args, and the registered parser names."""

from __future__ import annotations

import ast
import re

from engine_flags.common import (
    UNKNOWN,
    ClassInfo,
    FieldInfo,
    Flag,
    Sources,
    add_negations,
    all_fields,
    apply_argparse_keywords,
    call_name,
    index_classes,
    literal,
    literal_choices,
    mark_deprecation,
    new_flag_from,
    option_names,
    short_help,
    type_atoms,
)

# ----------------------------------------------------------------------------- vLLM


def is_dataclass_node(node: ast.ClassDef) -> bool:
    return any(
        call_name(d.func if isinstance(d, ast.Call) else d) in {"config", "dataclass"}
        for d in node.decorator_list
    )


def vllm_flag_from_field(
    name: str, info: FieldInfo, classes: dict[str, ClassInfo], aliases: dict[str, ast.AST]
) -> Flag:
    """Mirror ``vllm.engine.arg_utils._compute_kwargs`` for one dataclass field."""
    atoms = type_atoms(info.annotation, aliases)
    simple = {atom for atom in atoms if isinstance(atom, str)}
    class_names = [atom[1] for atom in atoms if isinstance(atom, tuple) and atom[0] == "class"]
    choices = literal_choices(atoms)
    flag = Flag(name="--" + name.replace("_", "-"), default=info.default, help=short_help(info.doc))
    if any(name in classes and is_dataclass_node(classes[name].node) for name in class_names):
        flag.type = "json"
    elif simple - {"None"} == {"bool", "str"} and "None" in simple and not class_names:
        flag.type, flag.takes_value = "str", "optional"
    elif "bool" in simple:
        flag.type, flag.takes_value = "bool", "none"
        flag.negations = ["--no-" + name.replace("_", "-")]
    elif choices:
        flag.type = "int" if all(isinstance(value, int) for value in choices) else "str"
        # literal_to_kwargs: with str in the union the values are only a metavar, not choices
        flag.choices = None if "str" in simple else choices
    elif simple & {"tuple", "list", "set"}:
        flag.takes_value = "many"
    elif "int" in simple:
        flag.type = "int"
    elif "float" in simple:
        flag.type = "float"
    elif "dict" in simple and ("str" in simple or class_names):
        flag.type = "str"  # union_dict_and_str: JSON when it parses, else a plain string
    elif "dict" in simple:
        flag.type = "json"
    mark_deprecation(flag, info.doc[:200])
    return flag


def functions_named(node: ast.AST, name: str) -> list[ast.FunctionDef]:
    return [item for item in ast.walk(node) if isinstance(item, ast.FunctionDef) and item.name == name]


class VllmExtractor:
    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        wanted = [
            name
            for name in sources.names
            if name.startswith("vllm/")
            and "/third_party/" not in name
            and "vllm_flash_attn" not in name
            and "/tests/" not in name
        ]
        first = [name for name in wanted if name.startswith(("vllm/config/", "vllm/engine/"))]
        typed = [
            name
            for name in wanted
            if name not in first
            and re.search(r"Literal\[|@config|@dataclass|def make_arg_parser", sources.text(name))
        ]
        self.classes, self.aliases = index_classes(sources, first + typed)
        text = (
            sources.text("vllm/utils/argparse_utils.py")
            if "vllm/utils/argparse_utils.py" in sources.names
            else ""
        )
        self.enable_disable = "EnableDisableAction" in text
        self.flags: dict[str, Flag] = {}

    def add(self, flag: Flag) -> None:
        add_negations(flag, self.enable_disable)
        self.flags[flag.name] = flag

    def scan_add_cli_args(self, class_name: str, depth: int = 0) -> None:
        info = self.classes.get(class_name)
        if info is None or depth > 6:
            return
        methods = functions_named(info.node, "add_cli_args")
        if not methods:
            for base in info.bases:
                self.scan_add_cli_args_for(class_name, base, depth + 1)
            return
        self.scan_function(methods[0], class_name, depth)

    def scan_add_cli_args_for(self, class_name: str, owner: str, depth: int) -> None:
        """``class_name`` inherits ``add_cli_args`` from ``owner``."""
        info = self.classes.get(owner)
        if info is None or depth > 6:
            return
        methods = functions_named(info.node, "add_cli_args")
        if methods:
            self.scan_function(methods[0], class_name, depth)
        else:
            for base in info.bases:
                self.scan_add_cli_args_for(class_name, base, depth + 1)

    def scan_function(self, function: ast.FunctionDef, class_name: str, depth: int) -> None:
        kwargs_of: dict[str, str] = {}
        fields_of_self = False
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and call_name(node.value.func) == "get_kwargs"
                and node.value.args
            ):
                target = node.targets[0]
                source_class = call_name(node.value.args[0])
                if isinstance(target, ast.Name):
                    if source_class == "cls":
                        fields_of_self = True
                    else:
                        kwargs_of[target.id] = source_class
        if fields_of_self:
            self.add_fields_as_flags(class_name)
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            if call_name(node.func) == "add_cli_args" and isinstance(node.func, ast.Attribute):
                owner = call_name(node.func.value)
                if owner in self.classes and owner != class_name:
                    self.scan_add_cli_args(owner, depth + 1)
            if call_name(node.func) == "add_argument":
                self.add_from_call(node, kwargs_of)

    def add_fields_as_flags(self, class_name: str) -> None:
        extra_flags: dict[str, list[str]] = {}
        json_fields: set[str] = set()
        for owner in self.lineage(class_name):
            for method in functions_named(self.classes[owner].node, "_customize_cli_kwargs"):
                for node in ast.walk(method):
                    if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)):
                        continue
                    outer = node.targets[0]
                    inner = outer.value
                    key = literal(outer.slice)
                    field_name = literal(inner.slice) if isinstance(inner, ast.Subscript) else UNKNOWN
                    if not isinstance(field_name, str):
                        continue
                    if key == "flags" and isinstance(literal(node.value), list):
                        extra_flags[field_name] = literal(node.value)
                    if key == "type" and "json" in ast.unparse(node.value):
                        json_fields.add(field_name)
        for name, info in all_fields(self.classes, class_name).items():
            flag = vllm_flag_from_field(name, info, self.classes, self.aliases)
            flag.aliases = extra_flags.get(name, [])
            if name in json_fields:
                flag.type, flag.takes_value = "json", "one"
            self.add(flag)

    def lineage(self, class_name: str) -> list[str]:
        order: list[str] = []
        pending = [class_name]
        while pending and len(order) < 10:
            current = pending.pop(0)
            if current in self.classes and current not in order:
                order.append(current)
                pending.extend(self.classes[current].bases)
        return order

    def add_from_call(self, call: ast.Call, kwargs_of: dict[str, str]) -> None:
        names = option_names(call)
        if not names:
            return
        base: Flag | None = None
        keywords: dict[str, ast.AST] = {}
        for keyword in call.keywords:
            if keyword.arg is not None:
                keywords[keyword.arg] = keyword.value
                continue
            value = keyword.value
            if isinstance(value, ast.Dict):
                for key, item in zip(value.keys, value.values, strict=True):
                    if key is None:
                        base = self.field_flag(item, kwargs_of) or base
                    elif isinstance(literal(key), str):
                        keywords[literal(key)] = item
            else:
                base = self.field_flag(value, kwargs_of) or base
        flag = new_flag_from(names)
        if base is not None:
            flag.type, flag.takes_value, flag.choices = base.type, base.takes_value, base.choices
            flag.default, flag.help = base.default, base.help
            flag.deprecated, flag.renamed_to = base.deprecated, base.renamed_to
            if base.negations:
                flag.negations = [
                    "--no-" + name.removeprefix("--") for name in names if name.startswith("--")
                ]
        apply_argparse_keywords(flag, keywords, self.aliases)
        self.add(flag)

    def field_flag(self, node: ast.AST, kwargs_of: dict[str, str]) -> Flag | None:
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            return None
        class_name = kwargs_of.get(node.value.id)
        field_name = literal(node.slice)
        if class_name is None or not isinstance(field_name, str):
            return None
        info = all_fields(self.classes, class_name).get(field_name)
        if info is None:
            return None
        return vllm_flag_from_field(field_name, info, self.classes, self.aliases)

    def extract(self) -> dict[str, Flag]:
        parser_files = [
            name
            for name in self.sources.matching(r"^vllm/entrypoints/.*cli_args\.py$")
            if "def make_arg_parser" in self.sources.text(name)
        ]
        for name in parser_files + self.sources.matching(r"^vllm/entrypoints/cli/serve\.py$"):
            tree = self.sources.tree(name)
            for function in functions_named(tree, "make_arg_parser") + functions_named(
                tree, "subparser_init"
            ):
                self.scan_function(function, "", 0)
        return self.flags


def vllm_parser_names(sources: Sources, directory: str, registry: str) -> list[str]:
    names: set[str] = set()
    for name in sources.matching(rf"^vllm/{directory}/[^/]+\.py$"):
        for node in ast.walk(sources.tree(name)):
            if isinstance(node, ast.Assign) and call_name(node.targets[0]) == registry:
                value = node.value
                if isinstance(value, ast.Dict):
                    names.update(str(key.value) for key in value.keys if isinstance(key, ast.Constant))
            if isinstance(node, ast.Call) and call_name(node.func) == "register_module":
                for argument in node.args[:1]:
                    value = literal(argument)
                    if isinstance(value, str):
                        names.add(value)
                    elif isinstance(value, list):
                        names.update(item for item in value if isinstance(item, str))
    return sorted(names)
