"""Speculative decoding as an axis of a tune: the method, the tokens proposed per step, and the
draft model when there is one, written in each engine's own flags.

    ngram = Speculation("ngram", 4)
    ngram.arguments("vllm")     # ['--speculative-config \'{"method": "ngram", ...}\'']
    ngram.arguments("sglang")   # ['--speculative-algorithm NGRAM', '--speculative-num-draft-tokens 4']
    parse_speculation("off,ngram:4,draft:3", draft_model="/models/qwen3-0.6b")

The methods and their flags (vLLM 0.25's ``--speculative-config`` JSON; SGLang 0.5's
``--speculative-*`` flags; docs/tune.md#speculative-decoding):

    method   vLLM --speculative-config                      SGLang
    ngram    {"method": "ngram", "num_speculative_tokens": K,  --speculative-algorithm NGRAM
              "prompt_lookup_max": 4}                          --speculative-num-draft-tokens K
    draft    {"model": PATH, "num_speculative_tokens": K}      --speculative-algorithm STANDALONE
                                                               --speculative-draft-model-path PATH
                                                               --speculative-num-steps K
                                                               --speculative-eagle-topk 1
                                                               --speculative-num-draft-tokens K+1
    mtp      {"method": "mtp", "num_speculative_tokens": K}    --speculative-algorithm EAGLE (no draft
                                                               path: the model's own MTP layers)
                                                               --speculative-num-steps K ...

ngram needs nothing more; a draft model must be a model directory on this host (its
``config.json`` read, its vocabulary the target's); MTP needs the model's multi-token-prediction
layers, which the doctor checks (``param.mtp-without-layers``) before anything starts.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from modelyard.errors import InvalidInput, NotFound
from modelyard.modeldir.tokenizer_files import read_json_file

SpeculationMethod = Literal["ngram", "draft", "mtp"]
METHODS: tuple[SpeculationMethod, ...] = ("ngram", "draft", "mtp")
DEFAULT_TOKENS: dict[str, int] = {"ngram": 4, "draft": 4, "mtp": 2}
MAXIMUM_TOKENS = 16
NGRAM_LOOKUP_MAX = 4
OFF_WORDS = ("off", "default", "none")


@dataclass(frozen=True)
class Speculation:
    """One way to decode speculatively (see the module docstring)."""

    method: SpeculationMethod
    tokens: int
    """Tokens proposed per step (vLLM ``num_speculative_tokens``)."""
    draft_model: str | None = None
    """The draft model's directory (``draft`` only)."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidInput(
                f"speculative method {self.method!r} is not one of {', '.join(METHODS)}",
                hint="--speculative off,ngram:4",
            )
        if not 1 <= self.tokens <= MAXIMUM_TOKENS:
            raise InvalidInput(
                f"speculative tokens {self.tokens} are not between 1 and {MAXIMUM_TOKENS}",
                hint="--speculative ngram:4",
            )
        if (self.method == "draft") != (self.draft_model is not None):
            raise InvalidInput(
                "a draft model goes with the draft method only",
                hint="--speculative draft:4 --draft-model /models/small-draft",
            )

    @property
    def label(self) -> str:
        """``ngram:4``, ``draft:4``, ``mtp:2``."""
        return f"{self.method}:{self.tokens}"

    def vllm_config(self) -> dict[str, Any]:
        if self.method == "ngram":
            return {
                "method": "ngram",
                "num_speculative_tokens": self.tokens,
                "prompt_lookup_max": NGRAM_LOOKUP_MAX,
            }
        if self.method == "draft":
            return {"model": self.draft_model, "num_speculative_tokens": self.tokens}
        return {"method": "mtp", "num_speculative_tokens": self.tokens}

    def arguments(self, family: str) -> list[str]:
        """The backend parameters, one flag with its value per item, in ``family``'s spelling."""
        if family == "vllm":
            return [f"--speculative-config {shlex.quote(json.dumps(self.vllm_config()))}"]
        if self.method == "ngram":
            return ["--speculative-algorithm NGRAM", f"--speculative-num-draft-tokens {self.tokens}"]
        items = [
            "--speculative-algorithm " + ("STANDALONE" if self.method == "draft" else "EAGLE"),
        ]
        if self.draft_model is not None:
            items.append(f"--speculative-draft-model-path {shlex.quote(self.draft_model)}")
        items += [
            f"--speculative-num-steps {self.tokens}",
            "--speculative-eagle-topk 1",
            f"--speculative-num-draft-tokens {self.tokens + 1}",
        ]
        return items


def check_draft_model(path_text: str, target_vocabulary_size: int | None) -> str:
    """The draft model's absolute directory, once it is seen to be a model whose vocabulary is the
    target's (speculation needs the same tokens); else a clear error."""
    path = Path(path_text).expanduser()
    config_file = path / "config.json"
    if not config_file.is_file():
        raise NotFound(
            f"--draft-model {path_text!r} is not a model directory on this host (no config.json there)",
            hint="give the directory of a small model of the same family, e.g. --draft-model "
            "/models/qwen3-0.6b; ngram speculation needs no draft (--speculative ngram:4)",
        )
    config = read_json_file(config_file)
    if config.content is None:
        raise InvalidInput(f"--draft-model {path_text!r}: {config.problem}")
    draft_vocabulary = config.content.get("vocab_size")
    if (
        target_vocabulary_size is not None
        and isinstance(draft_vocabulary, int)
        and draft_vocabulary != target_vocabulary_size
    ):
        raise InvalidInput(
            f"--draft-model {path_text!r} has a vocabulary of {draft_vocabulary:,} tokens, the model "
            f"{target_vocabulary_size:,}: a draft must propose the target's tokens",
            hint="pick a draft of the same family and tokenizer (e.g. a smaller Qwen3 for a Qwen3)",
        )
    return str(path.resolve())


def parse_speculation(
    text: str, *, draft_model: str | None = None, target_vocabulary_size: int | None = None
) -> tuple[Speculation | None, ...]:
    """``--speculative off,ngram:4,draft:3,mtp``: ``off`` (or ``default``) is no speculation;
    ``METHOD[:TOKENS]`` one method, with its default token count when TOKENS is left out."""
    values: list[Speculation | None] = []
    checked_draft: str | None = None
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        if part.lower() in OFF_WORDS:
            values.append(None)
            continue
        method, _, count = part.partition(":")
        method = method.strip().lower()
        if method not in METHODS:
            raise InvalidInput(
                f"--speculative value {part!r} is not off or one of {', '.join(METHODS)} (METHOD[:TOKENS])",
                hint="--speculative off,ngram:4",
            )
        if count and not count.strip().isdigit():
            raise InvalidInput(
                f"--speculative value {part!r}: {count!r} is not a token count",
                hint="--speculative ngram:4",
            )
        tokens = int(count) if count else DEFAULT_TOKENS[method]
        path = None
        if method == "draft":
            if draft_model is None:
                raise InvalidInput(
                    f"--speculative {part} needs --draft-model, the draft model's directory",
                    hint="--speculative off,draft:4 --draft-model /models/qwen3-0.6b",
                )
            checked_draft = checked_draft or check_draft_model(draft_model, target_vocabulary_size)
            path = checked_draft
        values.append(Speculation(method, tokens, path))  # type: ignore[arg-type]
    if not values:
        raise InvalidInput("--speculative is empty", hint="--speculative off,ngram:4")
    if draft_model is not None and checked_draft is None:
        raise InvalidInput(
            "--draft-model is given but --speculative lists no draft method",
            hint="--speculative off,draft:4",
        )
    return tuple(dict.fromkeys(values))
