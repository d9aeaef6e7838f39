"""The typed records of a benchmark run, shared by the client, the metrics and the reports.

Everything a run produces is one of these dataclasses, and a whole run is a ``RunResult``:

    result = RunResult.from_json(path.read_text())
    for point in result.points:
        print(point.point.label, point.metrics["ttft_ms"].median)

Times inside a ``RequestRecord`` are monotonic nanoseconds measured from the start of the run
(``time.perf_counter_ns()`` at the moment the run began), so they compare across requests of
one run but not across runs. Durations derived from them are in milliseconds (``*_ms``).

``SCHEMA_VERSION`` changes whenever a field is renamed or removed; readers refuse other
versions with a message instead of misreading them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from modelyard.errors import InvalidInput

SCHEMA_VERSION = 1

LoadKind = Literal["concurrency", "rate"]
"""Closed loop (a fixed number of requests in flight) or open loop (requests per second)."""

ArrivalKind = Literal["poisson", "gamma", "constant"]
"""How open-loop send times are spaced: exponential gaps, gamma gaps (burstiness), or even."""

EndpointKind = Literal["chat", "completions"]
"""``/v1/chat/completions`` (messages) or ``/v1/completions`` (prompt text)."""

NANOSECONDS_PER_MILLISECOND = 1_000_000


@dataclass(slots=True)
class BenchPrompt:
    """One unit of work: the prompt sent and the lengths asked for and obtained.

    ``messages`` is used with the chat endpoint, ``prompt_text`` with the completions endpoint;
    a dataset fills at least one of them. ``achieved_input_tokens`` is what the local tokenizer
    (or the engine's ``/tokenize``) counted, ``None`` when nothing counted it.
    """

    prompt_id: str
    max_output_tokens: int
    messages: list[dict[str, str]] | None = None
    prompt_text: str | None = None
    requested_input_tokens: int | None = None
    achieved_input_tokens: int | None = None
    source: str = ""
    """The dataset it came from (``random``, ``shared-prefix``, ``sharegpt:FILE`` ...)."""

    def text(self) -> str:
        """The prompt as one string (the messages' contents joined when it is a chat prompt)."""
        if self.prompt_text is not None:
            return self.prompt_text
        return "\n".join(message.get("content", "") for message in self.messages or [])


@dataclass(slots=True)
class RequestRecord:
    """What the client saw of one request. Times are ns since the run started (monotonic)."""

    request_index: int
    prompt_id: str
    scheduled_send_ns: int
    """When the schedule said to send it (open loop), or when a slot became free (closed loop)."""
    actual_send_ns: int
    """When the request bytes were handed to the HTTP client."""
    warmup: bool = False
    """Warm-up requests are recorded but excluded from every metric."""
    end_ns: int | None = None
    """When the response ended (last byte, error or timeout)."""
    first_chunk_ns: int | None = None
    """First streamed chunk carrying any generated token: content or reasoning (TTFT)."""
    first_content_ns: int | None = None
    """First chunk carrying answer content, after any reasoning."""
    chunk_arrival_ns: list[int] = field(default_factory=list)
    """Arrival of each chunk that carried generated tokens (content or reasoning)."""
    chunk_tokens: list[int | None] = field(default_factory=list)
    """Tokens in each of those chunks, from per-chunk usage where the engine sends it."""
    reasoning_chunk_count: int = 0
    """How many of those chunks carried reasoning rather than content."""
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    """From the server's ``usage``; ``None`` when it sent none (never guessed)."""
    usage_reasoning_tokens: int | None = None
    """``usage.completion_tokens_details.reasoning_tokens`` when the engine reports it."""
    retokenized_completion_tokens: int | None = None
    """The output re-counted with a local tokenizer, as a cross-check of the usage."""
    output_chars: int = 0
    reasoning_chars: int = 0
    finish_reason: str | None = None
    http_status: int | None = None
    saw_done: bool = False
    """Whether the stream ended with ``data: [DONE]``."""
    error: str | None = None
    """Why it failed (HTTP status and body, a cut stream, a timeout); ``None`` on success."""

    @property
    def succeeded(self) -> bool:
        return self.error is None and self.end_ns is not None

    @property
    def send_lag_ms(self) -> float:
        return (self.actual_send_ns - self.scheduled_send_ns) / NANOSECONDS_PER_MILLISECOND

    @property
    def ttft_ms(self) -> float | None:
        if self.first_chunk_ns is None:
            return None
        return (self.first_chunk_ns - self.actual_send_ns) / NANOSECONDS_PER_MILLISECOND

    @property
    def time_to_first_content_ms(self) -> float | None:
        if self.first_content_ns is None:
            return None
        return (self.first_content_ns - self.actual_send_ns) / NANOSECONDS_PER_MILLISECOND

    @property
    def e2el_ms(self) -> float | None:
        if self.end_ns is None:
            return None
        return (self.end_ns - self.actual_send_ns) / NANOSECONDS_PER_MILLISECOND

    def to_json(self) -> str:
        """One JSON object (a line of the per-request JSONL file), with the derived times."""
        data = dataclasses.asdict(self)
        data["send_lag_ms"] = self.send_lag_ms
        data["ttft_ms"] = self.ttft_ms
        data["time_to_first_content_ms"] = self.time_to_first_content_ms
        data["e2el_ms"] = self.e2el_ms
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RequestRecord:
        data = json.loads(text)
        names = {item.name for item in dataclasses.fields(cls)}
        return _REQUEST_ADAPTER.validate_python({key: value for key, value in data.items() if key in names})


@dataclass(slots=True)
class SloTargets:
    """Per-request service-level objectives; a request meets them when every given bound holds."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    time_to_first_content_ms: float | None = None

    def is_empty(self) -> bool:
        return all(value is None for value in dataclasses.astuple(self))


@dataclass(slots=True)
class RunConfig:
    """Everything that defines a run. The API key is never stored; only whether one was given."""

    base_url: str
    model: str
    endpoint: EndpointKind = "chat"
    load_kind: LoadKind = "concurrency"
    load_values: list[float] = field(default_factory=lambda: [1.0])
    """Concurrencies (closed loop) or request rates per second (open loop), one point each."""
    arrival: ArrivalKind = "poisson"
    burstiness: float = 1.0
    """Gamma shape: 1 is Poisson, below 1 burstier, above 1 more even."""
    num_requests: int | None = 100
    duration_s: float | None = None
    """Stop after this many seconds instead of (or as well as) a request count."""
    warmup_requests: int = 0
    warmup_s: float = 0.0
    ramp_up_s: float = 0.0
    """Closed loop: start the workers evenly over this time. Open loop: the rate grows linearly."""
    input_tokens: int = 128
    output_tokens: int = 128
    dataset: str = "random"
    dataset_path: str | None = None
    prompts_file: str | None = None
    seed: int = 0
    repeats: int = 1
    ignore_eos: bool = True
    request_timeout_s: float = 600.0
    max_send_lag_ms: float = 10.0
    """A point is invalid when the p99 send lag exceeds this: the client fell behind."""
    slo: SloTargets = field(default_factory=SloTargets)
    tokenizer_path: str | None = None
    prompt_tokens_counted_by: str | None = None
    """What counted the prompts' tokens: "local tokenizer DIR (transformers)", its fallback
    (tokenizers + jinja2, and why), the engine's /tokenize, or None (not counted)."""
    api_key_given: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    start_at_unix_s: float | None = None
    """Hold the first request until this wall-clock time (prompts are ready by then): several
    clients given one start time load a server together."""


@dataclass(slots=True)
class LoadPoint:
    """One load level of a sweep, and which repetition of it."""

    kind: LoadKind
    value: float
    repeat_index: int = 0

    @property
    def label(self) -> str:
        unit = "concurrent" if self.kind == "concurrency" else "req/s"
        value = f"{self.value:g}"
        return f"{value} {unit}" + (f" (repeat {self.repeat_index + 1})" if self.repeat_index else "")


@dataclass(slots=True)
class MetricSummary:
    """Distribution of one per-request (or per-chunk) quantity."""

    count: int
    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None


@dataclass(slots=True)
class GoodputResult:
    """SLO attainment over requests sent (errors and timeouts count as misses)."""

    slo: SloTargets
    requests_sent: int
    requests_met: int
    attainment: float
    attainment_ci_low: float
    """95 % Wilson score interval of the attainment."""
    attainment_ci_high: float
    goodput_requests_per_s: float


@dataclass(slots=True)
class TimelineSeries:
    """A sampled quantity over a point's run time (server metrics, GPU samples)."""

    name: str
    unit: str
    times_s: list[float] = field(default_factory=list)
    """Seconds since the point's measurement window began."""
    values: list[float] = field(default_factory=list)
    source: str = ""
    """Where it came from, e.g. ``vllm:/metrics`` or ``nvml:gpu0``."""


@dataclass(slots=True)
class LoadPointResult:
    """The results of one load point (one repetition)."""

    point: LoadPoint
    started_at: str
    """Wall-clock start, ISO 8601 UTC."""
    measurement_duration_s: float
    """From the first measured send to the last measured response end."""
    requests_sent: int
    requests_succeeded: int
    requests_failed: int
    warmup_requests: int
    missing_usage_count: int
    """Successful requests whose response carried no usage; their token counts stay unknown."""
    request_throughput_per_s: float
    output_token_throughput_per_s: float | None
    """From usage; ``None`` when any successful request lacked usage."""
    total_token_throughput_per_s: float | None
    input_token_throughput_per_s: float | None
    metrics: dict[str, MetricSummary] = field(default_factory=dict)
    """Keys: ttft_ms, tpot_ms, itl_ms, itl_per_token_ms, e2el_ms, time_to_first_content_ms,
    send_lag_ms, output_tokens_per_s_per_user, input_tokens, output_tokens."""
    goodput: GoodputResult | None = None
    retokenized_divergent_count: int = 0
    """Requests whose retokenized count differed from usage by more than 1 %."""
    max_retokenized_divergence: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    """Error text (first line) to how many requests failed with it."""
    valid: bool = True
    invalid_reason: str | None = None
    timelines: list[TimelineSeries] = field(default_factory=list)


@dataclass(slots=True)
class SpreadSummary:
    """How one headline figure varied over the repetitions of a point."""

    mean: float
    std: float
    min: float
    max: float
    values: list[float]


@dataclass(slots=True)
class PointSpread:
    kind: LoadKind
    value: float
    repeats: int
    figures: dict[str, SpreadSummary] = field(default_factory=dict)


@dataclass(slots=True)
class EngineInfo:
    """What was measured: the engine as far as the client could tell."""

    base_url: str
    served_model: str
    engine: str | None = None
    """``vllm``, ``sglang``, ``transformers`` ... when known (``/version``, ``/v1/models``, the user)."""
    engine_version: str | None = None
    label: str | None = None
    """A user's name for this configuration, shown in comparisons."""


@dataclass(slots=True)
class HardwareInfo:
    """Where the client ran, and the GPUs the user said (or NVML showed) the engine had."""

    client_hostname: str
    client_platform: str
    client_cpu_count: int
    python_version: str
    modelyard_version: str
    gpus: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RunResult:
    """A whole run: configuration, where it ran, each load point, and whether to trust it."""

    config: RunConfig
    engine: EngineInfo
    hardware: HardwareInfo
    run_id: str
    created_at: str
    points: list[LoadPointResult] = field(default_factory=list)
    spreads: list[PointSpread] = field(default_factory=list)
    valid: bool = True
    invalid_reason: str | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self, *, indent: int | None = 2) -> str:
        return _RUN_ADAPTER.dump_json(self, indent=indent).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> RunResult:
        """Parse a result file; raises ``InvalidInput`` for another schema version or a bad shape."""
        try:
            version = json.loads(text).get("schema_version")
        except (ValueError, AttributeError) as error:
            raise InvalidInput(f"benchmark result is not a JSON object: {error}") from error
        if version != SCHEMA_VERSION:
            raise InvalidInput(
                f"benchmark result has schema_version {version!r}; this modelyard reads {SCHEMA_VERSION}",
                hint="re-run the benchmark or use the modelyard version that wrote it",
            )
        try:
            return _RUN_ADAPTER.validate_json(text)
        except ValidationError as error:
            raise InvalidInput(f"benchmark result has the wrong shape: {error}") from error


_RUN_ADAPTER: TypeAdapter[RunResult] = TypeAdapter(RunResult)
_REQUEST_ADAPTER: TypeAdapter[RequestRecord] = TypeAdapter(RequestRecord)
