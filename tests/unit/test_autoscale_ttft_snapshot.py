"""The autoscaler's ``ttft_p90_ms`` reads the gateway's TTFT histograms of one deployment summed
over its keys (``server/autoscale_wiring.ttft_snapshot``): the p90 a user would read off
``modelyard_gateway_time_to_first_token_seconds`` for that deployment, other deployments apart."""

from __future__ import annotations

import pytest

from modelyard.server.autoscale_wiring import ttft_snapshot
from modelyard.server.metrics.gateway_counts import GatewayCounts


def test_a_deployments_ttft_is_summed_over_its_keys_and_others_are_left_out() -> None:
    counts = GatewayCounts()
    for _ in range(9):
        counts.first_byte("chat", "key-a", 0.02)
    counts.first_byte("chat", "key-b", 4.0)
    for _ in range(50):
        counts.first_byte("other", "key-a", 9.0)

    snapshot = ttft_snapshot(counts, "chat")

    assert snapshot is not None
    assert snapshot.count == 10
    assert snapshot.sum_s == pytest.approx(9 * 0.02 + 4.0)
    p90_s = snapshot.quantile_s(0.9)
    assert p90_s is not None and p90_s <= 0.05  # 9 of 10 answered within 20 ms
    assert (snapshot.quantile_s(1.0) or 0.0) >= 2.5  # the slow one is there


def test_a_deployment_without_requests_has_no_histogram() -> None:
    counts = GatewayCounts()
    counts.first_byte("other", "key-a", 0.1)
    assert ttft_snapshot(counts, "chat") is None
