"""The load a tune measures: token lengths drawn from a named, documented distribution, and the
load levels (concurrencies, or request rates with their burstiness).

Built-ins (``BUILTIN_WORKLOADS``, listed in docs/tune.md): ``chat``, ``rag`` (long-context
retrieval), ``code``, ``batch``, ``reasoning`` and ``bursts``. A custom one is a YAML or JSON
file with the same fields (``load_workload``)::

    name: support-bot
    input_tokens: 900          # mean prompt length
    input_spread: 0.5          # lengths uniform in [mean x (1 - spread), mean x (1 + spread)]
    output_tokens: 300
    output_spread: 0.5
    load_kind: concurrency     # or rate (requests/s, open loop)
    loads: [8, 32]

Every candidate gets the same prompts (``write_prompts``, a bench prompts file replayed by the
bench), so their figures differ only by the deployment.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from modelyard.bench.datasets.prompts_file import save_prompts
from modelyard.bench.records import BenchPrompt
from modelyard.bench.runner import FALLBACK_WORDS
from modelyard.errors import InvalidInput, NotFound

LoadKind = Literal["concurrency", "rate"]
MAXIMUM_TOKENS = 1_000_000
MAXIMUM_LOADS = 8


@dataclass(frozen=True)
class Workload:
    """A token-length distribution and the loads to measure it at (see the module docstring)."""

    name: str
    description: str
    input_tokens: int
    output_tokens: int
    loads: tuple[float, ...]
    input_spread: float = 0.5
    output_spread: float = 0.5
    load_kind: LoadKind = "concurrency"
    burstiness: float = 1.0
    """Open loop only: the gamma shape of the arrivals (1 Poisson, below 1 burstier)."""
    source: str = "builtin"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = []
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if not 1 <= value <= MAXIMUM_TOKENS:
                problems.append(f"{name} {value} is not between 1 and {MAXIMUM_TOKENS:,}")
        for name in ("input_spread", "output_spread"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                problems.append(f"{name} {value} is not in [0, 1)")
        if self.load_kind not in ("concurrency", "rate"):
            problems.append(f"load_kind {self.load_kind!r} is not concurrency or rate")
        if not self.loads or len(self.loads) > MAXIMUM_LOADS or any(load <= 0 for load in self.loads):
            problems.append(f"loads {list(self.loads)} must be 1 to {MAXIMUM_LOADS} numbers above 0")
        if self.burstiness <= 0:
            problems.append(f"burstiness {self.burstiness} must be above 0")
        if problems:
            raise InvalidInput(
                f"workload {self.name!r} ({self.source}) is invalid: " + "; ".join(problems),
                hint="see docs/tune.md#workloads for the fields and their bounds",
            )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["loads"] = list(self.loads)
        return data


BUILTIN_WORKLOADS: dict[str, Workload] = {
    workload.name: workload
    for workload in (
        Workload("chat", "interactive chat: short prompts and answers", 256, 256, (8.0, 32.0)),
        Workload(
            "rag",
            "long-context retrieval: long prompts, short answers (prefill bound)",
            8000,
            256,
            (4.0, 16.0),
            input_spread=0.25,
        ),
        Workload("code", "code assistant: medium prompts, longer answers", 1500, 512, (8.0, 32.0)),
        Workload(
            "batch", "offline batch: throughput first, many streams", 512, 1024, (64.0, 256.0), 0.5, 0.25
        ),
        Workload(
            "reasoning",
            "long reasoning: short prompts, very long outputs (decode bound)",
            512,
            4096,
            (8.0, 32.0),
        ),
        Workload(
            "bursts",
            "chat arriving in bursts (open loop, gamma arrivals of shape 0.3)",
            256,
            256,
            (2.0, 8.0),
            load_kind="rate",
            burstiness=0.3,
        ),
    )
}

_FIELDS = {
    "name",
    "description",
    "input_tokens",
    "output_tokens",
    "loads",
    "input_spread",
    "output_spread",
    "load_kind",
    "burstiness",
}


def load_workload(text: str) -> Workload:
    """A built-in by name, or a YAML/JSON file (see the module docstring)."""
    if text in BUILTIN_WORKLOADS:
        return BUILTIN_WORKLOADS[text]
    path = Path(text)
    if not path.is_file():
        raise NotFound(
            f"--workload {text!r} is neither a built-in workload nor a file",
            hint=f"use one of {', '.join(BUILTIN_WORKLOADS)} or a YAML file (docs/tune.md#workloads)",
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise InvalidInput(f"workload file {path} is not YAML or JSON: {error}") from error
    if not isinstance(data, dict):
        raise InvalidInput(f"workload file {path} must hold a mapping of fields, got {type(data).__name__}")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise InvalidInput(
            f"workload file {path} has unknown fields: {', '.join(unknown)}",
            hint=f"the fields are {', '.join(sorted(_FIELDS))}",
        )
    missing = [name for name in ("input_tokens", "output_tokens", "loads") if name not in data]
    if missing:
        raise InvalidInput(
            f"workload file {path} lacks {', '.join(missing)}", hint="see docs/tune.md#workloads"
        )
    try:
        return Workload(
            name=str(data.get("name", path.stem)),
            description=str(data.get("description", f"from {path.name}")),
            input_tokens=int(data["input_tokens"]),
            output_tokens=int(data["output_tokens"]),
            loads=tuple(float(value) for value in data["loads"]),
            input_spread=float(data.get("input_spread", 0.5)),
            output_spread=float(data.get("output_spread", 0.5)),
            load_kind=data.get("load_kind", "concurrency"),
            burstiness=float(data.get("burstiness", 1.0)),
            source=str(path),
        )
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"workload file {path}: a field has the wrong type ({error})") from error


def _length(rng: random.Random, mean: int, spread: float) -> int:
    low, high = mean * (1.0 - spread), mean * (1.0 + spread)
    return max(1, round(rng.uniform(low, high)))


def draw_prompts(workload: Workload, count: int, *, seed: int = 0) -> list[BenchPrompt]:
    """``count`` prompts: random words, as many as the drawn input length (the engine's usage
    reports the tokens they became), each asking for its drawn output length."""
    rng = random.Random(f"{workload.name}:{seed}")
    prompts = []
    for index in range(count):
        input_tokens = _length(rng, workload.input_tokens, workload.input_spread)
        output_tokens = _length(rng, workload.output_tokens, workload.output_spread)
        text = " ".join(rng.choice(FALLBACK_WORDS) for _ in range(input_tokens))
        prompts.append(
            BenchPrompt(
                prompt_id=f"{workload.name}-{seed}-{index}",
                max_output_tokens=output_tokens,
                messages=[{"role": "user", "content": text}],
                requested_input_tokens=input_tokens,
                source=f"tune:{workload.name}",
            )
        )
    return prompts


def write_prompts(workload: Workload, count: int, path: Path, *, seed: int = 0) -> Path:
    """The bench prompts file every candidate replays (written once per tune)."""
    if not path.is_file():
        save_prompts(
            draw_prompts(workload, count, seed=seed), path, description=json.dumps(workload.to_json())
        )
    return path
