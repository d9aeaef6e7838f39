"""The estimator against KV-cache sizes that vLLM and SGLang logged at startup (tests/estimate/fixtures).

Two measures per fixture, printed with ``pytest -s``:
- tokens: given the KV memory the engine logged, the tokens we compute must be within 5% of the
  tokens it logged (this checks the per-token and per-sequence model: layers, heads, TP, dtypes,
  hybrid paging);
- available memory: where the fixture has everything the engine saw (GPU, flags, weights), our
  prediction of the KV memory itself, reported against the log.
"""

from __future__ import annotations

import re

import pytest
import yaml

from modelyard.doctor.memory import memory_findings
from modelyard.estimate import (
    GpuSpec,
    MemoryEstimate,
    estimate_memory,
    kv_tokens_from_bytes,
    parse_gpu_specs,
)
from modelyard.modeldir import read_model_facts

from .engine_logs import FIXTURES as FIXTURE_DIRECTORY
from .engine_logs import GIB, Fixture, all_fixtures

FIXTURES = all_fixtures()
TOKEN_TOLERANCE = 0.05
# Predicting the memory itself involves the engine's activation profile and allocator; we hold it
# to 15% and report the figure.
MEMORY_TOLERANCE = 0.15


def _estimate(fixture: Fixture) -> MemoryEstimate:
    facts = read_model_facts(fixture.config_path)
    return estimate_memory(
        facts,
        fixture.engine,
        parse_gpu_specs(fixture.gpu),
        [*fixture.arguments, *fixture.implied_arguments],
        engine_version=fixture.engine_version,
    )


def test_there_are_enough_fixtures_across_engines_with_a_hybrid_model() -> None:
    engines = {fixture.engine for fixture in FIXTURES}
    hybrids = [fixture for fixture in FIXTURES if "hybrid" in fixture.name]
    assert len(FIXTURES) >= 6 and engines == {"vllm", "sglang"} and hybrids
    issue_threads = [fixture for fixture in FIXTURES if fixture.source_url.startswith("https://github.com/")]
    field_runs = [fixture for fixture in FIXTURES if fixture.source_url.startswith("field run:")]
    assert len(issue_threads) >= 6 and len(issue_threads) + len(field_runs) == len(FIXTURES)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[fixture.name for fixture in FIXTURES])
def test_kv_tokens_from_logged_memory_within_5_percent(fixture: Fixture) -> None:
    estimate = _estimate(fixture)
    context = fixture.logged.context_tokens or estimate.context_tokens
    arguments_text = " ".join(fixture.arguments)
    tokens, _ = kv_tokens_from_bytes(
        estimate.cache,
        fixture.logged.memory_bytes,
        context,
        fixture.engine,
        prefix_caching="--no-enable-prefix-caching" not in arguments_text,
    )
    error = tokens / fixture.logged.tokens - 1
    print(
        f"\n{fixture.name}: logged {fixture.logged.tokens:,} tokens in "
        f"{fixture.logged.memory_bytes / GIB:.2f} GiB, computed {tokens:,} ({error:+.2%})"
    )
    assert abs(error) <= TOKEN_TOLERANCE


PREDICTED = [fixture for fixture in FIXTURES if fixture.predict_available_memory]


@pytest.mark.parametrize("fixture", PREDICTED, ids=[fixture.name for fixture in PREDICTED])
def test_predicted_kv_memory_against_the_log(fixture: Fixture) -> None:
    estimate = _estimate(fixture)
    predicted = estimate.plan_on_total.kv_cache_bytes
    error = predicted / fixture.logged.memory_bytes - 1
    print(
        f"\n{fixture.name}: logged KV memory {fixture.logged.memory_bytes / GIB:.2f} GiB, "
        f"predicted {predicted / GIB:.2f} GiB ({error:+.2%}); weights "
        f"{estimate.weights_bytes / GIB:.2f} GiB, activations {estimate.activation_bytes / GIB:.2f} GiB"
    )
    assert abs(error) <= MEMORY_TOLERANCE


def test_busy_gpu_refusal_from_a_field_run_is_predicted() -> None:
    """vLLM refused to start because an earlier engine still held the GPU; so does our check."""
    data = yaml.safe_load((FIXTURE_DIRECTORY / "refusals" / "vllm-qwen3-8b-h200-busy-gpu.yaml").read_text())
    match = re.search(r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\)", data["log"])
    assert match is not None
    free_gib, total_gib = float(match.group(1)), float(match.group(2))
    gpu = GpuSpec(name="H200", memory_total_bytes=int(total_gib * GIB), memory_free_bytes=int(free_gib * GIB))
    facts = read_model_facts(FIXTURE_DIRECTORY / "refusals" / data["config"])
    estimate = estimate_memory(facts, "vllm", [gpu], data["arguments"], engine_version="0.25.0")
    findings = {finding.check_id: finding for finding in memory_findings(estimate)}
    refusal = findings["memory.free-memory-too-low"]
    assert refusal.severity == "error"
    assert f"{free_gib:.1f} GiB is free" in refusal.message and "128.6 GiB" in refusal.message
