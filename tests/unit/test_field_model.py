"""The field model computes its trained core's function: same logits, same greedy answers, no stray tokens.

One core is trained (about a minute, step-capped) with the small local TEST tokenizer and expanded
into a small shape on CPU; the real Qwen3 tokenizer and the 1.7B shape are exercised by hand (see
the module docstring of ``modelyard.testing.field_model``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from modelyard.testing.field_core import (  # noqa: E402
    SMALL_SHAPE,
    FieldModelError,
    load_field_core,
    train_field_core,
)
from modelyard.testing.field_model import FIELD_MODEL_NAME, expand_field_model, main  # noqa: E402
from modelyard.testing.trained_tiny_model import TOOL_CALL_TEXT, training_examples  # noqa: E402

# SMALL_SHAPE (hidden 512: the norm ratio 512/128 = 4 is exact in bf16), with a vocabulary that
# fits the 582-token test tokenizer instead of Qwen3's 151936.
TEST_SHAPE = {**SMALL_SHAPE, "vocab_size": 1024}


@pytest.fixture(scope="module")
def tokenizer_dir(field_core_dir: Path) -> Path:
    """The small local TEST tokenizer (``write_test_tokenizer``) the core was trained with."""
    return field_core_dir / "tokenizer"


@pytest.fixture(scope="module")
def core_dir(field_core_dir: Path) -> Path:
    """``train_field_core(tokenizer_dir, path, max_steps=150)``, built once (``tests/model_cache.py``)."""
    return field_core_dir / "core"


@pytest.fixture(scope="module")
def model_dir(core_dir: Path, tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("field-model")
    # About 27 MB of bf16 weights: 8 MB shards exercise the sharded layout of real checkpoints.
    expand_field_model(core_dir, tokenizer_dir, path, shape=TEST_SHAPE, max_shard_bytes=8_000_000)
    return path


@pytest.fixture(scope="module")
def models(core_dir: Path, model_dir: Path) -> tuple[Any, Any, list[int]]:
    """(core, big model, used token ids), both computing in float32."""
    core, used, _ = load_field_core(core_dir)
    big = transformers.Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return core, big, used


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(model_dir)


def _logits(core: Any, big: Any, used: list[int], ids: list[int]) -> tuple[Any, Any]:
    compact = {token: index for index, token in enumerate(used)}
    with torch.no_grad():
        core_logits = core(input_ids=torch.tensor([[compact[token] for token in ids]])).logits[0]
        big_logits = big(input_ids=torch.tensor([ids])).logits[0]
    return core_logits, big_logits


def test_expanded_model_matches_core_logits_on_every_training_conversation(
    models: tuple[Any, Any, list[int]], tokenizer: Any
) -> None:
    core, big, used = models
    for prompt, answer in training_examples(tokenizer):
        ids = tokenizer(prompt + answer, add_special_tokens=False)["input_ids"]
        core_logits, big_logits = _logits(core, big, used, ids)
        assert (big_logits[:, used] - core_logits).abs().max() < 0.05, prompt
        assert big_logits.argmax(-1).tolist() == [used[index] for index in core_logits.argmax(-1).tolist()]


def test_greedy_decoding_reproduces_the_trained_answers(
    models: tuple[Any, Any, list[int]], tokenizer: Any
) -> None:
    _, big, _ = models
    # The first user message in its four forms: thinking on/off, with and without the weather tool.
    for prompt, answer in training_examples(tokenizer)[:4]:
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        wanted = tokenizer(answer, add_special_tokens=False)["input_ids"]
        output = big.generate(ids, max_new_tokens=len(wanted) + 4, do_sample=False)
        assert tokenizer.decode(output[0, ids.shape[1] :]) == answer
    assert TOOL_CALL_TEXT in training_examples(tokenizer)[1][1]


def test_tokens_the_core_never_saw_score_far_below_the_best(
    models: tuple[Any, Any, list[int]], tokenizer: Any
) -> None:
    core, big, used = models
    unused = torch.ones(int(TEST_SHAPE["vocab_size"]), dtype=torch.bool)
    unused[used] = False
    for prompt, answer in training_examples(tokenizer):
        _, big_logits = _logits(
            core, big, used, tokenizer(prompt + answer, add_special_tokens=False)["input_ids"]
        )
        gap = big_logits.max(-1).values - big_logits[:, unused].max(-1).values
        assert float(gap.min()) > 30.0


def test_model_directory_is_a_sharded_qwen3_checkpoint_marked_as_a_test_model(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["_name_or_path"] == FIELD_MODEL_NAME and "FIELD TEST MODEL" in config["modelyard_note"]
    assert config["tie_word_embeddings"] is False and config["torch_dtype"] == "bfloat16"
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (512, 4, 128)
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert len(generation["eos_token_id"]) == 2 and generation["top_k"] == 20
    index = json.loads((model_dir / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and all((model_dir / shard).is_file() for shard in shards)
    assert "lm_head.weight" in index["weight_map"]
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (model_dir / name).is_file()
    assert "FIELD TEST MODEL" in (model_dir / "README.md").read_text()


def test_expand_without_a_core_names_the_path_and_the_train_command(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-core"
    with pytest.raises(FieldModelError, match=r"no-core does not exist: train one first .*field_model train"):
        expand_field_model(missing, tokenizer_dir, tmp_path / "out")


def test_a_tokenizer_directory_without_files_names_them_and_the_fetch_script(
    core_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(
        FieldModelError, match=r"lacks tokenizer.json, tokenizer_config.json.*fetch-qwen3-tokenizer"
    ):
        expand_field_model(core_dir, tmp_path, tmp_path / "out")
    with pytest.raises(FieldModelError, match=r"lacks tokenizer\.json"):
        train_field_core(tmp_path, tmp_path / "core")


def test_expand_refuses_a_tokenizer_other_than_the_cores(
    core_dir: Path, tokenizer_dir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-tokenizer"
    shutil.copytree(tokenizer_dir, other)
    (other / "tokenizer.json").write_text((tokenizer_dir / "tokenizer.json").read_text() + "\n")
    with pytest.raises(FieldModelError, match=r"is not the tokenizer the core .* was trained with"):
        expand_field_model(core_dir, other, tmp_path / "out")


def test_expand_refuses_a_shape_the_core_cannot_be_planted_in(
    core_dir: Path, tokenizer_dir: Path, tmp_path: Path
) -> None:
    shape = {**TEST_SHAPE, "head_dim": 64, "num_key_value_heads": 8}
    with pytest.raises(FieldModelError, match=r"head_dim=64 must equal the core's 128.*whole number >= 2"):
        expand_field_model(core_dir, tokenizer_dir, tmp_path / "out", shape=shape)


def test_cli_reports_an_error_in_one_line_with_exit_code_1(
    tokenizer_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "expand",
            "--core",
            str(tmp_path / "no-core"),
            "--tokenizer",
            str(tokenizer_dir),
            "--out",
            str(tmp_path),
        ]
    )
    error = capsys.readouterr().err
    assert code == 1 and error.startswith("error: ") and error.count("\n") == 1
