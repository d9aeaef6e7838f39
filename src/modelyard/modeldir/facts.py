"""What a model directory says about its model, read from small files only (never the weights).

``read_model_facts`` accepts a model directory or a bare ``config.json`` path, and is tolerant:
it collects what it can and lists what it could not read in ``problems``. Validation (what makes a
directory servable) is ``inspect.inspect_model_directory``'s job.

Usage::

    facts = read_model_facts(Path("/models/Qwen3-8B"))
    facts.architecture, facts.dtype, facts.parameter_count, facts.text_config["num_key_value_heads"]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from modelyard.errors import InvalidModelDirectory
from modelyard.modeldir.safetensors_header import SafetensorsHeader, read_safetensors_header
from modelyard.modeldir.tokenizer_files import (
    MAXIMUM_TOKENIZER_JSON_BYTES,
    ChatTemplate,
    find_chat_template,
    find_tokenizer_files,
    read_json_file,
    read_tokenizer_vocabulary,
    token_ids,
)
from modelyard.modeldir.weights import WeightSummary, summarize_weights

logger = logging.getLogger(__name__)

WeightFormat = Literal["safetensors", "bin", "gguf", "none"]

SAFETENSORS_INDEX = "model.safetensors.index.json"

# config.json spells the dtype "dtype" (transformers 5) or "torch_dtype" (before).
_DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
}


def normalize_dtype(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    text = value.removeprefix("torch.").lower()
    return _DTYPE_ALIASES.get(text, text)


@dataclass
class ModelFacts:
    """Facts about one model, from config.json, safetensors headers and tokenizer files.

    ``config`` is config.json as written. ``text_config`` is the language model's part of it (the
    ``text_config`` of multimodal checkpoints such as Qwen3.5, else ``config`` itself).
    ``weights`` is ``None`` when no safetensors header could be read (``.bin`` or GGUF weights,
    or a config.json alone).
    """

    directory: Path
    config: dict[str, Any]
    weight_format: WeightFormat = "none"
    weight_files: list[str] = field(default_factory=list)
    missing_weight_files: list[str] = field(default_factory=list)
    truncated_weight_files: list[str] = field(default_factory=list)
    weight_files_size_bytes: int = 0
    weights: WeightSummary | None = None
    index_present: bool = False
    tokenizer_files: list[str] = field(default_factory=list)
    added_tokens: dict[int, str] = field(default_factory=dict)
    tokenizer_vocabulary_size: int | None = None
    generation_config: dict[str, Any] | None = None
    tokenizer_config: dict[str, Any] | None = None
    chat_template: ChatTemplate = field(default_factory=ChatTemplate)
    # Files that exist but could not be read, each with what to do.
    problems: list[str] = field(default_factory=list)

    @property
    def text_config(self) -> dict[str, Any]:
        nested = self.config.get("text_config") or self.config.get("llm_config")
        if isinstance(nested, dict):
            return nested
        return self.config

    @property
    def architecture(self) -> str | None:
        architectures = self.config.get("architectures")
        if isinstance(architectures, list) and architectures:
            return str(architectures[0])
        return None

    @property
    def model_type(self) -> str | None:
        value = self.config.get("model_type")
        return str(value) if value is not None else None

    @property
    def dtype(self) -> str | None:
        """The checkpoint's declared dtype (``bfloat16``, ...), else the commonest header dtype."""
        for source in (self.config, self.text_config):
            declared = normalize_dtype(source.get("dtype") or source.get("torch_dtype"))
            if declared:
                return declared
        if self.weights and self.weights.bytes_by_dtype:
            commonest = max(self.weights.bytes_by_dtype.items(), key=lambda item: item[1])[0]
            return {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}.get(commonest, commonest.lower())
        return None

    @property
    def quantization_config(self) -> dict[str, Any] | None:
        for source in (self.config, self.text_config):
            value = source.get("quantization_config") or source.get("compression_config")
            if isinstance(value, dict):
                return value
        return None

    @property
    def parameter_count(self) -> int | None:
        return self.weights.parameter_count if self.weights else None

    @property
    def size_bytes(self) -> int:
        """Weight bytes: from headers when readable, else the weight files' sizes on disk."""
        if self.weights is not None:
            return self.weights.total_bytes
        return self.weight_files_size_bytes

    @property
    def eos_token_ids(self) -> list[int]:
        """generation_config.json's ``eos_token_id`` (the ids engines stop on), else config.json's."""
        if self.generation_config is not None:
            ids = token_ids(self.generation_config.get("eos_token_id"))
            if ids:
                return ids
        return token_ids(self.config.get("eos_token_id") or self.text_config.get("eos_token_id"))

    @property
    def decoder_layer_count(self) -> int | None:
        value = self.text_config.get("num_hidden_layers") or self.text_config.get("num_layers")
        return int(value) if isinstance(value, int) else None


