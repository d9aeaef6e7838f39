"""The speculative acceptance of one measurement, from the engine's own Prometheus samples read
before and after it (``Endpoint.metrics_url``: the modelyard server's ``/metrics``, which
re-exports each engine's samples with a ``deployment`` label, or an engine's own page), through
the bench's one mapping of engine names (``bench/server_metrics.parse_metrics_text``).

- vLLM counts: accepted tokens over draft tokens is the acceptance ratio of the run, and
  ``1 + accepted / drafts`` the mean tokens a step yields;
- SGLang has gauges: ``sglang:spec_accept_rate`` (0 to 1) and ``sglang:spec_accept_length``,
  read after the run.

    before = read_counters(endpoint)
    ...  # the bench run
    figures = acceptance_between(before, read_counters(endpoint))   # None when nothing was read
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx

from modelyard.bench.server_metrics import ServerMetricsSample, parse_metrics_text

if TYPE_CHECKING:
    from modelyard.tune.endpoint import Endpoint

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AcceptanceFigures:
    """What a measurement reports of speculation (``None``: the engine does not say)."""

    acceptance_ratio: float | None
    """Accepted over proposed tokens during the run, 0 to 1."""
    mean_acceptance_length: float | None
    """Tokens a decoding step yields on average (1 + the accepted drafts)."""
    accepted_tokens: float | None = None
    draft_tokens: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AcceptanceFigures:
        return cls(**{name: data.get(name) for name in cls.__dataclass_fields__})


def read_counters(endpoint: Endpoint, *, timeout_s: float = 5.0) -> ServerMetricsSample | None:
    """One read of ``endpoint.metrics_url`` (its samples with ``endpoint.metrics_labels``); None
    (logged) when there is none or it fails: the acceptance rate is an addition to a measurement,
    never a condition of it."""
    if endpoint.metrics_url is None:
        return None
    headers = {"Authorization": f"Bearer {endpoint.metrics_token}"} if endpoint.metrics_token else {}
    try:
        response = httpx.get(endpoint.metrics_url, headers=headers, timeout=timeout_s)
        response.raise_for_status()
        return parse_metrics_text(response.text, elapsed_s=0.0, labels=dict(endpoint.metrics_labels))
    except (httpx.HTTPError, ValueError) as error:
        logger.warning("reading %s for the speculative acceptance failed: %s", endpoint.metrics_url, error)
        return None


def _delta(after: float | None, before: float | None) -> float | None:
    if after is None:
        return None
    return after - (before or 0.0)


def acceptance_between(
    before: ServerMetricsSample | None, after: ServerMetricsSample | None
) -> AcceptanceFigures | None:
    """The acceptance of the run between two reads (see the module docstring)."""
    if after is None:
        return None
    start = before or ServerMetricsSample(elapsed_s=0.0)
    accepted = _delta(after.spec_accepted_tokens_total, start.spec_accepted_tokens_total)
    drafted = _delta(after.spec_draft_tokens_total, start.spec_draft_tokens_total)
    drafts = _delta(after.spec_drafts_total, start.spec_drafts_total)
    if drafted:
        return AcceptanceFigures(
            acceptance_ratio=(accepted or 0.0) / drafted,
            mean_acceptance_length=1.0 + (accepted or 0.0) / drafts if drafts else None,
            accepted_tokens=accepted,
            draft_tokens=drafted,
        )
    if after.spec_acceptance_ratio_gauge is not None or after.spec_accept_length_gauge is not None:
        return AcceptanceFigures(
            acceptance_ratio=after.spec_acceptance_ratio_gauge,
            mean_acceptance_length=after.spec_accept_length_gauge,
        )
    return None
