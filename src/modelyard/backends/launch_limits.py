"""What the kernel refuses to launch, checked before anything is stored or started.

``execve`` fails with "Argument list too long" when one argument or one ``NAME=value`` string is
longer than ``MAX_ARG_STRLEN`` (32 pages: 131,072 bytes on Linux), or when argv and the
environment together pass ``ARG_MAX``; Python refuses a NUL byte anywhere in them ("embedded null
byte"). A deployment that would hit either is refused when it is created, naming the value, so
that it never reaches the controller. Other control characters are refused too: they are never
what a user meant (a pasted escape sequence), except tab and line breaks, which a value such as
an inline chat template may hold.

Usage::

    check_launchable(["--max-model-len", "8192"], {"HF_HOME": "/cache"}, what="deployment")
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from modelyard.errors import InvalidInput

# Linux's MAX_ARG_STRLEN (PAGE_SIZE * 32), counting the terminating NUL.
MAXIMUM_ARGUMENT_BYTES = 131_072
# Room left for what the runtime adds (its own flags, the server's environment may grow).
ARGUMENT_LIST_HEADROOM_BYTES = 64 * 1024
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def argument_list_limit_bytes() -> int:
    """The kernel's ``ARG_MAX`` for argv + environment (2 MiB when it cannot be read)."""
    try:
        limit = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        limit = -1
    return limit if limit > 0 else 2 * 1024 * 1024


def _describe_control(text: str) -> str | None:
    match = _CONTROL.search(text)
    if match is None:
        return None
    character = match.group(0)
    name = "a NUL byte" if character == "\x00" else f"the control character U+{ord(character):04X}"
    return f"{name} at position {match.start()}"


def _shown(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def check_text_value(value: str, where: str) -> None:
    """Refuse NUL and control characters (tab and line breaks are fine) in one value."""
    problem = _describe_control(value)
    if problem is not None:
        raise InvalidInput(
            f"{where} contains {problem}: {_shown(value)}",
            hint="remove it: engines cannot be started with control characters in their arguments or env",
        )


def check_launchable(
    arguments: Sequence[str],
    env: Mapping[str, str],
    *,
    inherited_env: Mapping[str, str] | None = None,
    what: str = "the deployment",
) -> None:
    """Raise ``InvalidInput`` when ``arguments`` and ``env`` could not be passed to ``execve``."""
    for index, argument in enumerate(arguments):
        check_text_value(argument, f"backend parameter {index + 1}")
        size = len(argument.encode()) + 1
        if size > MAXIMUM_ARGUMENT_BYTES:
            raise InvalidInput(
                f"cannot launch {what}: backend parameter {index + 1} ({_shown(argument)}) is "
                f"{size - 1:,} bytes; the kernel's limit for one argument is {MAXIMUM_ARGUMENT_BYTES - 1:,}",
                hint="pass large values through a file (e.g. --chat-template /path/to/template.jinja)",
            )
    for name, value in env.items():
        check_text_value(value, f"env value of {name}")
        size = len(name.encode()) + 1 + len(value.encode()) + 1
        if size > MAXIMUM_ARGUMENT_BYTES:
            raise InvalidInput(
                f"cannot launch {what}: env {name} is {size - 2:,} bytes; the kernel's limit for one "
                f"variable is {MAXIMUM_ARGUMENT_BYTES - 1:,}",
                hint="put the value in a file and pass its path",
            )
    inherited = os.environ if inherited_env is None else inherited_env
    total = sum(len(argument.encode()) + 1 + 8 for argument in arguments)
    merged = {**inherited, **env}
    total += sum(len(name.encode()) + len(value.encode()) + 2 + 8 for name, value in merged.items())
    limit = argument_list_limit_bytes() - ARGUMENT_LIST_HEADROOM_BYTES
    if total > limit:
        raise InvalidInput(
            f"cannot launch {what}: its arguments and environment are {total:,} bytes together, over "
            f"the kernel's limit of {limit:,} (ARG_MAX less {ARGUMENT_LIST_HEADROOM_BYTES:,} of headroom)",
            hint="shorten the backend parameters or env; pass large values through files",
        )
