"""Model directory checks: is this folder a model an engine can load, and will it stop talking?

Builds on ``modelyard.modeldir.inspect_model_directory`` (which reads config.json, the
safetensors headers, the tokenizer files and the chat template without loading weights) and turns
what it found into findings with stable ids:

- ``model.path-missing``, ``model.config-missing``, ``model.file-unreadable``;
- ``model.shards-missing``, ``model.shard-truncated``, ``model.weights-missing``,
  ``model.weights-gguf-only``, ``model.weights-bin-only``;
- ``model.tokenizer-missing``, ``model.generation-config-missing``;
- ``model.eos-id-not-in-tokenizer`` and ``model.eos-mismatch-chat-template``: a wrong eos id
  makes the model never stop;
- ``model.chat-template-missing``, and the facts ``model.chat-template-tools`` and
  ``model.chat-template-thinking`` (info).

Usage::

    for finding in check_model_directory(Path("/models/Qwen3-8B")):
        print(finding.severity, finding.check_id, finding.message)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from modelyard.doctor.findings import Finding, Severity
from modelyard.modeldir import ModelDirectoryReport, ModelFacts, inspect_model_directory

# Tokens that close an assistant turn, by template family. The first one a template writes is
# the token the model must stop on.
END_OF_TURN_TOKENS = (
    "<|im_end|>",  # ChatML: Qwen, SmolLM, Hermes
    "<|eot_id|>",  # Llama 3
    "<end_of_turn>",  # Gemma
    "<|end|>",  # Phi-3, gpt-oss
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",  # DeepSeek
    "<|endoftext|>",
    "</s>",  # Llama 2, Mistral
)
_EOS_VARIABLE = re.compile(r"\beos_token\b")


def _finding(check_id: str, severity: Severity, message: str, fix: str = "", **details: Any) -> Finding:
    return Finding(check_id=check_id, severity=severity, message=message, fix=fix, details=details)


def check_model_directory(path: Path) -> list[Finding]:
    """Every finding about the model directory at ``path``; errors first. Never raises."""
    report = inspect_model_directory(path)
    if report.facts is None:
        return _findings_without_config(report)
    facts = report.facts
    findings: list[Finding] = []
    findings.extend(_weight_findings(report.path, facts))
    findings.extend(_tokenizer_findings(report.path, facts))
    findings.extend(_eos_findings(facts))
    findings.extend(_chat_template_findings(facts))
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted(findings, key=lambda finding: order[finding.severity])


def _findings_without_config(report: ModelDirectoryReport) -> list[Finding]:
    reason = "; ".join(report.reasons) or f"{report.path} cannot be read"
    if not report.path.exists():
        return [
            _finding(
                "model.path-missing",
                Severity.ERROR,
                f"{report.path} does not exist",
                "give the path of the model directory (the folder holding config.json); for containers, "
                "the path as the container sees it",
            )
        ]
    if report.suggestion is not None:
        fix = f"use {report.suggestion} as the model path"
    elif (report.path / "config.json").is_file():
        return [
            _finding(
                "model.file-unreadable",
                Severity.ERROR,
                reason,
                "re-copy config.json from the original model and check its permissions",
            )
        ]
    else:
        fix = "point at the folder that holds config.json, the weights and the tokenizer"
    return [
        _finding(
            "model.config-missing",
            Severity.ERROR,
            reason,
            fix,
            suggestion=str(report.suggestion) if report.suggestion else None,
        )
    ]


def _weight_findings(path: Path, facts: ModelFacts) -> list[Finding]:
    findings = [
        _finding("model.file-unreadable", Severity.ERROR, problem, "re-copy the file from the original model")
        for problem in facts.problems
    ]
    if facts.missing_weight_files:
        missing = facts.missing_weight_files
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        findings.append(
            _finding(
                "model.shards-missing",
                Severity.ERROR,
                f"the safetensors index names {len(missing)} shard(s) that are not in {path}: {shown}",
                "copy the missing shards (a download that stopped early is the usual cause)",
                missing=missing,
            )
        )
    for name in facts.truncated_weight_files:
        findings.append(
            _finding(
                "model.shard-truncated",
                Severity.ERROR,
                f"{name} is shorter than its safetensors header says: the copy is incomplete",
                f"copy {name} again and compare its checksum with the original",
                file=name,
            )
        )
    if facts.weight_format == "none" and not facts.missing_weight_files:
        findings.append(
            _finding(
                "model.weights-missing",
                Severity.ERROR,
                f"no weights in {path} (no *.safetensors, no safetensors index, no *.bin)",
                "copy the weight files next to config.json",
            )
        )
    elif facts.weight_format == "gguf":
        findings.append(
            _finding(
                "model.weights-gguf-only",
                Severity.ERROR,
                f"{path} has only GGUF weights ({', '.join(facts.weight_files)}); vLLM and SGLang load "
                "safetensors directories",
                "convert to safetensors first (transformers: from_pretrained(dir, gguf_file=NAME), then "
                "save_pretrained)",
            )
        )
    elif facts.weight_format == "bin":
        findings.append(
            _finding(
                "model.weights-bin-only",
                Severity.WARNING,
                f"{path} has only PyTorch .bin weights ({len(facts.weight_files)} file(s)): slower, "
                "unsafe to load (pickle), and their size cannot be checked before loading",
                "convert to safetensors (load with transformers, save_pretrained(safe_serialization=True))",
            )
        )
    return findings


def _tokenizer_findings(path: Path, facts: ModelFacts) -> list[Finding]:
    findings: list[Finding] = []
    if not facts.tokenizer_files:
        findings.append(
            _finding(
                "model.tokenizer-missing",
                Severity.ERROR,
                f"no tokenizer in {path} (tokenizer.json, tokenizer.model or vocab.json + merges.txt)",
                "copy the tokenizer files of the original model next to config.json",
            )
        )
    if facts.generation_config is None:
        findings.append(
            _finding(
                "model.generation-config-missing",
                Severity.WARNING,
                "no generation_config.json: engines stop only on config.json's eos_token_id "
                f"({facts.eos_token_ids or 'none'}) and use their default sampling",
                "copy generation_config.json from the original model (Qwen3 lists two eos ids there)",
            )
        )
    return findings


def _token_text(value: object) -> str | None:
    """tokenizer_config.json writes special tokens as strings or ``{"content": ...}`` objects."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def template_end_of_turn_token(template: str, tokenizer_config: dict[str, Any] | None) -> str | None:
    """The token the chat template closes an assistant turn with, if it can be told."""
    positions = [(template.find(token), token) for token in END_OF_TURN_TOKENS if token in template]
    if positions:
        return min(positions)[1]
    if _EOS_VARIABLE.search(template) and tokenizer_config is not None:
        return _token_text(tokenizer_config.get("eos_token"))
    return None


