"""Parse YAML keeping each value's position, so that errors can name the line and column.

``yaml.safe_load`` forgets where things were. ``YamlDocument`` keeps the composed node tree
beside the data, maps a key path such as ``["version_configs", "0.25.0", "run_command"]`` back to
its line, and turns pydantic validation errors into ``InvalidYaml`` messages::

    document = YamlDocument.parse(text, what="backend YAML")
    raise document.error(["default_version"], "default_version '9' is not one of the versions")
    # InvalidYaml: backend YAML line 2, column 18: default_version: default_version '9' is ...

YAML from users is bounded before anything walks it: nesting deeper than ``MAXIMUM_YAML_DEPTH``
is refused while composing (PyYAML's composer recurses once per level), and a document whose
aliases would expand to more than ``MAXIMUM_EXPANDED_NODES`` nodes (a "billion laughs" bomb: 554
bytes once kept the server busy for 12 s) or refer to themselves is refused before it is
checked or validated. Every walk of the node graph below visits each node once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError
from yaml.constructor import SafeConstructor

from modelyard.errors import InvalidYaml

# A backend YAML has a few hundred nodes; these leave room for many backends in one file.
MAXIMUM_YAML_DEPTH = 64
MAXIMUM_EXPANDED_NODES = 100_000

KEY = "[key]"  # a path element meaning "the key itself, not its value" (as pydantic writes it)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_NODE_KIND = {yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list", yaml.ScalarNode: "a single value"}


def positioned_error(
    what: str, line: int, column: int | None, message: str, *, hint: str | None = None
) -> InvalidYaml:
    """``InvalidYaml('<what> line L, column C: <message>')`` carrying ``line``, ``column`` and the
    message without its position (1-based; ``column`` None where only the line is known)."""
    place = f"line {line}" + (f", column {column}" if column is not None else "")
    error = InvalidYaml(f"{what} {place}: {message}", hint=hint)
    error.line, error.column, error.message_without_position = line, column, message
    return error


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses to compose nesting deeper than ``MAXIMUM_YAML_DEPTH``."""

    def __init__(self, text: str, what: str) -> None:
        super().__init__(text)
        self._what = what
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner looks ahead across open brackets at a cost that grows with their number:
        # deep flow nesting ([[[[...) is refused as the brackets are read, before the composer.
        if self.flow_level >= MAXIMUM_YAML_DEPTH:
            self._too_deep(self.get_mark())  # type: ignore[no-untyped-call]
        super().fetch_flow_collection_start(TokenClass)  # type: ignore[no-untyped-call]

    def _too_deep(self, mark: yaml.Mark) -> None:
        raise positioned_error(
            self._what,
            mark.line + 1,
            mark.column + 1,
            f"nested deeper than {MAXIMUM_YAML_DEPTH} levels",
            hint="a backend YAML needs a few levels; check the indentation and brackets",
        )

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAXIMUM_YAML_DEPTH:
                self._too_deep(self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1


def _check_expansion(root: yaml.Node, what: str) -> None:
    """Refuse aliases that refer to their own node, or that expand past ``MAXIMUM_EXPANDED_NODES``.

    The expanded size of each node (itself and, through aliases, everything under it as often as
    it is referred to) is computed once per node, so the check is linear in the document.
    """
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            in_progress.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > MAXIMUM_EXPANDED_NODES:
                raise positioned_error(
                    what,
                    node.start_mark.line + 1,
                    None,
                    f"its aliases expand to more than {MAXIMUM_EXPANDED_NODES} values",
                    hint="write the values out, or refer to an anchor fewer times",
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in in_progress:
            raise positioned_error(
                what,
                node.start_mark.line + 1,
                None,
                "an alias refers to the value that contains it",
                hint="an anchor cannot be used inside its own value",
            )
        in_progress.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


class _DuplicateKey(Exception):
    def __init__(self, first: yaml.Node, second: yaml.Node) -> None:
        self.first = first
        self.second = second


def _walk_children(node: yaml.Node, constructor: SafeConstructor) -> Iterator[yaml.Node]:
    """The children of ``node`` in document order; a mapping's keys are checked as it goes."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, yaml.Node] = {}
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG and isinstance(key_node, yaml.ScalarNode):
                key = constructor.construct_object(key_node)
                if key in seen:
                    raise _DuplicateKey(seen[key], key_node)
                seen[key] = key_node
            yield value_node
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


def _duplicate_key(root: yaml.Node, constructor: SafeConstructor) -> tuple[yaml.Node, yaml.Node] | None:
    """The first key given twice in one mapping (merge keys ``<<`` aside): (first, second).

    Depth first in document order, without recursion; each node is looked at once, however
    many aliases refer to it.
    """
    visited: set[int] = set()
    stack: list[Iterator[yaml.Node]] = [iter([root])]
    try:
        while stack:
            node = next(stack[-1], None)
            if node is None:
                stack.pop()
            elif id(node) not in visited:
                visited.add(id(node))
                stack.append(_walk_children(node, constructor))
    except _DuplicateKey as duplicate:
        return duplicate.first, duplicate.second
    return None


@dataclass
class YamlDocument:
    """Parsed YAML data with the node tree it came from."""

    data: Any
    root: yaml.Node
    what: str
    _constructor: SafeConstructor = field(default_factory=SafeConstructor, repr=False)

    @classmethod
    def parse(cls, text: str, *, what: str) -> YamlDocument:
        """Parse ``text``; a syntax error, an empty document or a key given twice is ``InvalidYaml``."""
        loader = _BoundedLoader(text, what)
        try:
            root = loader.get_single_node()
            if root is None:
                raise InvalidYaml(f"{what} is empty", hint="paste a mapping that starts with backend_name:")
            _check_expansion(root, what)
            duplicate = _duplicate_key(root, SafeConstructor())
            if duplicate:
                first, second = duplicate
                raise positioned_error(
                    what,
                    second.start_mark.line + 1,
                    second.start_mark.column + 1,
                    f"key {second.value!r} is given twice (first on line {first.start_mark.line + 1})",
                    hint="keep one of them",
                )
            data = loader.construct_document(root)
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            problem = " ".join(part for part in (error.context, error.problem) if part)
            if mark is None:
                raise InvalidYaml(f"{what}: not valid YAML: {problem}") from error
            raise positioned_error(
                what, mark.line + 1, mark.column + 1, f"not valid YAML: {problem}"
            ) from error
        except yaml.YAMLError as error:
            raise InvalidYaml(f"{what}: not valid YAML: {error}") from error
        finally:
            loader.dispose()
        if not isinstance(root, yaml.MappingNode):
            kind = _NODE_KIND.get(type(root), "something else")
            raise positioned_error(
                what, root.start_mark.line + 1, None, f"expected a mapping of keys, got {kind}"
            )
        return cls(data=data, root=root, what=what)

    def locate(self, path: Sequence[Any]) -> tuple[yaml.Mark, list[str]]:
        """The position of ``path`` (or of its deepest part that exists) and the names walked to it."""
        node = self.root
        mark = node.start_mark
        walked: list[str] = []
        for element in path:
            if element == KEY:
                break
            if isinstance(node, yaml.MappingNode):
                match = None
                for key_node, value_node in node.value:  # the last match wins, as in the data
                    key = self._constructor.construct_object(key_node)
                    if key == element or str(key) == str(element):
                        match = (key_node, value_node)
                if match is None:
                    break
                mark, node = match[0].start_mark, match[1]
                walked.append(str(match[0].value))
            elif (
                isinstance(node, yaml.SequenceNode) and isinstance(element, int) and element < len(node.value)
            ):
                node = node.value[element]
                mark = node.start_mark
                walked.append(f"item {element + 1}")
            else:
                break
        return mark, walked

    def error(self, path: Sequence[Any], message: str, *, hint: str | None = None) -> InvalidYaml:
        """An ``InvalidYaml`` for the value at ``path``: '<what> line L, column C: <path>: <message>'.

        The error also carries ``line`` and ``column`` (1-based), for editors that mark the line."""
        mark, walked = self.locate(path)
        where = " > ".join(walked)
        return positioned_error(
            self.what, mark.line + 1, mark.column + 1, (f"{where}: " if where else "") + message, hint=hint
        )

    def key_text(self, path: Sequence[Any]) -> str:
        """The key at ``path`` exactly as written in the file (``1.10`` stays ``1.10``)."""
        _, walked = self.locate(path)
        return walked[-1] if walked else ""

    def validation_error(
        self, error: ValidationError, *, known_keys: Callable[[tuple[Any, ...]], Sequence[str]] | None = None
    ) -> InvalidYaml:
        """Turn the first problem pydantic found into an ``InvalidYaml`` at its line."""
        others = error.error_count() - 1
        more = f" (and {others} more problem{'s' if others > 1 else ''})" if others else ""
        return self.problem_error(error.errors()[0], known_keys=known_keys, more=more)

    def validation_errors(
        self, error: ValidationError, *, known_keys: Callable[[tuple[Any, ...]], Sequence[str]] | None = None
    ) -> list[InvalidYaml]:
        """Every problem pydantic found, each an ``InvalidYaml`` at its own line."""
        return [self.problem_error(problem, known_keys=known_keys) for problem in error.errors()]

    def problem_error(
        self,
        problem: Any,
        *,
        known_keys: Callable[[tuple[Any, ...]], Sequence[str]] | None = None,
        more: str = "",
    ) -> InvalidYaml:
        """One pydantic problem (an item of ``ValidationError.errors()``) as an ``InvalidYaml``."""
        location = tuple(problem["loc"])
        kind = problem["type"]
        value = problem.get("input")
        if kind == "extra_forbidden":
            keys = list(known_keys(location[:-1])) if known_keys else []
            return self.error(
                location,
                f"unknown key {location[-1]!r}{more}",
                hint=f"known keys here: {', '.join(keys)}" if keys else None,
            )
        if kind == "missing":
            return self.error(location[:-1], f"{location[-1]} is missing{more}")
        if location and location[-1] == KEY:
            written = self.key_text(location[:-1]) or str(location[-2])
            return self.error(
                location,
                f"the key {written} is read as {_describe(value)}, not text{more}",
                hint=f"quote it: '{written}'",
            )
        if kind in ("string_type", "str_type"):
            return self.error(
                location, f"expected text, got {_describe(value)}{more}", hint=f"quote it: '{value}'"
            )
        if kind in ("dict_type", "mapping_type"):
            return self.error(location, f"expected a mapping of keys, got {_describe(value)}{more}")
        if kind == "list_type":
            return self.error(location, f"expected a list, got {_describe(value)}{more}")
        if kind == "too_short":
            return self.error(location, f"is empty{more}")
        message = str(problem["msg"]).removeprefix("Value error, ")
        return self.error(location, f"{message} (got {_describe(value)}){more}")
