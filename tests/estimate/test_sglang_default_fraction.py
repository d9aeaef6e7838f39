"""SGLang's default --mem-fraction-static, computed as SGLang 0.5.x does, against a reported value."""

from __future__ import annotations

from pathlib import Path

from modelyard.estimate import estimate_memory, parse_gpu_specs
from modelyard.modeldir import read_model_facts

CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def test_default_fraction_on_h100_matches_the_reported_0_828() -> None:
    # sgl-project/sglang#29092: "I found the value to be 0.828 for H100 with Qwen3 32 B model".
    facts = read_model_facts(CONFIGS / "qwen3-32b.json")
    estimate = estimate_memory(facts, "sglang", parse_gpu_specs("1xH100"), [])
    assert estimate.memory_fraction_is_default
    assert abs(estimate.memory_fraction - 0.828) <= 0.005


def test_an_explicit_fraction_is_used_as_given() -> None:
    facts = read_model_facts(CONFIGS / "qwen3-32b.json")
    estimate = estimate_memory(facts, "sglang", parse_gpu_specs("1xH100"), ["--mem-fraction-static 0.8"])
    assert estimate.memory_fraction == 0.8 and not estimate.memory_fraction_is_default
