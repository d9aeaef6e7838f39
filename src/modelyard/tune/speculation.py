"""Speculative decoding as an axis of a tune: the method, the tokens proposed per step, and the
draft (a model or an EAGLE head) when there is one, written in each engine's own flags.

    ngram = Speculation("ngram", 4)
    ngram.arguments("vllm")     # ['--speculative-config \'{"method": "ngram", ...}\'']
    ngram.arguments("sglang")   # ['--speculative-algorithm NGRAM', '--speculative-num-draft-tokens 4']
    parse_speculation("off,ngram:4,eagle3:3", draft_model="/models/qwen3-8b-eagle3", target=target)

The methods and their flags (vLLM 0.25's ``--speculative-config`` JSON; SGLang 0.5's
``--speculative-*`` flags, K steps of one token each: ``--speculative-num-steps K
--speculative-eagle-topk 1 --speculative-num-draft-tokens K+1``; docs/tune.md#speculative-decoding):

    method   vLLM --speculative-config                        SGLang --speculative-algorithm
    ngram    {"method": "ngram", "num_speculative_tokens": K,  NGRAM --speculative-num-draft-tokens K
              "prompt_lookup_max": 4}
    draft    {"model": PATH, "num_speculative_tokens": K}      STANDALONE + draft path + K steps
    eagle    {"method": "eagle", "model": PATH, ...: K}        EAGLE + draft path + K steps
    eagle3   {"method": "eagle3", "model": PATH, ...: K}       EAGLE3 + draft path + K steps
    mtp      {"method": "mtp", "num_speculative_tokens": K}    NEXTN + K steps (SGLang runs it as
                                                               EAGLE over the model's own MTP layers)

ngram needs nothing more; draft, eagle and eagle3 need ``--draft-model`` of their kind
(``draft_models.py``: checked on this host); mtp needs the model's multi-token-prediction layers,
which the doctor checks (``param.mtp-without-layers``) before anything starts. ``auto`` is what
the model and the draft allow: off, ngram, mtp where the model has MTP layers, and the draft's
own method where ``--draft-model`` is given. The estimator counts a draft's weights and KV cache,
and the MTP layers' KV (``estimate/speculative.py``), so a draft that does not fit is dropped.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from modelyard.errors import InvalidInput
from modelyard.tune.draft_models import DRAFT_METHODS, TargetModel, check_draft_method, read_draft_model

SpeculationMethod = Literal["ngram", "draft", "eagle", "eagle3", "mtp"]
METHODS: tuple[SpeculationMethod, ...] = ("ngram", "draft", "eagle", "eagle3", "mtp")
DEFAULT_TOKENS: dict[str, int] = {"ngram": 4, "draft": 4, "eagle": 3, "eagle3": 3, "mtp": 2}
SGLANG_ALGORITHMS = {"draft": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN"}
MAXIMUM_TOKENS = 16
NGRAM_LOOKUP_MAX = 4
OFF_WORDS = ("off", "default", "none")
AUTO_WORD = "auto"


@dataclass(frozen=True)
class Speculation:
    """One way to decode speculatively (see the module docstring)."""

    method: SpeculationMethod
    tokens: int
    """Tokens proposed per step (vLLM ``num_speculative_tokens``)."""
    draft_model: str | None = None
    """The draft's directory (``draft``, ``eagle``, ``eagle3`` only)."""

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
        if (self.method in DRAFT_METHODS) != (self.draft_model is not None):
            raise InvalidInput(
                f"a draft model goes with the {', '.join(DRAFT_METHODS)} methods only",
                hint="--speculative eagle3:3 --draft-model /models/my-eagle3-head",
            )

    @property
    def label(self) -> str:
        """``ngram:4``, ``draft:4``, ``eagle3:3``, ``mtp:2``."""
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
        if self.method in ("eagle", "eagle3"):
            return {"method": self.method, "model": self.draft_model, "num_speculative_tokens": self.tokens}
        return {"method": "mtp", "num_speculative_tokens": self.tokens}

    def arguments(self, family: str) -> list[str]:
        """The backend parameters, one flag with its value per item, in ``family``'s spelling."""
        if family == "vllm":
            return [f"--speculative-config {shlex.quote(json.dumps(self.vllm_config()))}"]
        if self.method == "ngram":
            return ["--speculative-algorithm NGRAM", f"--speculative-num-draft-tokens {self.tokens}"]
        items = [f"--speculative-algorithm {SGLANG_ALGORITHMS[self.method]}"]
        if self.draft_model is not None:
            items.append(f"--speculative-draft-model-path {shlex.quote(self.draft_model)}")
        items += [
            f"--speculative-num-steps {self.tokens}",
            "--speculative-eagle-topk 1",
            f"--speculative-num-draft-tokens {self.tokens + 1}",
        ]
        return items


def _auto(draft_model: str | None, target: TargetModel) -> list[str]:
    """What ``auto`` stands for with this model and draft."""
    parts = ["off", "ngram"]
    if target.mtp_layers:
        parts.append("mtp")
    if draft_model is not None:
        parts.append(read_draft_model(draft_model, target).method)
    return parts


def parse_speculation(
    text: str,
    *,
    draft_model: str | None = None,
    target: TargetModel | None = None,
) -> tuple[Speculation | None, ...]:
    """``--speculative off,ngram:4,eagle3:3,mtp``: ``off`` (or ``default``) is no speculation;
    ``METHOD[:TOKENS]`` one method, with its default token count when TOKENS is left out; ``auto``
    what the model and the draft allow (module docstring)."""
    target = target or TargetModel()
    values: list[Speculation | None] = []
    draft = None
    parts = [piece.strip() for piece in text.split(",") if piece.strip()]
    if any(part.lower() == AUTO_WORD for part in parts):
        parts = [
            p for part in parts for p in (_auto(draft_model, target) if part.lower() == AUTO_WORD else [part])
        ]
    for part in parts:
        if part.lower() in OFF_WORDS:
            values.append(None)
            continue
        method, _, count = part.partition(":")
        method = method.strip().lower()
        if method not in METHODS:
            raise InvalidInput(
                f"--speculative value {part!r} is not off, auto or one of {', '.join(METHODS)} "
                "(METHOD[:TOKENS])",
                hint="--speculative off,ngram:4",
            )
        if count and not count.strip().isdigit():
            raise InvalidInput(
                f"--speculative value {part!r}: {count!r} is not a token count",
                hint="--speculative ngram:4",
            )
        tokens = int(count) if count else DEFAULT_TOKENS[method]
        path = None
        if method in DRAFT_METHODS:
            if draft_model is None:
                raise InvalidInput(
                    f"--speculative {part} needs --draft-model, the directory of its draft",
                    hint=f"--speculative off,{part} --draft-model "
                    + ("/models/qwen3-0.6b" if method == "draft" else f"/models/my-{method}-head"),
                )
            draft = draft or read_draft_model(draft_model, target)
            check_draft_method(method, draft, target)
            path = draft.path
        values.append(Speculation(method, tokens, path))  # type: ignore[arg-type]
    if not values:
        raise InvalidInput("--speculative is empty", hint="--speculative off,ngram:4")
    if draft_model is not None and draft is None:
        raise InvalidInput(
            "--draft-model is given but --speculative lists no method that uses it",
            hint="--speculative off,auto (the draft's own method), or off,draft:4 / eagle:3 / eagle3:3",
        )
    return tuple(dict.fromkeys(values))
