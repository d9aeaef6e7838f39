"""A whole benchmark run: prompts, each load point (closed or open loop), repeats, and the result.

    outcome = run_benchmark(RunConfig(base_url="http://127.0.0.1:8000", model="qwen",
                                      load_kind="rate", load_values=[5, 10], num_requests=200))
    print(outcome.result.points[0].metrics["ttft_ms"].median)

Closed loop: ``concurrency`` workers, each sending its next request as soon as its previous one
ended (started evenly over ``ramp_up_s``); a request's scheduled time is when its slot freed.
Open loop: the whole send schedule is drawn up front from the seed (``schedule.py``) and each
request is sent at its time whatever is in flight. Warm-up requests (the first
``warmup_requests``, and those sent in the first ``warmup_s``) are recorded and excluded.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import os
import platform
import random
import socket
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from modelyard import __version__
from modelyard.bench.client import BenchClient, normalize_base_url, probe
from modelyard.bench.datasets.output_length import output_length_fields
from modelyard.bench.metrics import spread_of_repeats, summarize_point
from modelyard.bench.records import (
    BenchPrompt,
    EngineInfo,
    HardwareInfo,
    LoadPoint,
    LoadPointResult,
    RequestRecord,
    RunConfig,
    RunResult,
    TimelineSeries,
)
from modelyard.bench.schedule import closed_loop_start_offsets_s, open_loop_send_times_s
from modelyard.errors import InvalidInput

logger = logging.getLogger(__name__)

# A closed-loop point measured for a duration needs this many requests per stream (metrics.py).
MIN_REQUESTS_PER_STREAM = 3.0

DURATION_MODE_PROMPTS = 1000


class PointObserver(Protocol):
    """Something that watches the server while one load point runs (``/metrics``, NVML)."""

    async def start(self) -> None: ...

    async def stop(self) -> list[TimelineSeries]: ...


class ProgressListener(Protocol):
    """Told about the run as it goes (the CLI draws a rich progress bar from it)."""

    def point_started(
        self, point: LoadPoint, total_requests: int | None, duration_s: float | None
    ) -> None: ...

    def request_finished(self, record: RequestRecord) -> None: ...

    def point_finished(self, result: LoadPointResult) -> None: ...


class TextCounter(Protocol):
    def count_plain(self, text: str) -> int: ...


@dataclass
class BenchmarkOutcome:
    """The run's result and every request record, ``records[i]`` belonging to ``result.points[i]``."""

    result: RunResult
    records: list[list[RequestRecord]] = field(default_factory=list)
    prompts: list[BenchPrompt] = field(default_factory=list)


# -- prompts and request bodies ---------------------------------------------------------------------

FALLBACK_WORDS = (
    "river",
    "stone",
    "light",
    "music",
    "garden",
    "window",
    "paper",
    "market",
    "winter",
    "summer",
    "letter",
    "animal",
    "bridge",
    "forest",
    "table",
    "story",
    "number",
    "planet",
    "signal",
    "engine",
)


def _fallback_prompts(config: RunConfig, count: int) -> list[BenchPrompt]:
    """Random word prompts when no tokenizer can count (lengths are requested, not achieved)."""
    rng = random.Random(config.seed)
    prompts = []
    for index in range(count):
        text = " ".join(rng.choice(FALLBACK_WORDS) for _ in range(config.input_tokens))
        prompts.append(
            BenchPrompt(
                prompt_id=f"words-{config.seed}-{index}",
                max_output_tokens=config.output_tokens,
                messages=[{"role": "user", "content": text}] if config.endpoint == "chat" else None,
                prompt_text=text if config.endpoint == "completions" else None,
                requested_input_tokens=config.input_tokens,
                source="random-words",
            )
        )
    return prompts


def prepare_prompts(config: RunConfig, count: int, *, api_key: str | None) -> list[BenchPrompt]:
    """Prompts from ``modelyard.bench.datasets``; random words when a random set has no tokenizer."""
    from modelyard.bench.datasets import DatasetSpec, build_prompts, open_token_counter

    spec = DatasetSpec.from_run_config(config, count)
    needs_counter = spec.name in ("random", "shared-prefix")
    counter = open_token_counter(
        tokenizer_path=config.tokenizer_path,
        base_url=normalize_base_url(config.base_url) if needs_counter or config.tokenizer_path else None,
        model=config.model,
        api_key=api_key,
    )
    config.prompt_tokens_counted_by = counter.description if counter is not None else None
    if counter is None and spec.name == "random":
        logger.warning(
            "no tokenizer to build exact-length prompts (pass --tokenizer MODEL_DIR); "
            "using random words, whose token counts the results report from usage"
        )
        return _fallback_prompts(config, count)
    return build_prompts(spec, counter)


