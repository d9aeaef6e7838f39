"""Read the header of a ``.safetensors`` file without touching its tensors.

The format (https://huggingface.co/docs/safetensors/index#format): 8 bytes, a little-endian
unsigned 64-bit length N; then N bytes of UTF-8 JSON mapping each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}``, plus an optional ``"__metadata__"`` map of
strings; then the raw tensor bytes. Reading the header costs one small read, whatever the file's
size, and works on header-only files (the estimator's fixtures are such files).

Usage::

    header = read_safetensors_header(Path("model-00001-of-00002.safetensors"))
    header.parameter_count, header.tensor_bytes, header.tensors["lm_head.weight"].shape
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

from modelyard.errors import InvalidModelDirectory

# Bits per element of each safetensors dtype (sub-byte types count bits, not bytes).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}

# A header larger than this is not a header (the format's own readers use 100 MB).
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its header describes it."""

    dtype: str
    shape: tuple[int, ...]
    size_bytes: int

    @property
    def element_count(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsHeader:
    """The tensors one file declares, and its free-form metadata."""

    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] = field(default_factory=dict)
    header_bytes: int = 0
    # Where the last tensor's data ends, counted from the end of the header.
    data_end_offset: int = 0

    @property
    def expected_file_bytes(self) -> int:
        """The size a complete file has; a smaller file was truncated (or is a header-only fixture)."""
        return self.header_bytes + self.data_end_offset

    @property
    def tensor_bytes(self) -> int:
        """Bytes of tensor data the header declares (the file's size, less the header)."""
        return sum(tensor.size_bytes for tensor in self.tensors.values())

    @property
    def parameter_count(self) -> int:
        """Elements over all tensors. Packed quantised weights count their storage elements."""
        return sum(tensor.element_count for tensor in self.tensors.values())


def _bad(path: Path, problem: str) -> InvalidModelDirectory:
    return InvalidModelDirectory(
        f"{path} is not a readable safetensors file: {problem}",
        hint="re-copy or re-download this file; a truncated copy is the usual cause",
    )


def read_safetensors_header(path: Path) -> SafetensorsHeader:
    """Parse the header of ``path``; raise ``InvalidModelDirectory`` when it is not safetensors."""
    try:
        with path.open("rb") as stream:
            prefix = stream.read(8)
            if len(prefix) < 8:
                raise _bad(path, f"the file has {len(prefix)} bytes, fewer than the 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise _bad(path, f"header length {length} bytes is larger than {MAX_HEADER_BYTES}")
            raw = stream.read(length)
    except OSError as error:
        raise InvalidModelDirectory(
            f"cannot read {path}: {error.strerror}", hint="check that the file exists and is readable"
        ) from error
    if len(raw) < length:
        raise _bad(path, f"header says {length} bytes but only {len(raw)} follow")
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise _bad(path, f"the header is not JSON ({error})") from error
    if not isinstance(document, dict):
        raise _bad(path, "the header is not a JSON object")
    metadata_raw = document.pop("__metadata__", None) or {}
    metadata = {str(key): str(value) for key, value in dict(metadata_raw).items()}
    tensors: dict[str, TensorInfo] = {}
    data_end_offset = 0
    for name, entry in document.items():
        tensors[name] = _tensor_info(path, name, entry)
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if isinstance(offsets, list) and len(offsets) == 2 and isinstance(offsets[1], int):
            data_end_offset = max(data_end_offset, int(offsets[1]))
    return SafetensorsHeader(
        path=path,
        tensors=tensors,
        metadata=metadata,
        header_bytes=8 + length,
        data_end_offset=data_end_offset,
    )


def _tensor_info(path: Path, name: str, entry: object) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _bad(path, f"tensor {name!r} has no dtype/shape entry")
    dtype = str(entry.get("dtype", ""))
    shape_raw = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(shape_raw, list) or not all(isinstance(size, int) for size in shape_raw):
        raise _bad(path, f"tensor {name!r} has shape {shape_raw!r}, not a list of integers")
    shape = tuple(int(size) for size in shape_raw)
    if isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets):
        size_bytes = int(offsets[1]) - int(offsets[0])
    else:
        bits = DTYPE_BITS.get(dtype)
        if bits is None:
            raise _bad(path, f"tensor {name!r} has unknown dtype {dtype!r} and no data_offsets")
        size_bytes = math.ceil(math.prod(shape) * bits / 8)
    return TensorInfo(dtype=dtype, shape=shape, size_bytes=size_bytes)


def write_safetensors_header_only(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> None:
    """Write a header-only safetensors file (no tensor data): for fixtures of models not on disk.

    ``tensors`` maps each name to ``(dtype, shape)``; offsets are laid out back to back.
    """
    document: dict[str, object] = {"__metadata__": {"format": "pt", "modelyard": "header-only fixture"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size_bytes = math.ceil(math.prod(shape) * DTYPE_BITS[dtype] / 8)
        document[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size_bytes]}
        offset += size_bytes
    payload = json.dumps(document, separators=(",", ":")).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(payload)) + payload)
