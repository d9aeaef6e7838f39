"""Speculative decoding as an axis of ``modelyard tune``: each method in the engine's own flags,
checked by the doctor before anything starts (MTP on a model without MTP layers is dropped), a
draft model checked on this host, and, against the vLLM engine double whose speculation has a
known acceptance (``curve_engine.py``: ngram 0.5), a tune that picks the speculating candidate
and reports its acceptance rate as the engine's own counters give it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelyard.bench.server_metrics import parse_metrics_text
from modelyard.errors import InvalidInput, NotFound
from modelyard.estimate import parse_gpu_specs
from modelyard.modeldir import read_model_facts
from modelyard.testing.stand_ins import build_stand_in
from modelyard.tune.acceptance import acceptance_between
from modelyard.tune.draft_models import TargetModel
from modelyard.tune.pruning import prune
from modelyard.tune.report import acceptance_text
from modelyard.tune.server_deployer import ServerDeployer
from modelyard.tune.session import TuneRequest, run_tune
from modelyard.tune.slo import parse_slos
from modelyard.tune.space import EngineChoice, SearchSpace, generate_candidates
from modelyard.tune.speculation import Speculation, parse_speculation
from modelyard.tune.tuner import TuneSettings
from modelyard.tune.workloads import Workload

from .conftest import GPUS_TEXT, TunePlatform
from .test_tune_served import ENGINE, CountingProgress

SMALL_MODEL = "qwen3-8b-4-layers"
# 64 tokens out: decoding is most of each request (TTFT 30 ms, then 128 ms without speculation).
LONG_ANSWERS = Workload(
    "eight-streams-long-answers",
    "8 streams, 64 tokens out",
    16,
    64,
    (8.0,),
    input_spread=0.0,
    output_spread=0.0,
    source="test",
)


def test_each_method_is_written_in_each_engines_own_flags() -> None:
    ngram, draft = Speculation("ngram", 4), Speculation("draft", 3, "/models/qwen3-0.6b")

    [vllm_ngram] = ngram.arguments("vllm")
    assert vllm_ngram.startswith("--speculative-config '")
    assert json.loads(vllm_ngram.split(" ", 1)[1].strip("'")) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
    }
    assert json.loads(draft.arguments("vllm")[0].split(" ", 1)[1].strip("'")) == {
        "model": "/models/qwen3-0.6b",
        "num_speculative_tokens": 3,
    }
    assert ngram.arguments("sglang") == ["--speculative-algorithm NGRAM", "--speculative-num-draft-tokens 4"]
    assert draft.arguments("sglang") == [
        "--speculative-algorithm STANDALONE",
        "--speculative-draft-model-path /models/qwen3-0.6b",
        "--speculative-num-steps 3",
        "--speculative-eagle-topk 1",
        "--speculative-num-draft-tokens 4",
    ]


def test_the_doctor_keeps_ngram_and_a_draft_and_drops_mtp_on_a_model_without_mtp_layers(
    tune_platform: TunePlatform,
) -> None:
    space = SearchSpace(
        engines=(EngineChoice("vllm", "vllm", "0.25.0"), EngineChoice("sglang", "sglang", "0.5.9")),
        max_sequences=(None,),
        batched_tokens=(None,),
        speculation=(
            None,
            Speculation("ngram", 4),
            Speculation("draft", 4, "/models/draft"),
            Speculation("mtp", 2),
        ),
    )
    outcome = prune(generate_candidates(space), tune_platform.model_facts, parse_gpu_specs("1xH100"))

    kept = sorted(candidate.label for candidate in outcome.kept)
    assert kept == sorted(
        f"{engine} tp1 {knob}"
        for engine in ("vllm 0.25.0", "sglang 0.5.9")
        for knob in ("defaults", "spec=ngram:4", "spec=draft:4")
    )
    assert {(drop.candidate.label, drop.stage) for drop in outcome.dropped} == {
        ("vllm 0.25.0 tp1 spec=mtp:2", "doctor"),
        ("sglang 0.5.9 tp1 spec=mtp:2", "doctor"),
    }
    assert all("param.mtp-without-layers" in drop.check_ids for drop in outcome.dropped)


def test_a_draft_model_must_be_a_model_directory_here_with_the_targets_vocabulary(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="needs --draft-model"):
        parse_speculation("off,draft:4")
    with pytest.raises(NotFound, match="is not a model directory on this host"):
        parse_speculation("draft", draft_model=str(tmp_path / "nowhere"))
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"vocab_size": 32000}))
    with pytest.raises(InvalidInput, match="vocabulary of 32,000 tokens, the model 151,936"):
        parse_speculation("draft", draft_model=str(draft), target=TargetModel(vocabulary_size=151936))
    with pytest.raises(InvalidInput, match="lists no method that uses it"):
        parse_speculation("off,ngram", draft_model=str(draft))
    with pytest.raises(
        InvalidInput, match="'eagle7' is not off, auto or one of ngram, draft, eagle, eagle3, mtp"
    ):
        parse_speculation("eagle7")

    assert parse_speculation(
        "off,ngram,draft:2", draft_model=str(draft), target=TargetModel(vocabulary_size=32000)
    ) == (
        None,
        Speculation("ngram", 4),
        Speculation("draft", 2, str(draft.resolve())),
    )


def test_sglangs_acceptance_gauges_are_read_when_there_are_no_counters() -> None:
    page = (
        "# TYPE sglang:spec_accept_rate gauge\n"
        'sglang:spec_accept_rate{deployment="tune-a",model_name="m"} 0.62\n'
        'sglang:spec_accept_rate{deployment="other",model_name="m"} 0.1\n'
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{deployment="tune-a",model_name="m"} 3.5\n'
    )
    sample = parse_metrics_text(page, elapsed_s=0.0, labels={"deployment": "tune-a"})
    figures = acceptance_between(None, sample)

    assert figures is not None
    assert figures.acceptance_ratio == pytest.approx(0.62)
    assert figures.mean_acceptance_length == pytest.approx(3.5)


def test_a_tune_with_speculation_picks_it_and_reports_its_acceptance(
    tune_platform: TunePlatform, tmp_path: Path
) -> None:
    # tp2, 90 %, 8 sequences, 8192 batched tokens: the best of test_tune_served, with and without
    # ngram speculation of 4 tokens, which the double accepts half of (inter-token 2 ms -> 0.93 ms).
    # The model: Qwen3-8B's stand-in cut to 4 layers (2.6 GiB), so the host's RAM check passes on
    # a busy machine.
    model_dir = build_stand_in("qwen3-8b", tmp_path / "model", config_changes={"num_hidden_layers": 4})
    response = tune_platform.served.api(
        "POST", "/api/v1/models", json={"path": str(model_dir), "name": SMALL_MODEL}
    )
    assert response.status_code in (200, 201), response.text
    space = SearchSpace(
        engines=(ENGINE,),
        tensor_parallel=(2,),
        memory_fraction=(0.9,),
        max_sequences=(8,),
        batched_tokens=(8192,),
        speculation=(None, Speculation("ngram", 4)),
    )
    request = TuneRequest(
        model=SMALL_MODEL,
        model_facts=read_model_facts(model_dir),
        gpus_text=GPUS_TEXT,
        gpus=tune_platform.gpus,
        workload=LONG_ANSWERS,
        slos=parse_slos("ttft_p95<=150ms"),
        space=space,
        settings=TuneSettings(rungs=1, requests_per_point=16),
    )
    api = tune_platform.api()
    token_file = tune_platform.served.data_dir / "metrics-token"
    try:
        with ServerDeployer(
            api, "", SMALL_MODEL, start_timeout_s=120, metrics_token_file=token_file
        ) as deployer:

            def deployer_for(tune_id: str) -> ServerDeployer:
                deployer.tune_id = tune_id
                return deployer

            result = run_tune(request, tmp_path, deployer_for=deployer_for, progress=CountingProgress())
    finally:
        api.close()

    speculating = "vllm-double 1.0 tp2 mem=0.9 seqs=8 batched=8192 spec=ngram:4"
    assert result.report["winners"][0]["label"] == speculating
    rows = {row["label"]: row for row in result.report["candidates"]}
    figures = rows[speculating]["measurements"][-1]["speculation"]
    assert figures["acceptance_ratio"] == pytest.approx(0.5)
    assert figures["mean_acceptance_length"] == pytest.approx(3.0)
    assert acceptance_text(rows[speculating]) == "50% (3.0 tokens/step)"
    plain = "vllm-double 1.0 tp2 mem=0.9 seqs=8 batched=8192"
    assert rows[plain]["measurements"][-1]["speculation"] is None
    assert acceptance_text(rows[plain]) == "-"
    assert "50% (3.0 tokens/step)" in result.report_markdown.read_text()
    assert "--speculative-config" in result.report["deploy"]["command"]
    assert tune_platform.deployments() == []