def request_body(prompt: BenchPrompt, config: RunConfig, engine: str | None) -> bytes:
    """The JSON body of one streamed request (usage always asked for)."""
    body: dict[str, Any] = {"model": config.model}
    if config.endpoint == "chat":
        body["messages"] = prompt.messages or [{"role": "user", "content": prompt.text()}]
    else:
        body["prompt"] = prompt.text()
    body.update(output_length_fields(engine, prompt.max_output_tokens, ignore_eos=config.ignore_eos))
    body["stream"] = True
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    for key, value in config.extra_body.items():
        body[key] = value
    return orjson.dumps(body)


# -- where and what -------------------------------------------------------------------------------


async def detect_engine(config: RunConfig, api_key: str | None) -> EngineInfo:
    """Ask the server what it is (``/v1/models`` owner, ``/version``); unknown fields stay None."""
    base = normalize_base_url(config.base_url)
    info = EngineInfo(base_url=base, served_model=config.model)
    answer = await probe(base + "/v1/models", api_key=api_key)
    if answer is not None and isinstance(answer[1], dict):
        for entry in answer[1].get("data") or []:
            if isinstance(entry, dict) and entry.get("id") == config.model:
                owner = str(entry.get("owned_by", "")).lower()
                info.engine = {"vllm": "vllm", "sglang": "sglang", "huggingface": "transformers"}.get(owner)
                # Behind a modelyard gateway: the gateway names the engine and its version.
                extension = entry.get("modelyard")
                if isinstance(extension, dict) and extension.get("engine"):
                    info.engine = str(extension["engine"])
                    info.engine_version = str(extension.get("engine_version") or "") or None
                    return info
    if info.engine == "vllm":
        version = await probe(base + "/version", api_key=api_key)
        if version is not None and isinstance(version[1], dict):
            info.engine_version = version[1].get("version")
    elif info.engine == "sglang":
        server_info = await probe(base + "/get_server_info", api_key=api_key)
        if server_info is not None and isinstance(server_info[1], dict):
            info.engine_version = server_info[1].get("version")
    return info


def client_hardware(base_url: str | None = None) -> HardwareInfo:
    """Where the client runs; the GPUs too when the engine is on this host (a loopback ``base_url``)."""
    info = HardwareInfo(
        client_hostname=socket.gethostname(),
        client_platform=platform.platform(),
        client_cpu_count=os.cpu_count() or 1,
        python_version=sys.version.split()[0],
        modelyard_version=__version__,
    )
    host = urlsplit(base_url).hostname or "" if base_url else ""
    if host in ("localhost", "127.0.0.1", "::1") or host.startswith("127."):
        from modelyard.hardware.gpus import read_gpu_inventory

        inventory = read_gpu_inventory()
        info.gpus = [f"{gpu.name} ({gpu.memory_total_bytes / 2**30:.0f} GiB)" for gpu in inventory.gpus]
    return info


# -- one load point -----------------------------------------------------------------------------


