"""An engine log read as facts, not phrases: the exceptions raised (class, message, the frames that
raised them), CUDA errors by name, NCCL's result codes, the exit statuses a launcher or the engine
wrote down, and the arguments a command line refused.

A log signature (``doctor/signatures/``) knows one wording. A new release, a launcher in between or a
user who copies half a line changes the words but not the facts: vLLM still raises ``RuntimeError``
from ``_dummy_sampler_run`` when the sampler's warm-up runs out of memory, whatever the message says,
and ggml's ``cudaMalloc failed: out of memory`` is CUDA's ``cudaErrorMemoryAllocation`` like torch's
``CUDA out of memory``. ``doctor/signatures/raise_sites.py`` decides the cause from these facts.

Every line is read without what a launcher or a logger puts before it: timestamps, a level and a
``[file.py:123]`` location, ``(EngineCore_DP0 pid=7)`` or ``(Worker_TP1 pid=9)``, ``[rank1]:``,
``[2025-10-16 09:06:22 TP0]``, a Compose service (``llama-server  | ``), journald's
``host program[pid]:``.

Usage::

    facts = read_log_facts(log_text)
    facts.exceptions[-1].name, facts.exceptions[-1].raised_in   # "RuntimeError", Frame(...)
    facts.cuda_errors, facts.nccl_errors, facts.exit_statuses, facts.refused_arguments
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One prefix token a logger or a launcher writes before the message; stripped again and again.
_PREFIX_TOKEN = re.compile(
    r"^(?:"
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"  # ISO timestamps
    # journald: Feb 21 01:41:02 host prog[1]:
    r"|[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} [\w.-]+ [\w.-]+\[\d+\]:"
    r"|\[[^\]\n]{0,80}\]:?"  # [rank1]: [2025-10-16 09:06:22 TP0] [core.py:396] [12-16 14:27:08]
    r"|\((?:[\w.:-]+ )?pid=\d+(?:, ip=[\d.]+)?\)"  # (EngineCore_DP0 pid=7) (pid=2159, ip=10.0.0.1)
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?: \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)?:?"
    r"|\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?"
    r"|\d+\.\d{2}\.\d{3}\.\d{3} [IWEDT]"  # llama-box / llama-server: 0.17.512.848 E
    r"|[\w.-]+ +\| "  # docker compose: llama-server  |
    r")\s*"
)
_FRAME = re.compile(r'^File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>[\w<>.]+)')
# An exception line: a dotted class name ending the way Python's exception names end (or a bare
# ``Exception``), optionally Ray's ``RayTaskError(RuntimeError)`` wrapper, then its message.
_EXCEPTION = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)|Exception))"
    r"(?:\((?P<wrapped>[\w.]+)\))?(?::\s?(?P<message>.*))?$"
)
# A line that continues an exception's message (pydantic's detail, a wrapped message).
_DETAIL_LINES = 6
# CUDA runtime and driver errors by name or code: the message cudaGetErrorString gives, the enum.
_CUDA_ERRORS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "out of memory",
        re.compile(
            r"CUDA out of memory|CUDA error: out of memory|cudaMalloc failed: out of memory"
            r"|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|CUBLAS_STATUS_ALLOC_FAILED"
            r"|CUDA error 2\b|out of memory \(cudaMalloc|OutOfMemoryError",
            re.IGNORECASE,
        ),
    ),
    (
        "no kernel image",
        re.compile(
            r"no kernel image is available for execution|cudaErrorNoKernelImageForDevice"
            r"|CUDA_ERROR_NO_BINARY_FOR_GPU|CUDA error 209\b",
            re.IGNORECASE,
        ),
    ),
    (
        "driver too old",
        re.compile(
            r"CUDA driver version is insufficient|cudaErrorInsufficientDriver|CUDA error 35\b"
            r"|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|system has unsupported display driver",
            re.IGNORECASE,
        ),
    ),
    (
        "no device",
        re.compile(r"No CUDA GPUs are available|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|CUDA error 100\b"),
    ),
)
# NCCL's result codes (nccl.h ncclResult_t) and the words ncclGetErrorString gives them.
_NCCL_ERRORS = re.compile(
    r"\b(?P<name>ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidArgument"
    r"|ncclInvalidUsage|ncclRemoteError|ncclInProgress)\b"
    r"|NCCL error[^\n]*?(?P<words>unhandled system error|unhandled cuda error|internal error"
    r"|invalid usage|remote process exited or there was a network error|invalid argument)"
)
_NCCL_WORDS = {
    "unhandled system error": "ncclSystemError",
    "unhandled cuda error": "ncclUnhandledCudaError",
    "internal error": "ncclInternalError",
    "invalid usage": "ncclInvalidUsage",
    "remote process exited or there was a network error": "ncclRemoteError",
    "invalid argument": "ncclInvalidArgument",
}
# An exit status written in the log: SGLang ("Exit code: -9", "terminated with -9"), Docker and
# Compose ("exited with code 137"), Python's subprocess ("returncode -9"), shells ("Killed").
_EXIT_STATUS = re.compile(
    r"(?:exit ?code|exit status|exited with code|returncode|return code|terminated with)"
    r"[:= ]+\(?(?P<status>-?\d+)"
    r"|died with <Signals\.SIG(?P<signal>KILL|TERM|SEGV|ABRT)"
    r"|^(?P<killed>Killed|已杀死)$",
    re.IGNORECASE | re.MULTILINE,
)
_SIGNAL_STATUS = {"KILL": -9, "TERM": -15, "SEGV": -11, "ABRT": -6}
# An argument a command line refused: argparse ("unrecognized arguments: A B"), llama.cpp's
# common/arg.cpp ("error: invalid argument: A", older builds "error: unknown argument: A"),
# llama-box ("Unknown argument: A"), llamafile ("A unknown argument").
_REFUSED_ARGUMENT = re.compile(
    r"error: unrecognized arguments?: (?P<argparse>.+)"
    r"|^(?:error: )?(?:invalid|unknown|unrecognized) (?:argument|option)s?: (?P<cpp>\S.*)"
    r"|^(?:[^\s:]+: )?(?P<flag>--?[\w-]+) unknown argument$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Frame:
    """One ``File "...", line N, in function`` of a traceback."""

    path: str
    line: int
    function: str

    def is_in(self, path_suffix: str, function: str | None = None) -> bool:
        """This frame is in a file whose path ends with ``path_suffix`` (and in ``function``)."""
        path = self.path.replace("\\", "/")
        return path.endswith(path_suffix) and (function is None or self.function == function)


@dataclass(frozen=True)
class RaisedException:
    """An exception the log shows: its class as printed (``torch.OutOfMemoryError``), the message's
    first line and the lines that continue it, and the frames of its traceback (empty when the log
    quotes only the exception's line)."""

    name: str
    message: str
    detail: tuple[str, ...]
    frames: tuple[Frame, ...]
    line: str
    line_number: int
    # Ray's ``RayTaskError(RuntimeError)``: the class of the exception it carries.
    wrapped: str | None = None

    @property
    def class_name(self) -> str:
        """The class without its module: ``OutOfMemoryError`` for ``torch.cuda.OutOfMemoryError``."""
        return (self.wrapped or self.name).rsplit(".", 1)[-1]

    @property
    def raised_in(self) -> Frame | None:
        """The innermost frame: where the exception was raised."""
        return self.frames[-1] if self.frames else None

    def raised_at(self, path_suffix: str, *functions: str) -> bool:
        frame = self.raised_in
        if frame is None:
            return False
        return frame.is_in(path_suffix) and (not functions or frame.function in functions)

    @property
    def text(self) -> str:
        return "\n".join((self.message, *self.detail))


@dataclass(frozen=True)
class LogFacts:
    exceptions: tuple[RaisedException, ...]
    # The CUDA errors named anywhere in the log ("out of memory", "no kernel image", ...), with the
    # first line that names each.
    cuda_errors: dict[str, str]
    # NCCL result codes (``ncclSystemError``), with the first line that names each.
    nccl_errors: dict[str, str]
    # Exit statuses written in the log (signals as negative numbers, -9 for SIGKILL), with the line.
    exit_statuses: tuple[tuple[int, str], ...]
    # Arguments a command line refused, with the line that says so.
    refused_arguments: tuple[tuple[str, str], ...]


def strip_prefix(line: str) -> str:
    """The message of a log line, without the timestamps, levels, process and rank tags before it."""
    text = line.strip()
    for _ in range(8):
        match = _PREFIX_TOKEN.match(text)
        if match is None or match.end() == 0:
            break
        text = text[match.end() :]
    return text.strip()


def _exceptions(lines: list[str]) -> tuple[RaisedException, ...]:
    found: list[RaisedException] = []
    frames: list[Frame] = []
    index = 0
    while index < len(lines):
        text = strip_prefix(lines[index])
        frame = _FRAME.match(text)
        if frame is not None:
            frames.append(Frame(frame["path"], int(frame["line"]), frame["function"]))
            index += 1
            continue
        if text.startswith("Traceback (most recent call last)"):
            frames = []
            index += 1
            continue
        exception = _EXCEPTION.match(text)
        if exception is None or (exception["message"] is None and not frames):
            index += 1
            continue
        detail: list[str] = []
        following = index + 1
        while following < len(lines) and len(detail) < _DETAIL_LINES:
            continued = strip_prefix(lines[following])
            if not continued or _FRAME.match(continued) or _EXCEPTION.match(continued):
                break
            if continued.startswith(("Traceback", "The above exception", "During handling")):
                break
            detail.append(continued)
            following += 1
        found.append(
            RaisedException(
                name=exception["name"],
                message=(exception["message"] or "").strip(),
                detail=tuple(detail),
                frames=tuple(frames),
                line=text,
                line_number=index + 1,
                wrapped=exception["wrapped"],
            )
        )
        frames = []
        index += 1
    return tuple(found)


def _first_lines(text: str, patterns: tuple[tuple[str, re.Pattern[str]], ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, pattern in patterns:
        match = pattern.search(text)
        if match is not None:
            found[name] = _line_at(text, match.start())
    return found


def _line_at(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return strip_prefix(text[start : len(text) if end == -1 else end])


def _nccl_errors(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for match in _NCCL_ERRORS.finditer(text):
        name = match["name"] or _NCCL_WORDS[match["words"].lower()]
        found.setdefault(name, _line_at(text, match.start()))
    return found


def _exit_statuses(lines: list[str]) -> tuple[tuple[int, str], ...]:
    found: list[tuple[int, str]] = []
    for line in lines:
        text = strip_prefix(line)
        match = _EXIT_STATUS.search(text)
        if match is None:
            continue
        if match["status"] is not None:
            status = int(match["status"])
        elif match["signal"] is not None:
            status = _SIGNAL_STATUS[match["signal"].upper()]
        else:
            status = -9
        found.append((status, text))
    return tuple(found)


def _refused_arguments(lines: list[str]) -> tuple[tuple[str, str], ...]:
    found: list[tuple[str, str]] = []
    for line in lines:
        text = strip_prefix(line)
        match = _REFUSED_ARGUMENT.search(text)
        if match is None:
            continue
        argument = (match["argparse"] or match["cpp"] or match["flag"] or "").strip()
        if argument:
            found.append((argument, text))
    return tuple(found)


def read_log_facts(text: str) -> LogFacts:
    lines = text.splitlines()
    return LogFacts(
        exceptions=_exceptions(lines),
        cuda_errors=_first_lines(text, _CUDA_ERRORS),
        nccl_errors=_nccl_errors(text),
        exit_statuses=_exit_statuses(lines),
        refused_arguments=_refused_arguments(lines),
    )
