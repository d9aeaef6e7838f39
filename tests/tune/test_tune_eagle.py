"""EAGLE / EAGLE-3 heads and MTP as speculation candidates of ``modelyard tune``: each written in
the engine's own flags, offered only where the model and the draft allow it (``auto``), a draft
of the wrong kind refused with the method to use, kept by the doctor and the estimator of vLLM
0.25 and SGLang 0.5.17, and, against the vLLM engine double whose acceptance per method is known
(``curve_engine.py``), a tune that finds the method the curve says is fastest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelyard.errors import InvalidInput
from modelyard.estimate import parse_gpu_specs
from modelyard.modeldir import read_model_facts
from modelyard.testing.stand_ins import build_stand_in
from modelyard.tune.draft_models import TargetModel
from modelyard.tune.pruning import prune
from modelyard.tune.server_deployer import ServerDeployer
from modelyard.tune.session import TuneRequest, run_tune
from modelyard.tune.slo import parse_slos
from modelyard.tune.space import EngineChoice, SearchSpace, generate_candidates
from modelyard.tune.speculation import Speculation, parse_speculation
from modelyard.tune.tuner import TuneSettings

from .conftest import GPUS_TEXT, TunePlatform
from .curve_engine import curve, speculation_of
from .test_tune_served import ENGINE, CountingProgress
from .test_tune_speculation import LONG_ANSWERS

SMALL_MODEL = "qwen3-8b-4-layers-eagle"

QWEN3_8B = TargetModel(vocabulary_size=151936, hidden_size=4096, mtp_layers=0)
VLLM = EngineChoice("vllm", "vllm", "0.25.0")
SGLANG = EngineChoice("sglang", "sglang", "0.5.17")


def eagle3_head(folder: Path, hidden_size: int = 4096) -> Path:
    """An EAGLE-3 head's config.json as SpecForge writes them for Qwen3-8B (one layer, the
    model's hidden size and vocabulary, a smaller draft vocabulary); no weights."""
    folder.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 12288,
        "vocab_size": 151936,
        "draft_vocab_size": 32000,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def config_of(argument: str) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(argument.split(" ", 1)[1].strip("'"))
    return loaded


