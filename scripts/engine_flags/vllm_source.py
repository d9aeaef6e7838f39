"""vLLM: flags from the config dataclasses and add_cli_args, and the registered parser names."""

from __future__ import annotations

import ast

from engine_flags.archive import Sources
from engine_flags.common import (
    UNKNOWN,
    ClassInfo,
    FieldInfo,
    Flag,
    add_negations,
    all_fields,
    apply_argparse_keywords,
    call_name,
    index_reachable,
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


def _items_owner(node: ast.AST) -> str:
    """``kwargs.items()`` -> ``kwargs``."""
    if (
        isinstance(node, ast.Call)
        and call_name(node.func) == "items"
        and isinstance(node.func, ast.Attribute)
    ):
        return call_name(node.func.value)
    return ""


def _kwargs_item(node: ast.AST) -> tuple[str, object]:
    """``kwargs["field"]["key"]`` -> ("field", "key"); ("", None) for anything else."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Subscript):
        field_name = literal(node.value.slice)
        if isinstance(field_name, str):
            return field_name, literal(node.slice)
    return "", None


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
        roots = [
            name
            for name in wanted
            if name.startswith(("vllm/config/", "vllm/engine/"))
            or name in {"vllm/config.py", "vllm/entrypoints/cli/serve.py"}
            or name.endswith("cli_args.py")
        ]
        self.classes, self.aliases = index_reachable(sources, roots, wanted)
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
        """One ``add_cli_args`` (or ``make_arg_parser``): its ``add_argument`` calls, the dataclass
        fields it registers in a loop over ``get_kwargs(...)``, and the ``add_cli_args`` it calls."""
        kwargs_of: dict[str, str] = {}
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and call_name(node.value.func) == "get_kwargs"
                and node.value.args
                and isinstance(node.targets[0], ast.Name)
            ):
                source_class = call_name(node.value.args[0])
                kwargs_of[node.targets[0].id] = class_name if source_class == "cls" else source_class
        looped = {
            kwargs_of[name]
            for node in ast.walk(function)
            if isinstance(node, ast.For)
            and (name := _items_owner(node.iter)) in kwargs_of
            and any(
                isinstance(inner, ast.Call) and call_name(inner.func) == "add_argument"
                for inner in ast.walk(node)
            )
        }
        for looped_class in sorted(looped):
            self.add_fields_as_flags(looped_class, [function])
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            if call_name(node.func) == "add_cli_args" and isinstance(node.func, ast.Attribute):
                owner = call_name(node.func.value)
                if owner in self.classes and owner != class_name:
                    self.scan_add_cli_args(owner, depth + 1)
            if call_name(node.func) == "add_argument":
                self.add_from_call(node, kwargs_of)

    def add_fields_as_flags(self, class_name: str, functions: list[ast.FunctionDef]) -> None:
        """Every field of ``class_name`` as a flag, with the kwargs changes ``functions`` make."""
        methods = list(functions)
        for owner in self.lineage(class_name):
            methods.extend(functions_named(self.classes[owner].node, "_customize_cli_kwargs"))
        extra_flags: dict[str, list[str]] = {}
        json_fields: set[str] = set()
        single_fields: set[str] = set()
        for method in methods:
            for node in ast.walk(method):
                if isinstance(node, ast.Delete):
                    for target in node.targets:
                        field_name, key = _kwargs_item(target)
                        if field_name and key == "nargs":
                            single_fields.add(field_name)
                if not isinstance(node, ast.Assign):
                    continue
                field_name, key = _kwargs_item(node.targets[0])
                if not field_name:
                    continue
                if key == "flags" and isinstance(literal(node.value), list):
                    extra_flags[field_name] = literal(node.value)
                if key == "type" and "json" in ast.unparse(node.value):
                    json_fields.add(field_name)
                if key == "action" and literal(node.value) == "append":
                    single_fields.add(field_name)
        for name, info in all_fields(self.classes, class_name).items():
            flag = vllm_flag_from_field(name, info, self.classes, self.aliases)
            flag.aliases = extra_flags.get(name, [])
            if name in json_fields:
                flag.type, flag.takes_value = "json", "one"
            elif name in single_fields and flag.takes_value == "many":
                flag.takes_value = "one"
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
        default = keywords.get("default")
        if isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name):
            # 0.6-0.9: default=EngineArgs.max_model_len, the dataclass field's default
            owner = all_fields(self.classes, default.value.id).get(default.attr)
            if owner is not None and owner.default is not UNKNOWN:
                flag.default = owner.default
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


PARSER_MANAGERS = {"tool": "ToolParserManager", "reasoning": "ReasoningParserManager"}
PARSER_REGISTRIES = {"tool": "_TOOL_PARSERS_TO_REGISTER", "reasoning": "_REASONING_PARSERS_TO_REGISTER"}


def vllm_parser_names(sources: Sources, kind: str) -> list[str]:
    """The names ``kind`` (``tool``, ``reasoning``) parsers are registered under, in every layout:
    ``@ToolParserManager.register_module("hermes")`` (0.6-0.11, also with a list or ``name=``) and
    the lazy ``_TOOL_PARSERS_TO_REGISTER = {"hermes": (module, class)}`` tables (0.11 and later)."""
    manager, registry = PARSER_MANAGERS[kind], PARSER_REGISTRIES[kind]
    names: set[str] = set()
    for name in sources.names:
        if not name.startswith("vllm/") or "/tests/" in name:
            continue
        text = sources.text(name)
        if manager not in text and registry not in text:
            continue
        for node in ast.walk(sources.tree(name)):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                if call_name(target) == registry and isinstance(node.value, ast.Dict):
                    names.update(
                        key.value
                        for key in node.value.keys
                        if isinstance(key, ast.Constant) and isinstance(key.value, str)
                    )
            if not (
                isinstance(node, ast.Call)
                and call_name(node.func) == "register_module"
                and isinstance(node.func, ast.Attribute)
                and call_name(node.func.value) == manager
            ):
                continue
            arguments = list(node.args[:1]) + [
                keyword.value for keyword in node.keywords if keyword.arg in {"name", "names"}
            ]
            for argument in arguments:
                value = literal(argument)
                if isinstance(value, str):
                    names.add(value)
                elif isinstance(value, (list, tuple)):
                    names.update(item for item in value if isinstance(item, str))
    return sorted(names)
