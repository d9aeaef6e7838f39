"""A tune never launches a speculating candidate whose draft model does not fit beside the
model: the estimator counts the draft's weights and KV cache, and the pruning drops it."""

from __future__ import annotations

from pathlib import Path

from modelyard.estimate import parse_gpu_specs
from modelyard.modeldir import read_model_facts
from modelyard.testing.stand_ins import build_stand_in
from modelyard.tune.pruning import prune
from modelyard.tune.space import EngineChoice, SearchSpace, generate_candidates
from modelyard.tune.speculation import Speculation


def test_a_draft_that_does_not_fit_beside_the_model_is_dropped_by_the_estimate(tmp_path: Path) -> None:
    target = build_stand_in("qwen3-8b", tmp_path / "Qwen3-8B")
    # A draft as large as the model: 16 GiB of weights that a 24 GiB GPU cannot hold twice.
    draft = build_stand_in("qwen3-8b", tmp_path / "draft")
    space = SearchSpace(
        engines=(EngineChoice("vllm", "vllm", "0.25.0"),),
        max_sequences=(None,),
        batched_tokens=(None,),
        speculation=(None, Speculation("ngram", 4), Speculation("draft", 4, str(draft))),
        extra_arguments=("--max-model-len 4096",),
    )
    outcome = prune(generate_candidates(space), read_model_facts(target), parse_gpu_specs("1x24GB"))

    assert sorted(candidate.label for candidate in outcome.kept) == [
        "vllm 0.25.0 tp1 defaults",
        "vllm 0.25.0 tp1 spec=ngram:4",
    ]
    [dropped] = outcome.dropped
    assert dropped.candidate.label == "vllm 0.25.0 tp1 spec=draft:4"
    assert dropped.stage == "estimate"
    assert all(check_id.startswith("memory.") for check_id in dropped.check_ids)