class _PointRun:
    def __init__(
        self,
        client: BenchClient,
        config: RunConfig,
        bodies: Sequence[bytes],
        prompts: Sequence[BenchPrompt],
        progress: ProgressListener | None,
        counter: TextCounter | None,
    ) -> None:
        self.client = client
        self.config = config
        self.bodies = bodies
        self.prompts = prompts
        self.progress = progress
        self.counter = counter
        self.records: list[RequestRecord] = []
        self.origin_ns = time.perf_counter_ns()

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self.origin_ns

    def is_warmup(self, index: int, at_ns: int) -> bool:
        return index < self.config.warmup_requests or at_ns < self.config.warmup_s * 1e9

    async def send(self, record: RequestRecord, index: int) -> None:
        text = await self.client.send(
            record,
            self.bodies[index % len(self.bodies)],
            origin_ns=self.origin_ns,
            keep_text=self.counter is not None,
        )
        if self.counter is not None and record.succeeded and text:
            record.retokenized_completion_tokens = self.counter.count_plain(text)
        if self.progress is not None:
            self.progress.request_finished(record)

    def new_record(self, index: int, scheduled_ns: int, warmup: bool) -> RequestRecord:
        if index == len(self.prompts):
            logger.warning(
                "more requests than distinct prompts (%d): prompts repeat from here, and an engine's "
                "prefix cache can serve the repeats faster (give --num-requests, or a bigger prompt set)",
                len(self.prompts),
            )
        prompt = self.prompts[index % len(self.prompts)]
        record = RequestRecord(
            request_index=index,
            prompt_id=prompt.prompt_id,
            scheduled_send_ns=scheduled_ns,
            actual_send_ns=scheduled_ns,
            warmup=warmup,
        )
        self.records.append(record)
        return record

    async def closed_loop(self, concurrency: int, total: int | None) -> None:
        indices = itertools.count()
        duration_ns = int(self.config.duration_s * 1e9) if self.config.duration_s is not None else None
        measure_start_ns: list[int] = []

        async def worker(start_offset_s: float) -> None:
            if start_offset_s > 0:
                await asyncio.sleep(start_offset_s)
            scheduled_ns = self.now_ns()
            while True:
                index = next(indices)
                now_ns = self.now_ns()
                if total is not None and index >= total:
                    return
                warmup = self.is_warmup(index, now_ns)
                if not warmup:
                    if not measure_start_ns:
                        measure_start_ns.append(now_ns)
                    if duration_ns is not None and now_ns >= measure_start_ns[0] + duration_ns:
                        return
                record = self.new_record(index, scheduled_ns, warmup)
                await self.send(record, index)
                scheduled_ns = record.end_ns if record.end_ns is not None else self.now_ns()

        offsets = closed_loop_start_offsets_s(concurrency, self.config.ramp_up_s)
        await asyncio.gather(*(worker(offset) for offset in offsets))

    async def open_loop(self, rate_per_s: float, seed: int) -> None:
        config = self.config
        warmup_s = config.warmup_s
        times_s = open_loop_send_times_s(
            rate_per_s=rate_per_s,
            num_requests=config.num_requests + config.warmup_requests
            if config.num_requests is not None
            else None,
            arrival=config.arrival,
            burstiness=config.burstiness,
            seed=seed,
            duration_s=config.duration_s + warmup_s if config.duration_s is not None else None,
            ramp_up_s=config.ramp_up_s,
        )
        tasks: list[asyncio.Task[None]] = []
        start_ns = self.now_ns()
        for index, time_s in enumerate(times_s):
            scheduled_ns = start_ns + int(time_s * 1e9)
            delay_ns = scheduled_ns - self.now_ns()
            if delay_ns > 0:
                await asyncio.sleep(delay_ns / 1e9)
            record = self.new_record(index, scheduled_ns, self.is_warmup(index, scheduled_ns - start_ns))
            tasks.append(asyncio.create_task(self.send(record, index)))
        await asyncio.gather(*tasks)


def _prompt_count(config: RunConfig) -> int:
    if config.num_requests is not None:
        return config.num_requests + config.warmup_requests
    if config.duration_s is None:
        raise InvalidInput("a run needs --num-requests or --duration-s")
    if config.load_kind == "rate":
        # The schedule's length is known: enough distinct prompts for it, with room for the draw.
        expected = max(config.load_values) * (config.duration_s + config.warmup_s) * 1.2
        return int(expected) + config.warmup_requests + 16
    return DURATION_MODE_PROMPTS


async def run_point(
    config: RunConfig,
    point: LoadPoint,
    *,
    bodies: Sequence[bytes],
    prompts: Sequence[BenchPrompt],
    api_key: str | None,
    progress: ProgressListener | None = None,
    observers: Sequence[PointObserver] = (),
    counter: TextCounter | None = None,
) -> tuple[LoadPointResult, list[RequestRecord]]:
    """Run one load point (one repetition) and summarize it."""
    closed = point.kind == "concurrency"
    total = config.num_requests + config.warmup_requests if config.num_requests is not None else None
    if progress is not None:
        progress.point_started(point, total, config.duration_s)
    started_at = datetime.now(UTC)
    for observer in observers:
        await observer.start()
    # A full garbage collection pauses the event loop for tens of ms (seen as send lag): collect
    # now, freeze what exists, and leave the cyclic collector off while the load runs.
    gc.collect()
    gc.freeze()
    collector_was_enabled = gc.isenabled()
    gc.disable()
    try:
        async with BenchClient(
            config.base_url,
            api_key=api_key,
            endpoint=config.endpoint,
            request_timeout_s=config.request_timeout_s,
        ) as client:
            run = _PointRun(client, config, bodies, prompts, progress, counter)
            if closed:
                await run.closed_loop(int(point.value), total)
            else:
                await run.open_loop(point.value, seed=config.seed + point.repeat_index)
    finally:
        if collector_was_enabled:
            gc.enable()
        gc.unfreeze()
    timelines: list[TimelineSeries] = []
    for observer in observers:
        timelines.extend(await observer.stop())
    result = summarize_point(
        point,
        run.records,
        slo=config.slo,
        max_send_lag_ms=config.max_send_lag_ms,
        started_at=started_at,
        min_requests_per_stream=MIN_REQUESTS_PER_STREAM if config.duration_s is not None else None,
    )
    result.timelines = timelines
    if progress is not None:
        progress.point_finished(result)
    return result, run.records


