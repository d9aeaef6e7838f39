"""Model directory checks, on a real (tiny, random-weight) Qwen3-format test model and broken copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from model_cache import ModelCache
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.model_directory import check_model_directory, template_end_of_turn_token

pytest.importorskip("transformers")


@pytest.fixture
def model_dir(test_models: ModelCache, tmp_path: Path) -> Path:
    """A private copy of the tiny model in 40 kB shards (the tests break it in their own ways)."""
    return test_models.copy("tiny-qwen3-small-shards", tmp_path / "model")


def _ids(findings: list[Finding]) -> list[str]:
    return [finding.check_id for finding in findings]


def _errors(findings: list[Finding]) -> list[str]:
    return [finding.check_id for finding in findings if finding.severity is Severity.ERROR]


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_complete_model_has_no_error_or_warning(model_dir: Path) -> None:
    findings = check_model_directory(model_dir)
    assert [f for f in findings if f.severity is not Severity.INFO] == []
    assert "model.chat-template-tools" in _ids(findings)


def test_chat_template_facts_report_tools_and_thinking(model_dir: Path) -> None:
    facts = {f.check_id: f for f in check_model_directory(model_dir)}
    assert facts["model.chat-template-tools"].details["supports_tools"] is True
    assert facts["model.chat-template-thinking"].details["supports_thinking"] is True


def test_missing_path(tmp_path: Path) -> None:
    assert _errors(check_model_directory(tmp_path / "nowhere")) == ["model.path-missing"]


def test_model_one_level_deeper_is_suggested(model_dir: Path, tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    outer.mkdir()
    shutil.move(model_dir, outer / "Qwen3-tiny")
    (finding,) = check_model_directory(outer)
    assert finding.check_id == "model.config-missing"
    assert str(outer / "Qwen3-tiny") in finding.fix


def test_missing_shard(model_dir: Path) -> None:
    shards = sorted(model_dir.glob("model-*.safetensors"))
    assert len(shards) > 1, "the fixture must be sharded"
    shards[-1].unlink()
    findings = check_model_directory(model_dir)
    assert _errors(findings) == ["model.shards-missing"]
    assert shards[-1].name in findings[0].message


def test_truncated_shard(model_dir: Path) -> None:
    shard = sorted(model_dir.glob("model-*.safetensors"))[0]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 100])
    assert _errors(check_model_directory(model_dir)) == ["model.shard-truncated"]


def test_no_weights(model_dir: Path) -> None:
    for path in model_dir.glob("model*.safetensors*"):
        path.unlink()
    assert _errors(check_model_directory(model_dir)) == ["model.weights-missing"]


def test_only_bin_weights_is_a_warning(model_dir: Path) -> None:
    for path in model_dir.glob("model*.safetensors*"):
        path.unlink()
    (model_dir / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    findings = check_model_directory(model_dir)
    assert _errors(findings) == []
    assert "model.weights-bin-only" in _ids(findings)


def test_only_gguf_weights(model_dir: Path) -> None:
    for path in model_dir.glob("model*.safetensors*"):
        path.unlink()
    (model_dir / "model-Q4_K_M.gguf").write_bytes(b"GGUF")
    assert _errors(check_model_directory(model_dir)) == ["model.weights-gguf-only"]


def test_missing_tokenizer(model_dir: Path) -> None:
    (model_dir / "tokenizer.json").unlink()
    for name in ("vocab.json", "merges.txt"):
        (model_dir / name).unlink(missing_ok=True)
    assert "model.tokenizer-missing" in _errors(check_model_directory(model_dir))


def test_missing_generation_config_is_a_warning(model_dir: Path) -> None:
    (model_dir / "generation_config.json").unlink()
    findings = check_model_directory(model_dir)
    assert "model.generation-config-missing" in _ids(findings)
    assert _errors(findings) == []


def test_eos_id_outside_the_tokenizer(model_dir: Path) -> None:
    _edit_json(model_dir / "generation_config.json", eos_token_id=[151645, 151643])
    findings = check_model_directory(model_dir)
    assert "model.eos-id-not-in-tokenizer" in _errors(findings)


def test_eos_id_that_misses_the_end_of_turn_token(model_dir: Path) -> None:
    vocabulary = json.loads((model_dir / "tokenizer.json").read_text())
    ids = {entry["content"]: entry["id"] for entry in vocabulary["added_tokens"]}
    # The wrong eos id of the deployment stories: only <|endoftext|>, not <|im_end|>.
    _edit_json(model_dir / "generation_config.json", eos_token_id=ids["<|endoftext|>"])
    _edit_json(model_dir / "config.json", eos_token_id=ids["<|endoftext|>"])
    findings = check_model_directory(model_dir)
    assert _errors(findings) == ["model.eos-mismatch-chat-template"]
    assert "<|im_end|>" in findings[0].message
    assert str(ids["<|im_end|>"]) in findings[0].fix


def test_missing_chat_template_is_a_warning(model_dir: Path) -> None:
    (model_dir / "chat_template.jinja").unlink()
    _edit_json(model_dir / "tokenizer_config.json", chat_template=None)
    findings = check_model_directory(model_dir)
    assert "model.chat-template-missing" in _ids(findings)
    assert "model.chat-template-tools" not in _ids(findings)


def test_template_without_tools_is_reported(model_dir: Path) -> None:
    (model_dir / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    )
    facts = {f.check_id: f for f in check_model_directory(model_dir)}
    assert facts["model.chat-template-tools"].details["supports_tools"] is False
    assert facts["model.chat-template-thinking"].details["supports_thinking"] is False


def test_unreadable_config(model_dir: Path) -> None:
    (model_dir / "config.json").write_text("{not json")
    assert _errors(check_model_directory(model_dir)) == ["model.file-unreadable"]


@pytest.mark.parametrize(
    ("template", "tokenizer_config", "expected"),
    [
        ("{{ '<|im_start|>' + m.content + '<|im_end|>' }}{{ '<|endoftext|>' }}", None, "<|im_end|>"),
        ("<|start_header_id|>{{ m.content }}<|eot_id|>", None, "<|eot_id|>"),
        ("[INST] {{ m.content }} [/INST]{{ eos_token }}", {"eos_token": "</s>"}, "</s>"),
        ("[INST] {{ m.content }} [/INST]{{ eos_token }}", {"eos_token": {"content": "</eos>"}}, "</eos>"),
        ("{{ m.content }}", None, None),
    ],
)
def test_end_of_turn_token_of_common_templates(
    template: str, tokenizer_config: dict[str, object] | None, expected: str | None
) -> None:
    assert template_end_of_turn_token(template, tokenizer_config) == expected