def _eos_findings(facts: ModelFacts) -> list[Finding]:
    eos_ids = facts.eos_token_ids
    findings: list[Finding] = []
    source = "generation_config.json" if facts.generation_config is not None else "config.json"
    if not eos_ids:
        return [
            _finding(
                "model.eos-id-not-in-tokenizer",
                Severity.ERROR,
                f"{source} names no eos_token_id: the engine has no token to stop on",
                "copy generation_config.json (or config.json) from the original model",
            )
        ]
    vocabulary_size = facts.tokenizer_vocabulary_size
    added = facts.added_tokens
    if vocabulary_size is not None or added:
        unknown = [
            token_id
            for token_id in eos_ids
            if token_id not in added and (vocabulary_size is None or token_id >= vocabulary_size)
        ]
        if unknown:
            findings.append(
                _finding(
                    "model.eos-id-not-in-tokenizer",
                    Severity.ERROR,
                    f"{source} eos_token_id {unknown} is not a token of this tokenizer "
                    f"(vocabulary of {vocabulary_size or 'unknown'} tokens): the model will never stop",
                    f"set eos_token_id in {source} to the ids of the end tokens "
                    "(tokenizer.json 'added_tokens'), or re-copy it from the original model",
                    unknown_ids=unknown,
                )
            )
    template = facts.chat_template.text
    if template is None:
        return findings
    end_token = template_end_of_turn_token(template, facts.tokenizer_config)
    if end_token is None:
        return findings
    end_ids = [token_id for token_id, text in added.items() if text == end_token]
    if end_ids and not set(end_ids) & set(eos_ids):
        named = ", ".join(f"{token_id} ({added.get(token_id, '?')})" for token_id in eos_ids)
        findings.append(
            _finding(
                "model.eos-mismatch-chat-template",
                Severity.ERROR,
                f"the chat template ends each assistant turn with {end_token} (id {end_ids[0]}), but "
                f"{source} stops only on {named}: answers will run on to max_tokens",
                f"add {end_ids[0]} to eos_token_id in {source} (Qwen3 lists both <|im_end|> and "
                "<|endoftext|>), or re-copy the file from the original model",
                end_of_turn_token=end_token,
                end_of_turn_id=end_ids[0],
                eos_token_ids=eos_ids,
            )
        )
    return findings


def _chat_template_findings(facts: ModelFacts) -> list[Finding]:
    template = facts.chat_template
    if template.text is None:
        return [
            _finding(
                "model.chat-template-missing",
                Severity.WARNING,
                "no chat template (chat_template.jinja, or 'chat_template' in tokenizer_config.json): "
                "/v1/chat/completions will fail, only /v1/completions works",
                "copy chat_template.jinja or tokenizer_config.json from the original instruct model, or "
                "give the engine --chat-template FILE",
            )
        ]
    tools = "supports" if template.supports_tools else "does not support"
    thinking = "supports" if template.supports_thinking else "does not support"
    return [
        _finding(
            "model.chat-template-tools",
            Severity.INFO,
            f"the chat template ({template.source}) {tools} tools",
            "" if template.supports_tools else "tool requests will not reach the model as tools",
            supports_tools=template.supports_tools,
        ),
        _finding(
            "model.chat-template-thinking",
            Severity.INFO,
            f"the chat template ({template.source}) {thinking} thinking (<think> / enable_thinking)",
            "",
            supports_thinking=template.supports_thinking,
        ),
    ]
