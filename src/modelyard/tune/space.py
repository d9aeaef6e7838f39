"""The candidates of a tune: every combination of an engine (backend and version) with the
parameters that matter for speed, spelled in each engine's own flags.

Each axis is a list of values; ``None`` means "the engine's default" (the flag is not given). The
product of the axes, per engine, is the candidate list; the first candidate of each engine and
parallel layout is its defaults (every knob ``None``), so the report can say what tuning gained.

    space = SearchSpace(engines=(EngineChoice("vllm", "vllm", "0.25.0"),), tensor_parallel=(1, 2))
    for candidate in generate_candidates(space):
        print(candidate.candidate_id, candidate.arguments)
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from modelyard.errors import InvalidInput
from modelyard.tune.environment import EnvSetting, environment_for, shown_environment
from modelyard.tune.speculation import Speculation

EngineFamily = Literal["vllm", "sglang"]
MAXIMUM_CANDIDATES = 512


@dataclass(frozen=True)
class EngineFlags:
    """How one engine family spells each knob (None: the family has no such flag)."""

    tensor_parallel: str
    pipeline_parallel: str
    memory_fraction: str
    max_sequences: str
    batched_tokens: str
    kv_cache_dtype: str
    prefix_caching_on: str | None
    prefix_caching_off: str


FLAGS: dict[str, EngineFlags] = {
    "vllm": EngineFlags(
        tensor_parallel="--tensor-parallel-size",
        pipeline_parallel="--pipeline-parallel-size",
        memory_fraction="--gpu-memory-utilization",
        max_sequences="--max-num-seqs",
        batched_tokens="--max-num-batched-tokens",
        kv_cache_dtype="--kv-cache-dtype",
        prefix_caching_on="--enable-prefix-caching",
        prefix_caching_off="--no-enable-prefix-caching",
    ),
    "sglang": EngineFlags(
        tensor_parallel="--tp-size",
        pipeline_parallel="--pp-size",
        memory_fraction="--mem-fraction-static",
        max_sequences="--max-running-requests",
        batched_tokens="--chunked-prefill-size",
        kv_cache_dtype="--kv-cache-dtype",
        prefix_caching_on=None,
        prefix_caching_off="--disable-radix-cache",
    ),
}


@dataclass(frozen=True)
class EngineChoice:
    """A backend of the server (``backend``, e.g. ``vllm`` or a custom ``vllm-double``), the engine
    family whose flags it takes, and the backend version to deploy."""

    backend: str
    family: str
    version: str | None = None
    engine_version: str | None = None
    """The engine release whose flag table and defaults the doctor and the estimator use
    (default: ``version``; a custom backend's version is its own name, e.g. ``1.0``)."""

    @property
    def checked_version(self) -> str | None:
        return self.engine_version or self.version

    def __post_init__(self) -> None:
        if self.family not in FLAGS:
            raise InvalidInput(
                f"backend {self.backend!r} is of family {self.family!r}; tune knows the flags of "
                f"{', '.join(FLAGS)} only",
                hint="tune vLLM or SGLang backends (transformers serve has no such knobs)",
            )


@dataclass(frozen=True)
class SearchSpace:
    """The axes (see the module docstring); ``None`` in an axis is the engine's default."""

    engines: tuple[EngineChoice, ...]
    tensor_parallel: tuple[int, ...] = (1,)
    pipeline_parallel: tuple[int, ...] = (1,)
    memory_fraction: tuple[float | None, ...] = (None,)
    max_sequences: tuple[int | None, ...] = (None, 64, 256)
    batched_tokens: tuple[int | None, ...] = (None, 8192)
    kv_cache_dtype: tuple[str | None, ...] = (None,)
    prefix_caching: tuple[bool | None, ...] = (None,)
    speculation: tuple[Speculation | None, ...] = (None,)
    """Speculative decoding (``speculation.Speculation``); ``None`` is none."""
    extra_arguments: tuple[str, ...] = ()
    """Given to every candidate as they are (e.g. ``--max-model-len 8192``)."""
    environment: tuple[EnvSetting, ...] = ()
    """``--env``: the engines' environment (``environment.py``), not an axis."""
    engine_arguments: tuple[tuple[str, str], ...] = ()
    """``--args BACKEND:...``: (backend name or family, parameters) for that engine's candidates,
    after ``extra_arguments``."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.speculation == (None,):
            del data["speculation"]  # so the tunes made before this axis keep their ids
        if not self.engine_arguments:
            del data["engine_arguments"]  # likewise
        if self.environment:
            data["environment"] = [setting.to_json() for setting in self.environment]
        else:
            del data["environment"]  # likewise: no secret value is ever part of an id
        return data


@dataclass(frozen=True)
class Candidate:
    """One deployment to try: an engine and its knobs (``None``: the engine's default)."""

    engine: EngineChoice
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    memory_fraction: float | None = None
    max_sequences: int | None = None
    batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    prefix_caching: bool | None = None
    extra_arguments: tuple[str, ...] = field(default_factory=tuple)
    speculation: Speculation | None = None
    env: tuple[tuple[str, str], ...] = ()
    """The engine's environment (``--env``), as given; secret values are masked wherever it is
    written (``shown_env``)."""

    @property
    def shown_env(self) -> dict[str, str]:
        return shown_environment(self.env)

    @property
    def gpu_count(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def is_defaults(self) -> bool:
        """Every knob left to the engine (the baseline the gain is measured against)."""
        knobs = (self.memory_fraction, self.max_sequences, self.batched_tokens, self.kv_cache_dtype)
        return all(value is None for value in knobs) and self.prefix_caching is None and not self.speculation

    @property
    def arguments(self) -> list[str]:
        """The backend parameters, one flag (with its value) per item, in the engine's spelling."""
        flags = FLAGS[self.engine.family]
        items: list[str] = []
        if self.tensor_parallel != 1:
            items.append(f"{flags.tensor_parallel} {self.tensor_parallel}")
        if self.pipeline_parallel != 1:
            items.append(f"{flags.pipeline_parallel} {self.pipeline_parallel}")
        if self.memory_fraction is not None:
            items.append(f"{flags.memory_fraction} {self.memory_fraction:g}")
        if self.max_sequences is not None:
            items.append(f"{flags.max_sequences} {self.max_sequences}")
        if self.batched_tokens is not None:
            items.append(f"{flags.batched_tokens} {self.batched_tokens}")
        if self.kv_cache_dtype is not None:
            items.append(f"{flags.kv_cache_dtype} {self.kv_cache_dtype}")
        if self.prefix_caching is True and flags.prefix_caching_on is not None:
            items.append(flags.prefix_caching_on)
        if self.prefix_caching is False:
            items.append(flags.prefix_caching_off)
        if self.speculation is not None:
            items.extend(self.speculation.arguments(self.engine.family))
        items.extend(self.extra_arguments)
        return items

    @property
    def label(self) -> str:
        """``vllm 0.25.0 tp2 seqs=64 batched=8192`` (``defaults`` when no knob is set)."""
        version = f" {self.engine.version}" if self.engine.version else ""
        parts = [f"{self.engine.backend}{version}", f"tp{self.tensor_parallel}"]
        if self.pipeline_parallel != 1:
            parts.append(f"pp{self.pipeline_parallel}")
        named = (
            ("mem", self.memory_fraction),
            ("seqs", self.max_sequences),
            ("batched", self.batched_tokens),
            ("kv", self.kv_cache_dtype),
            ("prefix", self.prefix_caching),
            ("spec", self.speculation.label if self.speculation else None),
        )
        knobs = [
            f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
            for name, value in named
            if value is not None
        ]
        return " ".join(parts + (knobs or ["defaults"]))

    @property
    def candidate_id(self) -> str:
        """Stable across runs (the journal's key): a digest of the engine and the arguments."""
        parts: list[Any] = [asdict(self.engine), self.gpu_count, self.arguments]
        if self.env:  # left out without one, so the ids of tunes without --env stay the same
            parts.append(self.shown_env)
        key = json.dumps(parts, sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:10]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            candidate_id=self.candidate_id, label=self.label, arguments=self.arguments, env=self.shown_env
        )
        return data


def generate_candidates(space: SearchSpace) -> list[Candidate]:
    """Every candidate of ``space``, each engine's defaults first per layout, no duplicates."""
    if not space.engines:
        raise InvalidInput("no engine to tune", hint="--backends vllm,sglang")
    candidates: dict[str, Candidate] = {}
    for engine, tensor_parallel, pipeline_parallel in itertools.product(
        space.engines, space.tensor_parallel, space.pipeline_parallel
    ):
        env = environment_for(space.environment, engine)
        extra = tuple(space.extra_arguments) + tuple(
            argument for scope, argument in space.engine_arguments if scope in (engine.backend, engine.family)
        )
        base = Candidate(
            engine,
            tensor_parallel,
            pipeline_parallel,
            extra_arguments=extra,
            env=env,
        )
        candidates.setdefault(base.candidate_id, base)
        for memory, sequences, batched, kv_dtype, prefix, speculation in itertools.product(
            space.memory_fraction,
            space.max_sequences,
            space.batched_tokens,
            space.kv_cache_dtype,
            space.prefix_caching,
            space.speculation,
        ):
            if engine.family == "sglang" and prefix is True:
                continue  # SGLang's radix cache is on by default; "on" is its defaults
            candidate = Candidate(
                engine,
                tensor_parallel,
                pipeline_parallel,
                memory_fraction=memory,
                max_sequences=sequences,
                batched_tokens=batched,
                kv_cache_dtype=kv_dtype,
                prefix_caching=prefix,
                extra_arguments=extra,
                speculation=speculation,
                env=env,
            )
            candidates.setdefault(candidate.candidate_id, candidate)
    if len(candidates) > MAXIMUM_CANDIDATES:
        raise InvalidInput(
            f"the search space has {len(candidates)} candidates; at most {MAXIMUM_CANDIDATES}",
            hint="give fewer values per axis (e.g. --max-num-seqs 64,256)",
        )
    return list(candidates.values())
