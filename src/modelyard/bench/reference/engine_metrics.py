"""The reference server's ``/metrics``, under the real Prometheus names of the engine it plays.

vLLM (v1 engine) and SGLang names, as their ``/metrics`` pages show them; both carry a
``model_name`` label. Only what the reference server can know is moved (requests running and
waiting, KV-cache use from the tokens of running requests, token counters, latency histograms);
preemptions and prefix-cache hits exist at zero so scrapers find them; speculative acceptance
(vLLM's counters) moves when the double plays speculative decoding (``double_spec_tokens``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from modelyard.bench.reference.config import ReferenceConfig

_LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)


class EngineMetrics:
    """Counters and gauges of one reference server, named after its flavor's engine."""

    def __init__(self, config: ReferenceConfig) -> None:
        self.registry = CollectorRegistry()
        self._config = config
        model = config.served_model_names[0]
        labels = ["model_name"]
        prefix = "sglang" if config.flavor == "sglang" else "vllm"
        if config.flavor == "sglang":
            running_name, waiting_name, usage_name = "num_running_reqs", "num_queue_reqs", "token_usage"
        else:
            running_name, waiting_name = "num_requests_running", "num_requests_waiting"
            usage_name = "kv_cache_usage_perc"

        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(f"{prefix}:{name}", documentation, labels, registry=self.registry)

        def counter(name: str, documentation: str) -> Counter:
            return Counter(f"{prefix}:{name}", documentation, labels, registry=self.registry)

        def histogram(name: str, documentation: str) -> Histogram:
            return Histogram(
                f"{prefix}:{name}", documentation, labels, buckets=_LATENCY_BUCKETS_S, registry=self.registry
            )

        self.running = gauge(running_name, "Requests running now.").labels(model)
        self.waiting = gauge(waiting_name, "Requests waiting to run.").labels(model)
        self.kv_cache_usage = gauge(usage_name, "Fraction of the KV cache in use (0 to 1).").labels(model)
        self.prompt_tokens = counter("prompt_tokens", "Prefill tokens processed.").labels(model)
        self.generation_tokens = counter("generation_tokens", "Generated tokens.").labels(model)
        self.ttft = histogram("time_to_first_token_seconds", "Time to first token.").labels(model)
        self.itl = histogram("inter_token_latency_seconds", "Time between generated tokens.").labels(model)
        self.e2e = histogram("e2e_request_latency_seconds", "End-to-end request latency.").labels(model)
        if config.flavor == "sglang":
            gauge("cache_hit_rate", "Prefix cache hit rate.").labels(model).set(0.0)
            gauge("gen_throughput", "Generation throughput (tokens/s).").labels(model).set(0.0)
            gauge("spec_accept_length", "Average accepted speculative tokens.").labels(model).set(0.0)
            gauge("max_total_num_tokens", "Tokens the KV pool holds.").labels(model).set(
                config.kv_cache_tokens
            )
            self.success = counter("num_requests", "Finished requests.").labels(model)
        else:
            counter("num_preemptions", "Preemptions.").labels(model)
            counter("prefix_cache_queries", "Prefix cache lookups, in tokens.").labels(model)
            counter("prefix_cache_hits", "Prefix cache hits, in tokens.").labels(model)
            self.spec_drafts = counter("spec_decode_num_drafts", "Speculative drafts.").labels(model)
            self.spec_draft_tokens = counter(
                "spec_decode_num_draft_tokens", "Speculative draft tokens."
            ).labels(model)
            self.spec_accepted_tokens = counter(
                "spec_decode_num_accepted_tokens", "Accepted speculative tokens."
            ).labels(model)
            self.success = counter("request_success", "Finished requests.").labels(model)
        self._tokens_in_use = 0

    def count_generated(self, tokens: int) -> None:
        """Account ``tokens`` generated; with speculation on (vLLM flavor), the drafts behind them:
        each step proposes ``double_spec_tokens`` and yields 1 + the accepted ones."""
        self.generation_tokens.inc(tokens)
        proposed, ratio = self._config.double_spec_tokens, self._config.double_spec_acceptance_ratio
        if proposed and self._config.flavor != "sglang":
            steps = tokens / (1.0 + proposed * ratio)
            self.spec_drafts.inc(steps)
            self.spec_draft_tokens.inc(steps * proposed)
            self.spec_accepted_tokens.inc(steps * proposed * ratio)

    def add_tokens_in_use(self, tokens: int) -> None:
        """Account tokens held by running requests (negative to release)."""
        self._tokens_in_use += tokens
        self.kv_cache_usage.set(min(1.0, max(0, self._tokens_in_use) / self._config.kv_cache_tokens))

    def render(self) -> bytes:
        return generate_latest(self.registry)
