"""Is a local directory a servable model? ``inspect_model_directory`` answers, with reasons.

A directory is valid when: config.json is at its root and is JSON; its weights are safetensors
(every shard the index names present, every header readable, no file shorter than its header
says) or ``.bin`` files; and a tokenizer is there. A directory whose model sits one level deeper
(or in a Hugging Face cache's ``snapshots/<hash>/``) gets ``suggestion``. Each reason names the
file and what to do; ``warnings`` are shown but do not make the directory invalid.

Usage::

    report = inspect_model_directory(Path("/models/Qwen3-8B"))
    if not report.valid:
        raise InvalidModelDirectory("; ".join(report.reasons))
    report.architecture, report.parameter_count, report.size_bytes, report.eos_token_ids
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelyard.errors import InvalidModelDirectory
from modelyard.modeldir.facts import SAFETENSORS_INDEX, ModelFacts, read_model_facts
from modelyard.modeldir.tokenizer_files import TOKENIZER_SINGLE_FILES


@dataclass
class ModelDirectoryReport:
    """The verdict on one directory, and the facts read from it (``facts`` is ``None`` when
    config.json is missing or unreadable)."""

    path: Path
    valid: bool
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    suggestion: Path | None = None
    facts: ModelFacts | None = None

    @property
    def architecture(self) -> str | None:
        return self.facts.architecture if self.facts else None

    @property
    def model_type(self) -> str | None:
        return self.facts.model_type if self.facts else None

    @property
    def dtype(self) -> str | None:
        return self.facts.dtype if self.facts else None

    @property
    def parameter_count(self) -> int | None:
        return self.facts.parameter_count if self.facts else None

    @property
    def size_bytes(self) -> int:
        return self.facts.size_bytes if self.facts else 0

    @property
    def weight_format(self) -> str:
        return self.facts.weight_format if self.facts else "none"

    @property
    def eos_token_ids(self) -> list[int]:
        return self.facts.eos_token_ids if self.facts else []

    @property
    def chat_template(self) -> str | None:
        return self.facts.chat_template.text if self.facts else None

    def raise_if_invalid(self) -> None:
        """Raise ``InvalidModelDirectory`` with every reason (and the suggestion) when invalid."""
        if self.valid:
            return
        hint = f"did you mean {self.suggestion}?" if self.suggestion else None
        raise InvalidModelDirectory(
            f"{self.path} is not a servable model: " + "; ".join(self.reasons), hint=hint
        )

    def to_json(self) -> dict[str, Any]:
        facts = self.facts
        return {
            "path": str(self.path),
            "valid": self.valid,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "suggestion": str(self.suggestion) if self.suggestion else None,
            "architecture": self.architecture,
            "model_type": self.model_type,
            "dtype": self.dtype,
            "parameter_count": self.parameter_count,
            "size_bytes": self.size_bytes,
            "weight_format": self.weight_format,
            "weight_files": facts.weight_files if facts else [],
            "tokenizer_files": facts.tokenizer_files if facts else [],
            "eos_token_ids": self.eos_token_ids,
            "chat_template_source": facts.chat_template.source if facts else None,
            "chat_template_supports_tools": facts.chat_template.supports_tools if facts else False,
            "chat_template_supports_thinking": facts.chat_template.supports_thinking if facts else False,
        }


def _nested_model_directories(directory: Path) -> list[Path]:
    """Directories one level down (or a Hugging Face cache's snapshots) that hold a config.json."""
    candidates: list[Path] = []
    try:
        children = sorted(child for child in directory.iterdir() if child.is_dir())
    except OSError:
        return []
    for child in children:
        if child.name.startswith("."):
            continue
        if (child / "config.json").is_file():
            candidates.append(child)
    snapshots = directory / "snapshots"
    if not candidates and snapshots.is_dir():
        candidates.extend(sorted(p for p in snapshots.iterdir() if (p / "config.json").is_file()))
    return candidates


def inspect_model_directory(path: Path) -> ModelDirectoryReport:
    """Validate ``path`` as a model directory and read its facts. Never raises for a bad directory."""
    path = path.expanduser()
    if not path.exists():
        return ModelDirectoryReport(
            path=path, valid=False, reasons=[f"{path} does not exist; give the path of the model directory"]
        )
    if not path.is_dir():
        parent_hint = f" (did you mean its folder {path.parent}?)" if path.name == "config.json" else ""
        return ModelDirectoryReport(
            path=path,
            valid=False,
            reasons=[f"{path} is a file, not a directory{parent_hint}"],
            suggestion=path.parent if parent_hint else None,
        )
    if not (path / "config.json").is_file():
        return _missing_config(path)
    try:
        facts = read_model_facts(path)
    except InvalidModelDirectory as error:
        return ModelDirectoryReport(path=path, valid=False, reasons=[str(error)])
    reasons = list(facts.problems)
    warnings: list[str] = []
    _check_weights(path, facts, reasons, warnings)
    _check_tokenizer(path, facts, reasons, warnings)
    if facts.architecture is None:
        warnings.append("config.json has no 'architectures' list; engines pick the model class from it")
    return ModelDirectoryReport(path=path, valid=not reasons, reasons=reasons, warnings=warnings, facts=facts)


def _missing_config(path: Path) -> ModelDirectoryReport:
    nested = _nested_model_directories(path)
    if len(nested) == 1:
        return ModelDirectoryReport(
            path=path,
            valid=False,
            reasons=[f"no config.json in {path}, but {nested[0]} has one: the model is one level deeper"],
            suggestion=nested[0],
        )
    if nested:
        listed = ", ".join(str(candidate) for candidate in nested)
        return ModelDirectoryReport(
            path=path,
            valid=False,
            reasons=[f"no config.json in {path}; these subdirectories each hold a model: {listed}; pick one"],
        )
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if ggufs:
        return ModelDirectoryReport(
            path=path,
            valid=False,
            reasons=[
                f"{path} holds only GGUF weights ({', '.join(ggufs)}) and no config.json; convert them to a "
                "safetensors directory first (transformers: from_pretrained(dir, gguf_file=NAME) then "
                "save_pretrained)"
            ],
        )
    return ModelDirectoryReport(
        path=path,
        valid=False,
        reasons=[
            f"no config.json in {path}; copy the model's config.json, weights and tokenizer files there"
        ],
    )


def _check_weights(path: Path, facts: ModelFacts, reasons: list[str], warnings: list[str]) -> None:
    if facts.missing_weight_files:
        missing = ", ".join(facts.missing_weight_files)
        reasons.append(
            f"{SAFETENSORS_INDEX} names {len(facts.missing_weight_files)} shard(s) not in {path}: {missing}; "
            "copy the missing files (a download that stopped early is the usual cause)"
        )
    for name in facts.truncated_weight_files:
        reasons.append(f"{name} is shorter than its header says (truncated); copy it again")
    if facts.weight_format == "none":
        reasons.append(
            f"no weights in {path} (no *.safetensors, model.safetensors.index.json or *.bin); "
            "copy the weight files next to config.json"
        )
    elif facts.weight_format == "gguf":
        reasons.append(
            f"{path} has only GGUF weights ({', '.join(facts.weight_files)}); engines load safetensors: "
            "convert them first (transformers: from_pretrained(dir, gguf_file=NAME) then save_pretrained)"
        )
    elif facts.weight_format == "bin":
        warnings.append(
            f"{path} has only PyTorch .bin weights ({len(facts.weight_files)} file(s)); they load, but their "
            "size and dtype cannot be read without loading them: convert to safetensors for safer loads"
        )
    elif facts.weight_format == "safetensors" and facts.index_present:
        listed = set(facts.weight_files) | set(facts.missing_weight_files)
        extra = sorted(p.name for p in path.glob("*.safetensors") if p.name not in listed)
        if extra:
            warnings.append(f"safetensors files not named by the index are ignored: {', '.join(extra)}")
    if facts.weight_format == "safetensors" and any(path.glob("pytorch_model*.bin")):
        warnings.append(
            "both safetensors and .bin weights are present; engines use safetensors, the .bin is unused"
        )


def _check_tokenizer(path: Path, facts: ModelFacts, reasons: list[str], warnings: list[str]) -> None:
    if not facts.tokenizer_files:
        expected = ", ".join((*TOKENIZER_SINGLE_FILES, "vocab.json + merges.txt"))
        reasons.append(
            f"no tokenizer in {path} (looked for {expected}); copy the tokenizer files of the original model"
        )
    if facts.generation_config is None:
        warnings.append(
            "no generation_config.json: engines fall back to config.json's eos_token_id and default sampling"
        )
    if facts.chat_template.text is None:
        warnings.append(
            "no chat template (chat_template.jinja or tokenizer_config.json 'chat_template'): "
            "/v1/chat/completions will fail; only /v1/completions works"
        )
