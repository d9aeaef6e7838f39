"""The draft of a speculating candidate (``--draft-model``), read from its ``config.json`` on this
host and checked against the model before anything starts: which kind of draft it is, and
whether the method asked for can use it.

- an **EAGLE-3 head** (``architectures`` naming ``Eagle3``, e.g. ``LlamaForCausalLMEagle3``, or a
  ``speculators_model_type`` of ``eagle3``): ``--speculative eagle3``;
- an **EAGLE head** (``architectures`` naming ``Eagle``, e.g. SGLang's ``LlamaForCausalLMEagle``):
  ``--speculative eagle``;
- otherwise a **model** of its own (a small model of the family): ``--speculative draft``. An
  EAGLE-1 head in plain Llama form looks like this too; ``eagle`` takes it when its hidden size is
  the model's.

An EAGLE head reads the model's hidden states, so its ``hidden_size`` must be the model's; every
draft proposes the model's tokens, so its ``vocab_size`` must be the model's.

    target = TargetModel.of(read_model_facts(model_dir))
    draft = read_draft_model("/models/qwen3-8b-eagle3", target)
    draft.method                      # 'eagle3'
    check_draft_method("draft", draft, target)   # InvalidInput: it is an EAGLE-3 head ...
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from modelyard.doctor.parameters.model_family import mtp_layer_count
from modelyard.errors import InvalidInput, NotFound
from modelyard.modeldir import ModelFacts
from modelyard.modeldir.tokenizer_files import read_json_file

DraftKind = Literal["eagle3", "eagle", "model"]
DRAFT_METHODS = ("draft", "eagle", "eagle3")
_METHOD_OF_KIND: dict[str, str] = {"eagle3": "eagle3", "eagle": "eagle", "model": "draft"}
_KIND_WORDS: dict[str, str] = {"eagle3": "an EAGLE-3 head", "eagle": "an EAGLE head", "model": "a model"}
_WANTED: dict[str, str] = {
    "draft": "a model of its own",
    "eagle": "an EAGLE head",
    "eagle3": "an EAGLE-3 head",
}


@dataclass(frozen=True)
class TargetModel:
    """What a draft is checked against (None: not known, e.g. no config.json on this host)."""

    vocabulary_size: int | None = None
    hidden_size: int | None = None
    mtp_layers: int | None = None

    @classmethod
    def of(cls, facts: ModelFacts | None) -> TargetModel:
        if facts is None:
            return cls()
        vocabulary = facts.text_config.get("vocab_size")
        hidden = facts.text_config.get("hidden_size")
        return cls(
            vocabulary if isinstance(vocabulary, int) else None,
            hidden if isinstance(hidden, int) else None,
            mtp_layer_count(facts),
        )


@dataclass(frozen=True)
class DraftModel:
    path: str
    """The absolute directory, as the engine is given it."""
    kind: DraftKind
    architecture: str | None = None
    hidden_size: int | None = None
    vocabulary_size: int | None = None

    @property
    def method(self) -> str:
        """The ``--speculative`` method this draft is for (``auto`` picks it)."""
        return _METHOD_OF_KIND[self.kind]

    @property
    def described(self) -> str:
        what = _KIND_WORDS[self.kind]
        return f"{what} ({self.architecture})" if self.architecture else what


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def _kind(config: dict[str, Any]) -> tuple[DraftKind, str | None]:
    architectures = config.get("architectures")
    names = (
        [name for name in architectures if isinstance(name, str)] if isinstance(architectures, list) else []
    )
    words = [name.lower() for name in names] + [str(config.get("speculators_model_type", "")).lower()]
    architecture = names[0] if names else None
    if any("eagle3" in word for word in words):
        return "eagle3", architecture
    if any("eagle" in word for word in words):
        return "eagle", architecture
    return "model", architecture


def read_draft_model(path_text: str, target: TargetModel) -> DraftModel:
    """The draft at ``path_text`` once it is seen to be a model directory whose vocabulary is the
    target's; a clear error otherwise."""
    path = Path(path_text).expanduser()
    config_file = path / "config.json"
    if not config_file.is_file():
        raise NotFound(
            f"--draft-model {path_text!r} is not a model directory on this host (no config.json there)",
            hint="give the directory of a small model of the same family (--speculative draft) or of an "
            "EAGLE head trained for this model (--speculative eagle3); ngram speculation needs no draft "
            "(--speculative ngram:4)",
        )
    read = read_json_file(config_file)
    if read.content is None:
        raise InvalidInput(f"--draft-model {path_text!r}: {read.problem}")
    config = read.content
    text = _text_config(config)
    vocabulary, hidden = text.get("vocab_size"), text.get("hidden_size")
    if (
        target.vocabulary_size is not None
        and isinstance(vocabulary, int)
        and vocabulary != target.vocabulary_size
    ):
        raise InvalidInput(
            f"--draft-model {path_text!r} has a vocabulary of {vocabulary:,} tokens, the model "
            f"{target.vocabulary_size:,}: a draft must propose the target's tokens",
            hint="pick a draft of the same family and tokenizer (e.g. a smaller Qwen3 for a Qwen3)",
        )
    kind, architecture = _kind(config)
    return DraftModel(
        str(path.resolve()),
        kind,
        architecture,
        hidden if isinstance(hidden, int) else None,
        vocabulary if isinstance(vocabulary, int) else None,
    )


def check_draft_method(method: str, draft: DraftModel, target: TargetModel) -> None:
    """``InvalidInput`` when ``method`` (``draft``, ``eagle``, ``eagle3``) cannot use ``draft``."""
    where = f"--draft-model {draft.path}"
    if draft.kind != "model" and method != draft.method:
        raise InvalidInput(
            f"--speculative {method} cannot use {where}: it is {draft.described}, not {_WANTED[method]}",
            hint=f"--speculative {draft.method} (or `auto`, which picks the draft's own method)",
        )
    if method in ("eagle", "eagle3") and (
        draft.hidden_size is not None
        and target.hidden_size is not None
        and draft.hidden_size != target.hidden_size
    ):
        raise InvalidInput(
            f"--speculative {method} cannot use {where}: an EAGLE head reads the model's hidden states, "
            f"so its hidden_size ({draft.hidden_size:,}) must be the model's ({target.hidden_size:,})",
            hint="give the EAGLE head trained for this model; a smaller model of the family is "
            "--speculative draft",
        )
