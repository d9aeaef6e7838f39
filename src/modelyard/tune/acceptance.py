"""The speculative acceptance of one measurement, from the engine's own Prometheus samples read
before and after it (``Endpoint.metrics_url``: the modelyard server's ``/metrics``, which
re-exports each engine's samples with a ``deployment`` label, or an engine's own page).

- vLLM counts: ``vllm:spec_decode_num_accepted_tokens_total`` over
  ``vllm:spec_decode_num_draft_tokens_total`` is the acceptance ratio of the run, and
  ``1 + accepted / vllm:spec_decode_num_drafts_total`` the mean tokens a step yields;
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
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from modelyard.tune.contract import Endpoint

logger = logging.getLogger(__name__)

_COUNTERS = {
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "drafts": "vllm:spec_decode_num_drafts_total",
}
_GAUGES = {
    "accept_rate": "sglang:spec_accept_rate",
    "accept_length": "sglang:spec_accept_length",
}


@dataclass(frozen=True)
class SpeculationCounters:
    """The samples of one read, summed over the candidate's label sets (gauges averaged)."""

    accepted_tokens: float | None = None
    draft_tokens: float | None = None
    drafts: float | None = None
    accept_rate: float | None = None
    accept_length: float | None = None


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


def parse_counters(text: str, labels: tuple[tuple[str, str], ...] = ()) -> SpeculationCounters:
    """The speculation samples of an exposition text whose labels include ``labels``."""
    wanted = dict(labels)
    found: dict[str, list[float]] = {}
    names = {**{v: k for k, v in _COUNTERS.items()}, **{v: k for k, v in _GAUGES.items()}}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = names.get(sample.name)
            if key is None or any(sample.labels.get(name) != value for name, value in wanted.items()):
                continue
            found.setdefault(key, []).append(float(sample.value))

    def total(key: str) -> float | None:
        return sum(found[key]) if key in found else None

    def mean(key: str) -> float | None:
        return sum(found[key]) / len(found[key]) if found.get(key) else None

    return SpeculationCounters(
        accepted_tokens=total("accepted_tokens"),
        draft_tokens=total("draft_tokens"),
        drafts=total("drafts"),
        accept_rate=mean("accept_rate"),
        accept_length=mean("accept_length"),
    )


def read_counters(endpoint: Endpoint, *, timeout_s: float = 5.0) -> SpeculationCounters | None:
    """One read of ``endpoint.metrics_url``; None (logged) when there is none or it fails: the
    acceptance rate is an addition to a measurement, never a condition of it."""
    if endpoint.metrics_url is None:
        return None
    headers = {"Authorization": f"Bearer {endpoint.metrics_token}"} if endpoint.metrics_token else {}
    try:
        response = httpx.get(endpoint.metrics_url, headers=headers, timeout=timeout_s)
        response.raise_for_status()
        return parse_counters(response.text, endpoint.metrics_labels)
    except (httpx.HTTPError, ValueError) as error:
        logger.warning("reading %s for the speculative acceptance failed: %s", endpoint.metrics_url, error)
        return None


def _delta(after: float | None, before: float | None) -> float | None:
    if after is None:
        return None
    return after - (before or 0.0)


def acceptance_between(
    before: SpeculationCounters | None, after: SpeculationCounters | None
) -> AcceptanceFigures | None:
    """The acceptance of the run between two reads (see the module docstring)."""
    if after is None:
        return None
    start = before or SpeculationCounters()
    accepted = _delta(after.accepted_tokens, start.accepted_tokens)
    drafted = _delta(after.draft_tokens, start.draft_tokens)
    drafts = _delta(after.drafts, start.drafts)
    if drafted:
        return AcceptanceFigures(
            acceptance_ratio=(accepted or 0.0) / drafted,
            mean_acceptance_length=1.0 + (accepted or 0.0) / drafts if drafts else None,
            accepted_tokens=accepted,
            draft_tokens=drafted,
        )
    if after.accept_rate is not None or after.accept_length is not None:
        return AcceptanceFigures(
            acceptance_ratio=after.accept_rate, mean_acceptance_length=after.accept_length
        )
    return None
