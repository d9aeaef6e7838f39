"""The engine's own view of a run: its Prometheus ``/metrics`` polled while the load runs.

vLLM and SGLang name the same quantities differently; this module maps both into one
``ServerMetricsSample`` and keeps the samples of a run in a ``ServerTimeline``.

    vLLM (0.10 .. 0.25)                          SGLang (0.4 .. 0.5)               meaning
    vllm:num_requests_running                    sglang:num_running_reqs           requests in the batch
    vllm:num_requests_waiting                    sglang:num_queue_reqs             requests queued
    vllm:kv_cache_usage_perc (gpu_cache_...)     sglang:token_usage                KV cache in use, 0..1
    vllm:num_preemptions_total                   sglang:num_retracted_requests_total  preempted / retracted
    vllm:prefix_cache_hits/queries_total         sglang:cached_tokens/prompt_tokens_total  prefix cache
    vllm:spec_decode_num_accepted/draft_tokens   sglang:spec_accept_rate, spec_accept_length  speculation
    vllm:time_to_first_token_seconds             sglang:time_to_first_token_seconds  server-side TTFT

Usage::

    sample = parse_metrics_text(text_of_metrics_page, elapsed_s=0.0)   # one poll, engine-neutral
    timeline = ServerTimeline(metrics_url=url, flavor="vllm", samples=[first, last])
    print(timeline.prefix_cache_hit_ratio(), timeline.server_ttft_mean_ms())

Polling during a run is ``server_poller.ServerMetricsPoller`` (and, for the runner,
``server_poller.ServerMetricsObserver``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from prometheus_client.parser import text_string_to_metric_families

from modelyard.bench.records import TimelineSeries

logger = logging.getLogger(__name__)

EngineFlavor = Literal["vllm", "sglang", "unknown"]

# For each quantity, the sample names to try in order, per engine. Counters are listed with the
# ``_total`` suffix the exposition text carries.
_VLLM_NAMES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions": ("vllm:num_preemptions_total",),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "spec_accepted": ("vllm:spec_decode_num_accepted_tokens_total",),
    "spec_drafted": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "ttft": ("vllm:time_to_first_token_seconds",),
}
_SGLANG_NAMES: dict[str, tuple[str, ...]] = {
    "running": ("sglang:num_running_reqs",),
    "waiting": ("sglang:num_queue_reqs",),
    "kv_cache": ("sglang:token_usage",),
    "preemptions": ("sglang:num_retracted_requests_total", "sglang:total_retracted_reqs"),
    "prefix_hits": ("sglang:cached_tokens_total",),
    "prefix_queries": ("sglang:prompt_tokens_total",),
    "prefix_hit_gauge": ("sglang:cache_hit_rate",),
    "spec_accept_rate": ("sglang:spec_accept_rate",),
    "spec_accept_length": ("sglang:spec_accept_length",),
    "prompt_tokens": ("sglang:prompt_tokens_total",),
    "generation_tokens": ("sglang:generation_tokens_total",),
    "ttft": ("sglang:time_to_first_token_seconds",),
}


@dataclass(frozen=True)
class HistogramSnapshot:
    """A cumulative Prometheus histogram at one instant, summed over label sets."""

    upper_bounds_s: list[float]  # the ``le`` bounds, ascending, ``inf`` last
    cumulative_counts: list[float]
    sum_s: float
    count: float

    def minus(self, earlier: HistogramSnapshot) -> HistogramSnapshot:
        """The observations made between ``earlier`` and this snapshot."""
        if earlier.upper_bounds_s != self.upper_bounds_s:
            return self
        return HistogramSnapshot(
            upper_bounds_s=self.upper_bounds_s,
            cumulative_counts=[
                a - b for a, b in zip(self.cumulative_counts, earlier.cumulative_counts, strict=True)
            ],
            sum_s=self.sum_s - earlier.sum_s,
            count=self.count - earlier.count,
        )

    def quantile_s(self, quantile: float) -> float | None:
        """Linear interpolation inside the bucket holding the quantile (as PromQL's histogram_quantile)."""
        if self.count <= 0 or not self.upper_bounds_s:
            return None
        rank = quantile * self.count
        lower_bound = 0.0
        lower_count = 0.0
        for bound, cumulative in zip(self.upper_bounds_s, self.cumulative_counts, strict=True):
            if cumulative >= rank:
                if bound == float("inf"):
                    return lower_bound
                in_bucket = cumulative - lower_count
                if in_bucket <= 0:
                    return bound
                return lower_bound + (bound - lower_bound) * (rank - lower_count) / in_bucket
            lower_bound, lower_count = bound, cumulative
        return lower_bound


@dataclass(frozen=True)
class ServerMetricsSample:
    """One poll of ``/metrics``, in engine-neutral names. ``None``: the engine does not export it."""

    elapsed_s: float  # since the poller started (monotonic clock)
    running_requests: float | None = None
    waiting_requests: float | None = None
    kv_cache_usage_ratio: float | None = None  # 0..1
    preemptions_total: float | None = None  # cumulative since the engine started
    prefix_cache_hit_tokens_total: float | None = None
    prefix_cache_query_tokens_total: float | None = None
    prefix_cache_hit_ratio_gauge: float | None = None  # SGLang's own recent-window gauge
    spec_accepted_tokens_total: float | None = None
    spec_draft_tokens_total: float | None = None
    spec_drafts_total: float | None = None  # decoding steps that proposed drafts
    spec_acceptance_ratio_gauge: float | None = None
    spec_accept_length_gauge: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    ttft_histogram: HistogramSnapshot | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerMetricsSample:
        values = dict(data)
        histogram = values.pop("ttft_histogram", None)
        return cls(**values, ttft_histogram=None if histogram is None else HistogramSnapshot(**histogram))


@dataclass
class ServerTimeline:
    """The samples of one run, and what can be derived from them over the run's window."""

    metrics_url: str
    flavor: EngineFlavor = "unknown"
    samples: list[ServerMetricsSample] = field(default_factory=list)
    failed_polls: int = 0
    last_error: str | None = None

    def _delta(self, attribute: str) -> float | None:
        values = [getattr(sample, attribute) for sample in self.samples]
        present = [value for value in values if value is not None]
        if len(present) < 2:
            return None
        return float(present[-1] - present[0])

    def preemptions_during_run(self) -> float | None:
        """Preemptions (vLLM) or retractions (SGLang) between the first and last poll."""
        return self._delta("preemptions_total")

    def prefix_cache_hit_ratio(self) -> float | None:
        """Cached prompt tokens over prompt tokens looked up during the run, 0..1."""
        hits = self._delta("prefix_cache_hit_tokens_total")
        queries = self._delta("prefix_cache_query_tokens_total")
        if hits is not None and queries:
            return hits / queries
        gauges = [
            s.prefix_cache_hit_ratio_gauge for s in self.samples if s.prefix_cache_hit_ratio_gauge is not None
        ]
        return sum(gauges) / len(gauges) if gauges else None

    def spec_acceptance_ratio(self) -> float | None:
        """Accepted over proposed draft tokens during the run, 0..1 (None without speculation)."""
        accepted = self._delta("spec_accepted_tokens_total")
        drafted = self._delta("spec_draft_tokens_total")
        if accepted is not None and drafted:
            return accepted / drafted
        gauges = [s.spec_acceptance_ratio_gauge for s in self.samples if s.spec_acceptance_ratio_gauge]
        return sum(gauges) / len(gauges) if gauges else None

    def _ttft_window(self) -> HistogramSnapshot | None:
        histograms = [s.ttft_histogram for s in self.samples if s.ttft_histogram is not None]
        if len(histograms) < 2:
            return None
        return histograms[-1].minus(histograms[0])

    def server_ttft_mean_ms(self) -> float | None:
        """The engine's mean TTFT over the requests it finished during the run."""
        window = self._ttft_window()
        if window is None or window.count <= 0:
            return None
        return window.sum_s / window.count * 1000.0

    def server_ttft_quantile_ms(self, quantile: float) -> float | None:
        """A TTFT quantile estimated from the engine's buckets (as coarse as its bucket bounds)."""
        window = self._ttft_window()
        if window is None:
            return None
        value = window.quantile_s(quantile)
        return None if value is None else value * 1000.0

    def server_ttft_request_count(self) -> float:
        window = self._ttft_window()
        return 0.0 if window is None else window.count

    def to_series(self, offset_s: float = 0.0) -> list[TimelineSeries]:
        """The timeline as ``TimelineSeries`` for a ``LoadPointResult`` (times shifted by ``offset_s``,
        the poller's elapsed time when the measurement window began). Cumulative counters become
        per-interval rates or ratios; the TTFT histogram's count and sum stay cumulative so that
        the engine's mean TTFT over any window can be taken later (``server_ttft_mean_ms_from_series``).
        """
        source = f"{self.flavor}:/metrics"
        series: dict[str, TimelineSeries] = {}

        def add(name: str, unit: str, time_s: float, value: float | None) -> None:
            if value is None:
                return
            entry = series.setdefault(name, TimelineSeries(name=name, unit=unit, source=source))
            entry.times_s.append(time_s - offset_s)
            entry.values.append(float(value))

        previous: ServerMetricsSample | None = None
        for sample in self.samples:
            time_s = sample.elapsed_s
            add("server_running_requests", "requests", time_s, sample.running_requests)
            add("server_waiting_requests", "requests", time_s, sample.waiting_requests)
            add("server_kv_cache_usage", "ratio", time_s, sample.kv_cache_usage_ratio)
            add("server_preemptions_total", "count", time_s, sample.preemptions_total)
            add(
                "server_prefix_cache_hit_tokens_total", "tokens", time_s, sample.prefix_cache_hit_tokens_total
            )
            add(
                "server_prefix_cache_query_tokens_total",
                "tokens",
                time_s,
                sample.prefix_cache_query_tokens_total,
            )
            if sample.ttft_histogram is not None:
                add("server_ttft_count", "count", time_s, sample.ttft_histogram.count)
                add("server_ttft_sum_s", "s", time_s, sample.ttft_histogram.sum_s)
            if previous is not None:
                interval_s = sample.elapsed_s - previous.elapsed_s
                add(
                    "server_prefix_cache_hit_ratio",
                    "ratio",
                    time_s,
                    _ratio_of_deltas(
                        sample.prefix_cache_hit_tokens_total,
                        previous.prefix_cache_hit_tokens_total,
                        sample.prefix_cache_query_tokens_total,
                        previous.prefix_cache_query_tokens_total,
                    )
                    if sample.prefix_cache_hit_ratio_gauge is None
                    else sample.prefix_cache_hit_ratio_gauge,
                )
                add(
                    "server_spec_acceptance_ratio",
                    "ratio",
                    time_s,
                    _ratio_of_deltas(
                        sample.spec_accepted_tokens_total,
                        previous.spec_accepted_tokens_total,
                        sample.spec_draft_tokens_total,
                        previous.spec_draft_tokens_total,
                    )
                    if sample.spec_acceptance_ratio_gauge is None
                    else sample.spec_acceptance_ratio_gauge,
                )
                generated = _ratio_of_deltas(
                    sample.generation_tokens_total, previous.generation_tokens_total, interval_s, 0.0
                )
                add("server_generation_tokens_per_s", "tokens/s", time_s, generated)
            previous = sample
        return list(series.values())

    def peak(self, attribute: str) -> float | None:
        values = [getattr(sample, attribute) for sample in self.samples]
        present = [float(value) for value in values if value is not None]
        return max(present) if present else None

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics_url": self.metrics_url,
            "flavor": self.flavor,
            "failed_polls": self.failed_polls,
            "last_error": self.last_error,
            "samples": [sample.to_json() for sample in self.samples],
            "summary": {
                "preemptions_during_run": self.preemptions_during_run(),
                "prefix_cache_hit_ratio": self.prefix_cache_hit_ratio(),
                "spec_acceptance_ratio": self.spec_acceptance_ratio(),
                "server_ttft_mean_ms": self.server_ttft_mean_ms(),
                "server_ttft_p50_ms": self.server_ttft_quantile_ms(0.5),
                "server_ttft_p99_ms": self.server_ttft_quantile_ms(0.99),
                "peak_running_requests": self.peak("running_requests"),
                "peak_waiting_requests": self.peak("waiting_requests"),
                "peak_kv_cache_usage_ratio": self.peak("kv_cache_usage_ratio"),
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerTimeline:
        flavor = data.get("flavor", "unknown")
        return cls(
            metrics_url=str(data.get("metrics_url", "")),
            flavor=flavor if flavor in ("vllm", "sglang") else "unknown",
            samples=[ServerMetricsSample.from_json(sample) for sample in data.get("samples", [])],
            failed_polls=int(data.get("failed_polls", 0)),
            last_error=data.get("last_error"),
        )


@dataclass(frozen=True)
class TtftGap:
    """Client-measured TTFT against the engine's own: the gap is network, HTTP and detokenizer time
    (plus the client's own overhead), which the engine's histogram never sees."""

    client_mean_ms: float
    server_mean_ms: float
    gap_mean_ms: float
    client_p50_ms: float
    server_p50_ms: float | None
    gap_p50_ms: float | None
    client_request_count: int
    server_request_count: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ttft_gap(client_ttft_ms: Sequence[float], timeline: ServerTimeline) -> TtftGap | None:
    """Compare the client's TTFTs of a run with the engine's TTFT histogram over the same window.

    None when either side has nothing (no successful requests, or an engine without the histogram).
    """
    server_mean_ms = timeline.server_ttft_mean_ms()
    if not client_ttft_ms or server_mean_ms is None:
        return None
    ordered = sorted(client_ttft_ms)
    client_mean_ms = sum(ordered) / len(ordered)
    client_p50_ms = _median(ordered)
    server_p50_ms = timeline.server_ttft_quantile_ms(0.5)
    return TtftGap(
        client_mean_ms=client_mean_ms,
        server_mean_ms=server_mean_ms,
        gap_mean_ms=client_mean_ms - server_mean_ms,
        client_p50_ms=client_p50_ms,
        server_p50_ms=server_p50_ms,
        gap_p50_ms=None if server_p50_ms is None else client_p50_ms - server_p50_ms,
        client_request_count=len(ordered),
        server_request_count=timeline.server_ttft_request_count(),
    )


def _ratio_of_deltas(
    numerator_now: float | None,
    numerator_before: float | None,
    denominator_now: float | None,
    denominator_before: float | None,
) -> float | None:
    if None in (numerator_now, numerator_before, denominator_now, denominator_before):
        return None
    denominator = float(denominator_now) - float(denominator_before)  # type: ignore[arg-type]
    if denominator <= 0:
        return None
    return (float(numerator_now) - float(numerator_before)) / denominator  # type: ignore[arg-type]


def server_ttft_mean_ms_from_series(series: Sequence[TimelineSeries]) -> float | None:
    """The engine's mean TTFT over a stored timeline (from its cumulative count and sum)."""
    by_name = {entry.name: entry for entry in series}
    count, total = by_name.get("server_ttft_count"), by_name.get("server_ttft_sum_s")
    if count is None or total is None or len(count.values) < 2 or len(total.values) < 2:
        return None
    requests = count.values[-1] - count.values[0]
    if requests <= 0:
        return None
    return (total.values[-1] - total.values[0]) / requests * 1000.0


def _series_delta(by_name: dict[str, TimelineSeries], name: str) -> float | None:
    entry = by_name.get(name)
    if entry is None or len(entry.values) < 2:
        return None
    return entry.values[-1] - entry.values[0]


def _series_peak(series: Sequence[TimelineSeries], suffix: str) -> float | None:
    values = [value for entry in series if entry.name.endswith(suffix) for value in entry.values]
    return max(values) if values else None


def _series_mean(series: Sequence[TimelineSeries], suffix: str) -> float | None:
    values = [value for entry in series if entry.name.endswith(suffix) for value in entry.values]
    return sum(values) / len(values) if values else None


def server_summary_from_series(series: Sequence[TimelineSeries]) -> dict[str, float | None]:
    """The engine's and GPUs' headline figures over a stored point (``None``: not observed)."""
    by_name = {entry.name: entry for entry in series}
    hits = _series_delta(by_name, "server_prefix_cache_hit_tokens_total")
    queries = _series_delta(by_name, "server_prefix_cache_query_tokens_total")
    prefix_ratio = hits / queries if hits is not None and queries else None
    if prefix_ratio is None:
        prefix_ratio = _series_mean(series, "server_prefix_cache_hit_ratio")
    gpu_power = [entry for entry in series if entry.name.endswith("_power_watts")]
    return {
        "engine_ttft_mean_ms": server_ttft_mean_ms_from_series(series),
        "peak_running_requests": _series_peak(series, "server_running_requests"),
        "peak_waiting_requests": _series_peak(series, "server_waiting_requests"),
        "peak_kv_cache_usage": _series_peak(series, "server_kv_cache_usage"),
        "preemptions": _series_delta(by_name, "server_preemptions_total"),
        "prefix_cache_hit_ratio": prefix_ratio,
        "spec_acceptance_ratio": _series_mean(series, "server_spec_acceptance_ratio"),
        "mean_gpu_utilization_percent": _series_mean(series, "_utilization_percent"),
        "peak_gpu_memory_used_bytes": _series_peak(series, "_memory_used_bytes"),
        "mean_gpu_power_watts": sum(sum(e.values) / len(e.values) for e in gpu_power if e.values)
        if gpu_power
        else None,
    }


def _median(ordered: Sequence[float]) -> float:
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2.0


def detect_flavor(metrics_text: str) -> EngineFlavor:
    """Which engine wrote this exposition text, from its metric name prefixes."""
    if "vllm:" in metrics_text:
        return "vllm"
    if "sglang:" in metrics_text:
        return "sglang"
    return "unknown"


def parse_metrics_text(
    metrics_text: str,
    elapsed_s: float,
    flavor: EngineFlavor | None = None,
    labels: Mapping[str, str] | None = None,
) -> ServerMetricsSample:
    """Map one ``/metrics`` exposition text to a sample. Several label sets (data-parallel engines,
    SGLang's ranks) are summed for counts and averaged for ratios. ``labels``: only the samples
    that carry these (the modelyard server's page re-exports every engine's with a ``deployment``)."""
    wanted = dict(labels or {})
    values: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if any(sample.labels.get(name) != value for name, value in wanted.items()):
                continue
            values.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    # The flavour of the samples kept (a server's page may carry both engines' names).
    flavor = flavor or (detect_flavor(" ".join(values)) if wanted else detect_flavor(metrics_text))
    names = _SGLANG_NAMES if flavor == "sglang" else _VLLM_NAMES

    def total(key: str) -> float | None:
        for name in names.get(key, ()):
            if name in values:
                return sum(value for _, value in values[name])
        return None

    def mean(key: str) -> float | None:
        for name in names.get(key, ()):
            if name in values:
                series = [value for _, value in values[name]]
                return sum(series) / len(series)
        return None

    return ServerMetricsSample(
        elapsed_s=elapsed_s,
        running_requests=total("running"),
        waiting_requests=total("waiting"),
        kv_cache_usage_ratio=mean("kv_cache"),
        preemptions_total=total("preemptions"),
        prefix_cache_hit_tokens_total=total("prefix_hits"),
        prefix_cache_query_tokens_total=total("prefix_queries"),
        prefix_cache_hit_ratio_gauge=mean("prefix_hit_gauge"),
        spec_accepted_tokens_total=total("spec_accepted"),
        spec_draft_tokens_total=total("spec_drafted"),
        spec_drafts_total=total("spec_drafts"),
        spec_acceptance_ratio_gauge=mean("spec_accept_rate"),
        spec_accept_length_gauge=mean("spec_accept_length"),
        prompt_tokens_total=total("prompt_tokens"),
        generation_tokens_total=total("generation_tokens"),
        ttft_histogram=_histogram(values, names.get("ttft", ())),
    )


def _histogram(
    values: dict[str, list[tuple[dict[str, str], float]]], base_names: tuple[str, ...]
) -> HistogramSnapshot | None:
    for base in base_names:
        buckets = values.get(f"{base}_bucket")
        if not buckets:
            continue
        by_bound: dict[float, float] = {}
        for labels, value in buckets:
            bound = float(labels.get("le", "inf"))
            by_bound[bound] = by_bound.get(bound, 0.0) + value
        bounds = sorted(by_bound)
        return HistogramSnapshot(
            upper_bounds_s=bounds,
            cumulative_counts=[by_bound[bound] for bound in bounds],
            sum_s=sum(value for _, value in values.get(f"{base}_sum", [])),
            count=sum(value for _, value in values.get(f"{base}_count", [])),
        )
    return None


def metrics_url_for(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000/metrics`` (engines serve /metrics at the root)."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return f"{root}/metrics"