async def wait_for_start(start_at_unix_s: float | None) -> None:
    """Sleep until ``start_at_unix_s`` (wall clock); a start time already past starts at once."""
    if start_at_unix_s is None:
        return
    delay_s = start_at_unix_s - time.time()
    if delay_s > 0:
        logger.info("holding the first request %.1f s, until the agreed start time", delay_s)
        await asyncio.sleep(delay_s)
    elif delay_s < -0.05:
        logger.warning(
            "the start time passed %.2f s ago while the prompts were prepared: this client starts "
            "late, out of step with any other client given the same time (give a later --start-at)",
            -delay_s,
        )


def load_points(config: RunConfig) -> list[LoadPoint]:
    """The sweep: every load value, each repeated ``repeats`` times (repeats of a value together)."""
    if not config.load_values:
        raise InvalidInput("a run needs at least one concurrency or request rate")
    for value in config.load_values:
        if value <= 0 or (config.load_kind == "concurrency" and value != int(value)):
            wanted = "integer concurrency" if config.load_kind == "concurrency" else "request rate"
            raise InvalidInput(f"load value {value!r} is not a positive {wanted}")
    if config.repeats < 1:
        raise InvalidInput(f"repeats must be >= 1, got {config.repeats}")
    return [
        LoadPoint(config.load_kind, float(value), repeat)
        for value in config.load_values
        for repeat in range(config.repeats)
    ]


async def run_benchmark_async(
    config: RunConfig,
    *,
    api_key: str | None = None,
    prompts: list[BenchPrompt] | None = None,
    engine: EngineInfo | None = None,
    progress: ProgressListener | None = None,
    observer_factories: Sequence[Callable[[], PointObserver]] = (),
    counter: TextCounter | None = None,
) -> BenchmarkOutcome:
    """Run every point of ``config``; the same code the server calls to benchmark a deployment."""
    points = load_points(config)
    config.api_key_given = bool(api_key)
    detected = await detect_engine(config, api_key)
    if engine is not None:
        detected.engine = engine.engine or detected.engine
        detected.engine_version = engine.engine_version or detected.engine_version
        detected.label = engine.label
    per_point = _prompt_count(config)
    if prompts is None:
        # Every load point gets prompts of its own: were they shared, an engine's prefix cache
        # would serve the later points from the earlier points' work.
        prompts = await asyncio.to_thread(prepare_prompts, config, per_point * len(points), api_key=api_key)
    if not prompts:
        raise InvalidInput("the dataset gave no prompts", hint="check --dataset and --dataset-path")
    if len(prompts) < per_point * len(points) and len(points) > 1:
        logger.warning(
            "%d prompts for %d points of %d requests: later points reuse earlier points' prompts, "
            "so an engine's prefix cache can make them look faster (use a larger prompt set)",
            len(prompts),
            len(points),
            per_point,
        )
    if counter is None and config.tokenizer_path:
        from modelyard.bench.datasets import LocalTokenizer

        counter = await asyncio.to_thread(LocalTokenizer.from_directory, Path(config.tokenizer_path))
    bodies = [request_body(prompt, config, detected.engine) for prompt in prompts]
    await wait_for_start(config.start_at_unix_s)
    outcome = BenchmarkOutcome(
        result=RunResult(
            config=config,
            engine=detected,
            hardware=client_hardware(config.base_url),
            run_id=uuid.uuid4().hex[:12],
            created_at=datetime.now(UTC).isoformat(),
        ),
        prompts=prompts,
    )
    for position, point in enumerate(points):
        observers = [factory() for factory in observer_factories]
        start = (position * per_point) % len(prompts)
        result, records = await run_point(
            config,
            point,
            bodies=bodies[start:] + bodies[:start],
            prompts=prompts[start:] + prompts[:start],
            api_key=api_key,
            progress=progress,
            observers=observers,
            counter=counter,
        )
        outcome.result.points.append(result)
        outcome.records.append(records)
    outcome.result.spreads = spread_of_repeats(outcome.result.points) if config.repeats > 1 else []
    invalid = [point for point in outcome.result.points if not point.valid]
    if invalid:
        outcome.result.valid = False
        outcome.result.invalid_reason = "; ".join(f"{p.point.label}: {p.invalid_reason}" for p in invalid)
    return outcome


def run_benchmark(config: RunConfig, **options: Any) -> BenchmarkOutcome:
    """Synchronous ``run_benchmark_async`` on a fresh event loop (uvloop when installed)."""
    loop_factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(run_benchmark_async(config, **options))
