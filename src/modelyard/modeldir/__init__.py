"""Model directories: validation and inspection without loading weights.

Usage::

    from modelyard.modeldir import inspect_model_directory, read_model_facts

    report = inspect_model_directory(Path("/models/Qwen3-8B"))
    report.valid, report.reasons, report.suggestion, report.parameter_count
    facts = read_model_facts(Path("/fixtures/config.json"))  # tolerant: config.json alone is enough
"""

from modelyard.modeldir.facts import ModelFacts, normalize_dtype, read_model_facts
from modelyard.modeldir.inspect import ModelDirectoryReport, inspect_model_directory
from modelyard.modeldir.safetensors_header import (
    SafetensorsHeader,
    TensorInfo,
    read_safetensors_header,
    write_safetensors_header_only,
)
from modelyard.modeldir.tokenizer_files import ChatTemplate
from modelyard.modeldir.weights import WeightSummary, summarize_weights

__all__ = [
    "ChatTemplate",
    "ModelDirectoryReport",
    "ModelFacts",
    "SafetensorsHeader",
    "TensorInfo",
    "WeightSummary",
    "inspect_model_directory",
    "normalize_dtype",
    "read_model_facts",
    "read_safetensors_header",
    "summarize_weights",
    "write_safetensors_header_only",
]
