"""What users type for an engine: backend parameters and environment variables.

Backend parameters are the extra engine flags of a deployment. They may come as one line
(``--max-model-len 8192 --enable-prefix-caching``), as many lines, or as a list of strings,
and are split with POSIX shell quoting rules (``backends.parameters``), so
``--chat-template '{{ x }}'`` stays one argument. Nothing is ever handed to a shell.

Environment variables are ``KEY=VALUE`` pairs, kept apart from the arguments::

    >>> split_backend_parameters("--max-model-len 8192\\n--served-model-name 'my model'")
    ['--max-model-len', '8192', '--served-model-name', 'my model']
    >>> parse_env(["VLLM_LOGGING_LEVEL=DEBUG", "HF_HUB_OFFLINE=1"])
    {'VLLM_LOGGING_LEVEL': 'DEBUG', 'HF_HUB_OFFLINE': '1'}
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from modelyard.backends.parameters import parse_backend_parameters
from modelyard.errors import InvalidInput

# The names POSIX shells accept for variables; engines read nothing else.
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _numbered_lines(raw: str | list[str], what: str, *, strict: bool = True) -> Iterator[tuple[str, str]]:
    """Yield (where, line) for every non-empty line; ``where`` names it for error messages.

    An item that is not text is an ``InvalidInput``, or read as its ``str()`` when not ``strict``.
    """
    items = [raw] if isinstance(raw, str) else list(raw)
    for item_index, item in enumerate(items, start=1):
        if not isinstance(item, str) and not strict:
            item = str(item)
        if not isinstance(item, str):
            raise InvalidInput(
                f"{what} item {item_index} is a {type(item).__name__} ({item!r}), not text",
                hint="give each item as a string",
            )
        lines = item.splitlines() or [""]
        for line_index, line in enumerate(lines, start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if isinstance(raw, str):
                where = f"line {line_index}"
            elif len(lines) == 1:
                where = f"item {item_index}"
            else:
                where = f"item {item_index}, line {line_index}"
            yield where, line


def split_backend_parameters(raw: str | list[str]) -> list[str]:
    """Split backend parameters given on one line or many into an argument list.

    Lines that are empty or start with ``#`` are skipped. Each line is split on its own with
    POSIX shell rules (quotes group, backslashes escape), in time linear in its length; a quote
    left open is an ``InvalidInput`` that names the line. The parsed form with flags and values
    is ``modelyard.backends.parameters.parse_backend_parameters``; this is its ``argv``.
    """
    return parse_backend_parameters(raw).require_split().argv


def check_env_name(name: str, where: str = "") -> str:
    """Return ``name`` when it is a valid environment variable name; raise ``InvalidInput`` otherwise."""
    if not ENV_NAME_PATTERN.match(name):
        place = f"{where}: " if where else ""
        raise InvalidInput(
            f"{place}{name!r} is not a valid environment variable name",
            hint="use letters, digits and '_', not starting with a digit (e.g. VLLM_LOGGING_LEVEL)",
        )
    return name


def _parse_env_line(where: str, line: str) -> tuple[str, str]:
    text = line.strip()
    if "=" not in text:
        raise InvalidInput(
            f"environment {where} {text!r} has no '='",
            hint=f"write it as KEY=VALUE, e.g. {text.split()[0] if text.split() else 'KEY'}=value",
        )
    name, value = text.split("=", 1)
    if name != name.rstrip() or value != value.lstrip():
        fixed = f"{name.strip()}={value.strip()}"
        raise InvalidInput(
            f"environment {where} {text!r} has spaces around '='",
            hint=f"write it without them: {fixed}",
        )
    check_env_name(name, f"environment {where}")
    if "\0" in value:
        raise InvalidInput(f"environment {where}: the value of {name} contains a NUL character")
    return name, value


def parse_env(raw: str | list[str] | dict[str, str], *, strict: bool = True) -> dict[str, str]:
    """Read environment variables given as ``KEY=VALUE`` lines (a list, or one text) or a mapping.

    Values are taken literally (no quote removal, no ``$VAR`` expansion). Empty lines and lines
    starting with ``#`` are skipped. A line without ``=``, an invalid name, spaces around ``=``
    or a name given twice is an ``InvalidInput`` that names the line and how to fix it.

    With ``strict=False`` (doctor, which reports each bad line as a finding of its own) nothing
    is raised: a line without ``=`` is skipped, spaces around names and values are dropped, and
    the last of a name given twice wins, as the engine would get the variables::

        >>> parse_env(["A = 1", "VLLM_DEBUG", "A=2"], strict=False)
        {'A': '2'}
    """
    if not strict:
        return _parse_env_leniently(raw)
    if isinstance(raw, dict):
        result: dict[str, str] = {}
        for name, value in raw.items():
            check_env_name(name, "environment")
            if not isinstance(value, str):
                raise InvalidInput(
                    f"environment variable {name} has a {type(value).__name__} value ({value!r}), not text",
                    hint=f"quote it: {name}: '{value}'",
                )
            result[name] = value
        return result
    result = {}
    first_seen: dict[str, str] = {}
    for where, line in _numbered_lines(raw, "environment"):
        name, value = _parse_env_line(where, line)
        if name in first_seen:
            raise InvalidInput(
                f"environment variable {name} is set twice ({first_seen[name]} and {where})",
                hint="keep one of the two lines",
            )
        first_seen[name] = where
        result[name] = value
    return result


def _parse_env_leniently(raw: str | list[str] | dict[str, str]) -> dict[str, str]:
    if isinstance(raw, dict):
        return {name.strip(): value for name, value in raw.items()}
    result: dict[str, str] = {}
    for _, line in _numbered_lines(raw, "environment", strict=False):
        name, equals, value = line.partition("=")
        if equals:
            result[name.strip()] = value.strip()
    return result
