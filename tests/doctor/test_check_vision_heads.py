"""vLLM's vision encoders split their heads over the tensor-parallel ranks (param.tensor-parallel-heads):
a multimodal model whose language heads divide the TP size can still fail on its vision heads."""

from __future__ import annotations

from pathlib import Path

from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.modeldir import ModelFacts

# A GLM-4.5V-like checkpoint: 96 language heads (8 divides them), 12 vision heads (8 does not).
VISION_MODEL = ModelFacts(
    directory=Path("/models/vision-moe"),
    config={
        "architectures": ["Glm4vMoeForConditionalGeneration"],
        "model_type": "glm4v_moe",
        "text_config": {"num_attention_heads": 96, "num_key_value_heads": 8, "num_hidden_layers": 46},
        "vision_config": {"model_type": "glm4v_moe", "num_heads": 12, "depth": 24},
    },
)


def _heads(parameters: str, model: ModelFacts = VISION_MODEL) -> list[str]:
    findings = plan_findings(parameters, gpus="8xH100", model=model)
    return [finding.message for finding in of_id(findings, "param.tensor-parallel-heads")]


def test_vision_heads_that_do_not_split_over_the_tensor_parallel_size_are_an_error() -> None:
    findings = of_id(
        plan_findings("--tensor-parallel-size 8", gpus="8xH100", model=VISION_MODEL),
        "param.tensor-parallel-heads",
    )
    assert [finding.severity for finding in findings] == [Severity.ERROR]
    assert "vision encoder's 12 attention heads" in findings[0].message
    assert "--mm-encoder-tp-mode data" in findings[0].fix


def test_a_size_that_divides_the_vision_heads_or_a_data_parallel_encoder_is_fine() -> None:
    assert _heads("--tensor-parallel-size 4") == []
    assert _heads("--tensor-parallel-size 8 --mm-encoder-tp-mode data") == []


def test_internvit_pads_its_heads_so_it_is_not_refused() -> None:
    intern = ModelFacts(
        directory=Path("/models/internvl"),
        config={
            "architectures": ["InternVLChatModel"],
            "llm_config": {"num_attention_heads": 64},
            "num_attention_heads": 64,
            "vision_config": {"model_type": "intern_vit_6b", "num_attention_heads": 25},
        },
    )
    assert _heads("--tensor-parallel-size 8", model=intern) == []