def test_eagle3_and_mtp_are_written_in_each_engines_own_flags() -> None:
    eagle3, mtp = Speculation("eagle3", 3, "/models/eagle3"), Speculation("mtp", 2)

    assert config_of(eagle3.arguments("vllm")[0]) == {
        "method": "eagle3",
        "model": "/models/eagle3",
        "num_speculative_tokens": 3,
    }
    assert eagle3.arguments("sglang") == [
        "--speculative-algorithm EAGLE3",
        "--speculative-draft-model-path /models/eagle3",
        "--speculative-num-steps 3",
        "--speculative-eagle-topk 1",
        "--speculative-num-draft-tokens 4",
    ]
    assert Speculation("eagle", 2, "/models/eagle").arguments("sglang")[0] == "--speculative-algorithm EAGLE"
    assert config_of(mtp.arguments("vllm")[0]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert mtp.arguments("sglang")[0] == "--speculative-algorithm NEXTN"
    assert not any("draft-model-path" in argument for argument in mtp.arguments("sglang"))


def test_auto_offers_what_the_model_and_the_draft_allow(tmp_path: Path) -> None:
    head = eagle3_head(tmp_path / "eagle3")

    assert parse_speculation("auto", target=QWEN3_8B) == (None, Speculation("ngram", 4))
    assert parse_speculation("auto", draft_model=str(head), target=QWEN3_8B) == (
        None,
        Speculation("ngram", 4),
        Speculation("eagle3", 3, str(head.resolve())),
    )
    with_mtp = TargetModel(vocabulary_size=248320, hidden_size=5120, mtp_layers=1)
    assert parse_speculation("auto", target=with_mtp) == (
        None,
        Speculation("ngram", 4),
        Speculation("mtp", 2),
    )


def test_a_draft_of_the_wrong_kind_is_refused_with_the_method_to_use(tmp_path: Path) -> None:
    head = eagle3_head(tmp_path / "eagle3")
    with pytest.raises(
        InvalidInput, match=r"it is an EAGLE-3 head \(LlamaForCausalLMEagle3\), not a model"
    ) as caught:
        parse_speculation("off,draft", draft_model=str(head), target=QWEN3_8B)
    assert caught.value.hint is not None and "--speculative eagle3" in caught.value.hint
    with pytest.raises(InvalidInput, match="not an EAGLE head"):
        parse_speculation("eagle", draft_model=str(head), target=QWEN3_8B)
    small = eagle3_head(tmp_path / "other-size", hidden_size=2048)
    with pytest.raises(InvalidInput, match=r"hidden_size \(2,048\) must be the model's \(4,096\)"):
        parse_speculation("eagle3", draft_model=str(small), target=QWEN3_8B)
    with pytest.raises(InvalidInput, match="needs --draft-model"):
        parse_speculation("off,eagle3", target=QWEN3_8B)


def test_the_doctor_and_the_estimator_keep_eagle3_and_mtp_where_the_model_allows(tmp_path: Path) -> None:
    head = eagle3_head(tmp_path / "eagle3")
    space = SearchSpace(
        engines=(VLLM, SGLANG),
        max_sequences=(None,),
        batched_tokens=(None,),
        speculation=(None, Speculation("eagle3", 3, str(head)), Speculation("mtp", 2)),
    )
    qwen3 = read_model_facts(build_stand_in("qwen3-8b", tmp_path / "Qwen3-8B"))
    outcome = prune(generate_candidates(space), qwen3, parse_gpu_specs("1xH100"))
    assert sorted(c.label for c in outcome.kept) == sorted(
        f"{engine} tp1 {knob}"
        for engine in ("vllm 0.25.0", "sglang 0.5.17")
        for knob in ("defaults", "spec=eagle3:3")
    )
    assert {drop.candidate.label for drop in outcome.dropped} == {
        "vllm 0.25.0 tp1 spec=mtp:2",
        "sglang 0.5.17 tp1 spec=mtp:2",
    }

    # Qwen3.6-27B declares an MTP layer: both engines may run it.
    qwen36 = read_model_facts(build_stand_in("qwen3.6-27b", tmp_path / "Qwen3.6-27B"))
    mtp_only = SearchSpace(
        engines=(VLLM, SGLANG),
        max_sequences=(None,),
        batched_tokens=(None,),
        speculation=(Speculation("mtp", 2),),
    )
    outcome = prune(generate_candidates(mtp_only), qwen36, parse_gpu_specs("1xH200"))
    assert "spec=mtp:2" in " ".join(c.label for c in outcome.kept), [d.reason for d in outcome.dropped]
    assert not [d for d in outcome.dropped if "mtp" in d.candidate.label]


def test_a_tune_finds_the_speculation_method_the_curve_says_is_fastest(
    tune_platform: TunePlatform, tmp_path: Path
) -> None:
    head = eagle3_head(tmp_path / "eagle3")
    model_dir = build_stand_in("qwen3-8b", tmp_path / "model", config_changes={"num_hidden_layers": 4})
    response = tune_platform.served.api(
        "POST", "/api/v1/models", json={"path": str(model_dir), "name": SMALL_MODEL}
    )
    assert response.status_code in (200, 201), response.text
    methods = (None, Speculation("ngram", 2), Speculation("eagle3", 4, str(head.resolve())))
    # What the double's curve says each one gives between tokens at tp 2 (2 ms without).
    expected_ms = {
        (method.label if method else "off"): curve(
            8, 8192, 2, *speculation_of(json.dumps(method.vllm_config()) if method else None)
        )[1]
        for method in methods
    }
    fastest = min(expected_ms, key=lambda name: expected_ms[name])
    assert fastest == "eagle3:4" and expected_ms["eagle3:4"] < expected_ms["ngram:2"] / 1.5
    space = SearchSpace(
        engines=(ENGINE,),
        tensor_parallel=(2,),
        memory_fraction=(0.9,),
        max_sequences=(8,),
        batched_tokens=(8192,),
        speculation=methods,
    )
    request = TuneRequest(
        model=SMALL_MODEL,
        model_facts=read_model_facts(model_dir),
        gpus_text=GPUS_TEXT,
        gpus=tune_platform.gpus,
        workload=LONG_ANSWERS,
        # Every method has the same TTFT (30 ms): a loose bound, so a loaded machine cannot fail
        # them all; the ranking is by throughput.
        slos=parse_slos("ttft_p95<=1s"),
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

            result = run_tune(
                request, tmp_path / "data", deployer_for=deployer_for, progress=CountingProgress()
            )
    finally:
        api.close()

    winner = "vllm-double 1.0 tp2 mem=0.9 seqs=8 batched=8192 spec=eagle3:4"
    assert result.report["winners"][0]["label"] == winner
    rows = {row["label"]: row for row in result.report["candidates"]}
    assert rows[winner]["measurements"][-1]["speculation"]["acceptance_ratio"] == pytest.approx(0.85)
    assert '"method": "eagle3"' in result.report["deploy"]["command"]
    assert tune_platform.deployments() == []
