"""The prompts of a benchmark: synthetic (random, shared-prefix), ShareGPT files, the built-in
conversational set, or a saved prompts file replayed.

One entry point, ``build_prompts(spec, counter)``, returns ``list[BenchPrompt]``; the same spec and
seed give the same prompts. ``open_token_counter`` finds the tokenizer to count with: a local
directory when given, else the engine's ``/tokenize`` when it has one.

Usage::

    counter = open_token_counter(tokenizer_path=None, base_url="http://127.0.0.1:8000", model="m")
    spec = DatasetSpec(name="random", num_prompts=100, input_tokens=512, output_tokens=128, seed=0)
    prompts = build_prompts(spec, counter)
    save_prompts(prompts, Path("work.jsonl"))   # replay later with DatasetSpec(name="file", path=...)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from modelyard.bench.datasets.builtin import builtin_prompts
from modelyard.bench.datasets.output_length import engine_accepts_ignore_eos, output_length_fields
from modelyard.bench.datasets.prompts_file import load_prompts, save_prompts
from modelyard.bench.datasets.sharegpt import sharegpt_prompts
from modelyard.bench.datasets.synthetic import random_prompts, shared_prefix_prompts
from modelyard.bench.datasets.tokenizer import LocalTokenizer, RemoteTokenizer, TokenCounter
from modelyard.bench.records import BenchPrompt, EndpointKind, RunConfig
from modelyard.errors import InvalidInput

logger = logging.getLogger(__name__)

DatasetName = Literal["random", "shared-prefix", "sharegpt", "builtin", "file"]
DATASET_NAMES: tuple[str, ...] = get_args(DatasetName)

__all__ = [
    "DATASET_NAMES",
    "DatasetName",
    "DatasetSpec",
    "LocalTokenizer",
    "RemoteTokenizer",
    "TokenCounter",
    "build_prompts",
    "engine_accepts_ignore_eos",
    "load_prompts",
    "open_token_counter",
    "output_length_fields",
    "save_prompts",
]


@dataclass(frozen=True)
class DatasetSpec:
    """What to build. ``output_tokens=None`` with ShareGPT takes the recorded answers' lengths."""

    name: DatasetName = "random"
    num_prompts: int = 100
    input_tokens: int = 128
    output_tokens: int | None = 128
    seed: int = 0
    endpoint: EndpointKind = "chat"
    path: Path | None = None
    """The ShareGPT file, or the prompts file to replay."""
    input_range_ratio: float = 0.0
    num_prefixes: int = 4
    prefix_tokens: int | None = None
    """Shared-prefix: tokens of each prefix (default: three quarters of ``input_tokens``)."""
    max_input_tokens: int | None = None

    @classmethod
    def from_run_config(cls, config: RunConfig, num_prompts: int) -> DatasetSpec:
        name = "file" if config.prompts_file else config.dataset
        if name not in DATASET_NAMES:
            raise InvalidInput(f"unknown dataset {name!r}; choose one of {', '.join(DATASET_NAMES)}")
        path = config.prompts_file or config.dataset_path
        return cls(
            name=name,  # type: ignore[arg-type]
            num_prompts=num_prompts,
            input_tokens=config.input_tokens,
            output_tokens=config.output_tokens,
            seed=config.seed,
            endpoint=config.endpoint,
            path=Path(path) if path else None,
        )


def build_prompts(spec: DatasetSpec, counter: TokenCounter | None) -> list[BenchPrompt]:
    """The prompts of ``spec``. Synthetic sets need a counter (exact lengths are the point)."""
    if spec.name == "file":
        if spec.path is None:
            raise InvalidInput("replaying prompts needs the prompts file path")
        prompts = load_prompts(spec.path)
        return prompts[: spec.num_prompts] if spec.num_prompts < len(prompts) else prompts
    if spec.name == "builtin":
        return builtin_prompts(
            num_prompts=spec.num_prompts,
            output_tokens=spec.output_tokens or 128,
            seed=spec.seed,
            counter=counter,
            endpoint=spec.endpoint,
        )
    if spec.name == "sharegpt":
        if spec.path is None:
            raise InvalidInput("the sharegpt dataset needs a file", hint="pass --dataset-path FILE.json")
        return sharegpt_prompts(
            spec.path,
            num_prompts=spec.num_prompts,
            seed=spec.seed,
            output_tokens=spec.output_tokens,
            counter=counter,
            endpoint=spec.endpoint,
            max_input_tokens=spec.max_input_tokens,
        )
    if counter is None:
        raise InvalidInput(
            f"the {spec.name} dataset builds prompts of exact token lengths and needs the model's tokenizer",
            hint="pass --tokenizer MODEL_DIR, or benchmark an engine with /tokenize (vLLM)",
        )
    output_tokens = spec.output_tokens or 128
    if spec.name == "random":
        return random_prompts(
            counter,
            num_prompts=spec.num_prompts,
            input_tokens=spec.input_tokens,
            output_tokens=output_tokens,
            seed=spec.seed,
            endpoint=spec.endpoint,
            input_range_ratio=spec.input_range_ratio,
        )
    prefix_tokens = (
        spec.prefix_tokens if spec.prefix_tokens is not None else max(1, spec.input_tokens * 3 // 4)
    )
    suffix_tokens = max(1, spec.input_tokens - prefix_tokens)
    num_prefixes = max(1, min(spec.num_prefixes, spec.num_prompts))
    suffixes_per_prefix = -(-spec.num_prompts // num_prefixes)
    prompts = shared_prefix_prompts(
        counter,
        num_prefixes=num_prefixes,
        suffixes_per_prefix=suffixes_per_prefix,
        prefix_tokens=prefix_tokens,
        suffix_tokens=suffix_tokens,
        output_tokens=output_tokens,
        seed=spec.seed,
        endpoint=spec.endpoint,
    )
    return prompts[: spec.num_prompts]


def open_token_counter(
    *, tokenizer_path: str | Path | None, base_url: str | None, model: str | None, api_key: str | None = None
) -> TokenCounter | None:
    """A local tokenizer when a path is given; else the engine's ``/tokenize`` when it answers;
    else None (datasets that need exact lengths will say so)."""
    if tokenizer_path:
        return LocalTokenizer.from_directory(Path(tokenizer_path))
    if base_url and model:
        remote = RemoteTokenizer(base_url, model=model, api_key=api_key)
        if remote.available():
            return remote
        remote.close()
        logger.info("no /tokenize at %s; prompts will not be counted", base_url)
    return None
