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


def test_a_real_directory_without_a_template_gets_one_error_from_the_preflight(tmp_path: Path) -> None:
    from param_fixtures import gpu, make_model_dir

    from modelyard.doctor.host_facts import HostFacts
    from modelyard.doctor.preflight import preflight_deployment

    directory = make_model_dir(tmp_path, "qwen3-8b")
    (directory / "chat_template.jinja").unlink()
    host = HostFacts(shm_bytes=64 << 30, hub_cache_dir=tmp_path / "hub")
    findings = preflight_deployment(
        deployment_name="base", model_dir=directory, engine="vllm", version="0.25.0",
        backend_parameters="", env={}, gpus=[gpu(0)], host=host,
    )  # fmt: skip
    missing = [f.severity for f in findings if f.check_id == "model.chat-template-missing"]
    assert missing == [Severity.ERROR]
    with_template = preflight_deployment(
        deployment_name="base", model_dir=directory, engine="vllm", version="0.25.0",
        backend_parameters=f"--chat-template {tmp_path / 'chatml.jinja'}", env={}, gpus=[gpu(0)], host=host,
    )  # fmt: skip
    assert [f for f in with_template if f.check_id == "model.chat-template-missing"] == []
