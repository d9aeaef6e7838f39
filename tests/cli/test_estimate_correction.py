"""``modelyard estimate`` corrected by the starts the server recorded, and the REST API that lists
and forgets them (``/api/v1/start-observations``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from modelyard.estimate import MemoryEstimate, estimate_memory, parse_gpu_specs
from modelyard.estimate.correction import start_key
from modelyard.modeldir import read_model_facts
from modelyard.store.tables import StartObservationRow
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.stand_ins import build_stand_in

from .conftest import LiveServer

ARGUMENTS = "--gpu-memory-utilization 0.5 --max-model-len 8192"
GIB = 1 << 30


def record_starts(server: LiveServer, model_dir: Path, count: int, kv_share: float) -> int:
    """``count`` starts of vLLM 0.25.0 on an H100 whose engine logged ``kv_share`` of the
    predicted KV cache, as the controller records them; the tokens each logged."""
    facts = read_model_facts(model_dir)
    predicted = estimate_memory(
        facts, "vllm", parse_gpu_specs("1xH100"), ARGUMENTS.split(), engine_version="0.25.0"
    )
    key = start_key(
        predicted, engine_version="0.25.0", architecture=facts.architecture, parameters=ARGUMENTS.split()
    )
    plan = predicted.plan_on_total
    logged_tokens = int(plan.kv_cache_tokens * kv_share)
    with server.database.session() as session:
        for index in range(count):
            session.add(
                StartObservationRow(
                    observed_at=datetime.now(UTC) - timedelta(minutes=count - index),
                    deployment_name="qwen",
                    instance_uid=f"uid{index}",
                    replica_index=0,
                    start_number=index + 1,
                    engine="vllm",
                    engine_version="0.25.0",
                    gpu_model=key.gpu_model,
                    architecture=key.architecture,
                    memory_fraction=0.5,
                    context_tokens=key.context_tokens,
                    enforce_eager=False,
                    kv_dtype=key.kv_dtype,
                    tensor_parallel=1,
                    predicted_kv_bytes=plan.kv_cache_bytes,
                    predicted_kv_tokens=plan.kv_cache_tokens,
                    shown_kv_tokens=plan.kv_cache_tokens if index < 2 else logged_tokens,
                    logged_kv_bytes=int(plan.kv_cache_bytes * kv_share),
                    logged_kv_tokens=logged_tokens,
                    predicted_weights_bytes=predicted.weights_bytes,
                    predicted_activation_bytes=predicted.activation_bytes,
                    predicted_non_torch_bytes=predicted.non_torch_bytes,
                )
            )
        session.commit()
    return logged_tokens


def read_estimate(model_dir: Path) -> MemoryEstimate:
    return estimate_memory(
        read_model_facts(model_dir),
        "vllm",
        parse_gpu_specs("1xH100"),
        ARGUMENTS.split(),
        engine_version="0.25.0",
    )


def raw_bytes(data: dict[str, Any]) -> float:
    return float(data["uncorrected_plan_on_total"]["kv_cache_bytes"]) / GIB


def estimate(server: LiveServer, model_dir: Path, *extra: str) -> str:
    result = server.cli(
        "estimate", str(model_dir), "--gpus", "1xH100", "--backend", "vllm", "--engine-version", "0.25.0",
        "--args", ARGUMENTS, *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.stdout


def test_estimate_shows_the_correction_by_the_servers_starts(live_server: LiveServer, tmp_path: Path) -> None:
    model_dir = build_stand_in("qwen3-8b", tmp_path / "Qwen3-8B")
    plain = estimate(live_server, model_dir)
    assert "correction" not in plain
    logged = record_starts(live_server, model_dir, 3, kv_share=0.93)
    corrected = estimate(live_server, model_dir)
    assert (
        "correction: corrected by 3 starts on this cluster (these settings), last error +0.0 %" in corrected
    )
    data = json.loads(estimate(live_server, model_dir, "--json"))
    assert data["correction"]["applied"] and data["correction"]["starts"] == 3
    assert abs(data["plan_on_total"]["kv_cache_tokens"] - logged) <= 16
    # The estimator's own figure stays visible beside the corrected one, with what moved it.
    raw = data["uncorrected_plan_on_total"]["kv_cache_tokens"]
    assert raw == read_estimate(model_dir).plan_on_total.kv_cache_tokens > logged
    assert data["correction"]["summary"].endswith(
        f"KV cache {data['plan_on_total']['kv_cache_bytes'] / GIB - raw_bytes(data):+.2f} GiB per GPU "
        f"(-7.0 %), {raw:,} tokens before correction ({data['plan_on_total']['kv_cache_tokens']:,} after)"
    )
    assert f"{raw:,} tokens before correction" in corrected
    [uncorrected_row] = [line for line in corrected.splitlines() if "KV tokens, uncorrected" in line]
    assert f"{raw:,}" in uncorrected_row
    assert "correction" not in estimate(live_server, model_dir, "--no-correct")


def test_the_starts_are_listed_and_forgotten_over_rest(live_server: LiveServer, tmp_path: Path) -> None:
    model_dir = build_stand_in("qwen3-8b", tmp_path / "Qwen3-8B")
    record_starts(live_server, model_dir, 2, kv_share=0.95)
    auth = ("admin", live_server.password)
    listed = httpx.get(
        f"{live_server.url}/api/v1/start-observations",
        params={"engine": "vllm"},
        auth=auth,
        verify=shared_tls_context(),
    )
    assert listed.status_code == 200, listed.text
    starts = listed.json()["starts"]
    assert [start["start_number"] for start in starts] == [1, 2]
    assert starts[0]["gpu_model"] == "H100" and starts[0]["memory_fraction"] == 0.5
    assert "corrected by 2 starts" in estimate(live_server, model_dir)
    forgotten = httpx.delete(
        f"{live_server.url}/api/v1/start-observations", auth=auth, verify=shared_tls_context()
    )
    assert forgotten.json() == {"deleted": 2}
    assert "correction" not in estimate(live_server, model_dir)
