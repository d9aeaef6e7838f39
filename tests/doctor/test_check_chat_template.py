"""A model without a chat template served on the chat route (model.chat-template-missing)."""

from __future__ import annotations

from pathlib import Path

from mechanism_plans import QWEN3_8B, of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.modeldir import ChatTemplate, ModelFacts


def _model(template: str | None, *, tokenizer_read: bool = True, **config: object) -> ModelFacts:
    return ModelFacts(
        directory=Path("/models/base"),
        config={**QWEN3_8B, **config},
        tokenizer_config={"eos_token": "<|endoftext|>"} if tokenizer_read else None,
        chat_template=ChatTemplate(text=template, source="tokenizer_config.json" if template else None),
    )


def _missing(parameters: str, model: ModelFacts, engine: str = "vllm") -> list[Severity]:
    version = "0.25.0" if engine == "vllm" else "0.5.10"
    findings = plan_findings(parameters, model=model, engine=engine, version=version)
    return [f.severity for f in of_id(findings, "model.chat-template-missing")]


def test_a_base_model_without_a_template_fails_the_chat_route() -> None:
    assert _missing("", _model(None)) == [Severity.ERROR]
    assert _missing("", _model(None), engine="sglang") == [Severity.ERROR]


def test_a_template_in_the_model_or_on_the_command_line_is_enough() -> None:
    assert _missing("", _model("{% for m in messages %}{{ m.content }}{% endfor %}")) == []
    assert _missing("--chat-template /templates/chatml.jinja", _model(None)) == []


def test_pooling_models_have_no_chat_route() -> None:
    assert _missing("--runner pooling", _model(None)) == []
    assert _missing("", _model(None, architectures=["Qwen3Model"])) == []


def test_a_plan_that_knows_only_config_json_says_nothing() -> None:
    assert _missing("", _model(None, tokenizer_read=False)) == []