def _safetensors_files(directory: Path) -> tuple[list[str], list[str], bool, list[str]]:
    """(present shard names, missing shard names, index present, problems)."""
    index_path = directory / SAFETENSORS_INDEX
    if not index_path.is_file():
        others = sorted(directory.glob("*.safetensors.index.json"))
        index_path = others[0] if len(others) == 1 else index_path
    if index_path.is_file():
        index = read_json_file(index_path)
        if index.problem:
            return [], [], True, [index.problem]
        weight_map = (index.content or {}).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            return [], [], True, [f"{index_path.name} has no weight_map; re-copy it from the original model"]
        shards = sorted({str(name) for name in weight_map.values()})
        present = [name for name in shards if (directory / name).is_file()]
        missing = [name for name in shards if not (directory / name).is_file()]
        return present, missing, True, []
    files = sorted(path.name for path in directory.glob("*.safetensors") if path.is_file())
    if any(name.startswith("model") for name in files):
        files = [name for name in files if not name.startswith("consolidated")]
    return files, [], False, []


def read_model_facts(path: Path) -> ModelFacts:
    """Read a model directory, or a bare config.json (with any safetensors files beside it).

    Raises ``InvalidModelDirectory`` only when there is no readable config.json.
    """
    path = path.expanduser()
    directory = path.parent if path.is_file() and path.name.endswith(".json") else path
    config_path = path if path.is_file() and path.name.endswith(".json") else directory / "config.json"
    if not config_path.is_file():
        raise InvalidModelDirectory(
            f"no config.json in {directory}", hint="give the directory that holds config.json and the weights"
        )
    config_read = read_json_file(config_path)
    if config_read.content is None:
        raise InvalidModelDirectory(config_read.problem or f"{config_path} is not readable")
    facts = ModelFacts(directory=directory, config=config_read.content)
    _read_weights(facts)
    _read_tokenizer_side(facts)
    return facts


def _read_weights(facts: ModelFacts) -> None:
    directory = facts.directory
    present, missing, index_present, problems = _safetensors_files(directory)
    facts.problems.extend(problems)
    facts.index_present = index_present
    facts.missing_weight_files = missing
    if present or missing or index_present:
        facts.weight_format = "safetensors"
        facts.weight_files = present
        headers: list[SafetensorsHeader] = []
        for name in present:
            file_path = directory / name
            try:
                header = read_safetensors_header(file_path)
            except InvalidModelDirectory as error:
                facts.problems.append(str(error))
                continue
            headers.append(header)
            if file_path.stat().st_size < header.expected_file_bytes:
                facts.truncated_weight_files.append(name)
        if headers:
            facts.weights = summarize_weights(headers, facts.decoder_layer_count)
    else:
        binaries = sorted(
            path.name
            for path in directory.glob("*.bin")
            if path.is_file() and path.name not in {"training_args.bin", "optimizer.bin"}
        )
        ggufs = sorted(path.name for path in directory.glob("*.gguf") if path.is_file())
        if binaries:
            facts.weight_format, facts.weight_files = "bin", binaries
        elif ggufs:
            facts.weight_format, facts.weight_files = "gguf", ggufs
    facts.weight_files_size_bytes = sum(
        (directory / name).stat().st_size for name in facts.weight_files if (directory / name).is_file()
    )


def _read_tokenizer_side(facts: ModelFacts) -> None:
    directory = facts.directory
    facts.tokenizer_files = find_tokenizer_files(directory)
    generation = read_json_file(directory / "generation_config.json")
    tokenizer_config = read_json_file(directory / "tokenizer_config.json")
    tokenizer_json = (
        read_json_file(directory / "tokenizer.json", MAXIMUM_TOKENIZER_JSON_BYTES)
        if "tokenizer.json" in facts.tokenizer_files
        else None
    )
    for read in (generation, tokenizer_config, tokenizer_json):
        if read is not None and read.problem:
            facts.problems.append(read.problem)
    facts.generation_config = generation.content
    facts.tokenizer_config = tokenizer_config.content
    vocabulary = read_tokenizer_vocabulary(
        tokenizer_json.content if tokenizer_json else None, tokenizer_config.content
    )
    facts.added_tokens = vocabulary.added_tokens
    facts.tokenizer_vocabulary_size = vocabulary.vocabulary_size
    facts.chat_template = find_chat_template(directory, tokenizer_config.content)
