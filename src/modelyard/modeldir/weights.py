"""Where a model's weight bytes live, by part: decoder layers, embeddings, head, encoder, MTP.

The estimator splits weights across tensor- and pipeline-parallel ranks by part (the embeddings go
to the first pipeline stage, the head to the last, the layers in between), so the summary keeps
bytes per decoder layer, not only a total. It is built from safetensors headers alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from modelyard.modeldir.safetensors_header import SafetensorsHeader

_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(\d+)\.")
_VISION_MARKERS = (
    "visual.",
    "vision_tower",
    "vision_model",
    "vision_encoder",
    "image_newline",
    "mm_projector",
    "multi_modal_projector",
    "audio_tower",
    "audio_model",
    "speech_encoder",
)
_EMBEDDING_MARKERS = ("embed_tokens", "word_embeddings", "wte.", "tok_embeddings")
_HEAD_MARKERS = ("lm_head", "output.weight")


@dataclass(frozen=True)
class WeightSummary:
    """Bytes and element counts of a checkpoint, split by the part of the model they belong to.

    ``layer_bytes`` maps a decoder layer index to its bytes. ``mtp_bytes`` covers multi-token
    prediction heads (``mtp.*`` tensors, or layers past ``num_hidden_layers``), which engines
    load only when speculative decoding by MTP is on.
    """

    total_bytes: int
    parameter_count: int
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    layer_bytes: dict[int, int] = field(default_factory=dict)
    embedding_bytes: int = 0
    head_bytes: int = 0
    encoder_bytes: int = 0
    mtp_bytes: int = 0
    other_bytes: int = 0

    @property
    def language_model_bytes(self) -> int:
        """Every byte the text model needs: all but the multimodal encoder and MTP heads."""
        return self.total_bytes - self.encoder_bytes - self.mtp_bytes

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["layer_bytes"] = {str(index): size for index, size in self.layer_bytes.items()}
        return data


def _part_of(name: str, decoder_layer_count: int | None) -> tuple[str, int | None]:
    lowered = name.lower()
    if any(marker in lowered for marker in _VISION_MARKERS):
        return "encoder", None
    if lowered.startswith("mtp.") or ".mtp." in lowered or lowered.startswith("model.mtp"):
        return "mtp", None
    match = _LAYER_INDEX.search(lowered)
    if match:
        index = int(match.group(1))
        if decoder_layer_count is not None and index >= decoder_layer_count:
            return "mtp", None
        return "layer", index
    if any(marker in lowered for marker in _EMBEDDING_MARKERS):
        return "embedding", None
    if any(marker in lowered for marker in _HEAD_MARKERS):
        return "head", None
    return "other", None


def summarize_weights(headers: Iterable[SafetensorsHeader], decoder_layer_count: int | None) -> WeightSummary:
    """Add up every tensor of every header, by dtype and by part of the model."""
    total_bytes = 0
    parameter_count = 0
    by_dtype: dict[str, int] = {}
    layers: dict[int, int] = {}
    parts = {"embedding": 0, "head": 0, "encoder": 0, "mtp": 0, "other": 0}
    for header in headers:
        for name, tensor in header.tensors.items():
            total_bytes += tensor.size_bytes
            parameter_count += tensor.element_count
            by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + tensor.size_bytes
            part, index = _part_of(name, decoder_layer_count)
            if part == "layer" and index is not None:
                layers[index] = layers.get(index, 0) + tensor.size_bytes
            else:
                parts[part] += tensor.size_bytes
    return WeightSummary(
        total_bytes=total_bytes,
        parameter_count=parameter_count,
        bytes_by_dtype=by_dtype,
        layer_bytes=dict(sorted(layers.items())),
        embedding_bytes=parts["embedding"],
        head_bytes=parts["head"],
        encoder_bytes=parts["encoder"],
        mtp_bytes=parts["mtp"],
        other_bytes=parts["other"],
    )
