"""Datasets: exact input lengths as the engine counts them, reproducible by seed, replayable.

The tokenizer is a tiny byte-level BPE trained here on the built-in prompts (no hub), saved as a
model directory with a ChatML chat template; transformers loads it as the engines would.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from modelyard.bench.datasets import (
    DatasetSpec,
    LocalTokenizer,
    RemoteTokenizer,
    build_prompts,
    load_prompts,
    open_token_counter,
    output_length_fields,
    save_prompts,
)
from modelyard.bench.datasets.builtin import builtin_conversations
from modelyard.bench.datasets.exact_length import build_exact_text
from modelyard.bench.datasets.sharegpt import sharegpt_prompts
from modelyard.bench.datasets.synthetic import random_prompts, shared_prefix_prompts
from modelyard.bench.reference import ReferenceConfig, ReferenceServer, count_prompt_tokens
from modelyard.errors import InvalidInput, NotFound

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _corpus() -> list[str]:
    return [message["content"] for entry in builtin_conversations() for message in entry["messages"]]


def write_tiny_tokenizer(directory: Path, *, split_on_spaces: bool = True) -> Path:
    """A byte-level BPE of ~1,200 tokens with a ChatML template, as a tokenizer directory."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split_on_spaces)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus() * 3, trainer)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>"}
    config["chat_template"] = CHATML
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def counter(tokenizer_dir: Path) -> LocalTokenizer:
    return LocalTokenizer.from_directory(tokenizer_dir)


@pytest.fixture(scope="module")
def hf_tokenizer(tokenizer_dir: Path) -> object:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)


def test_random_chat_prompts_have_the_exact_length_the_chat_template_gives(
    counter: LocalTokenizer, hf_tokenizer: object
) -> None:
    prompts = random_prompts(counter, num_prompts=20, input_tokens=200, output_tokens=32, seed=3)
    for prompt in prompts:
        assert prompt.messages is not None
        ids = hf_tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            prompt.messages, tokenize=True, add_generation_prompt=True, return_dict=False
        )
        assert len(ids) == 200
        assert prompt.requested_input_tokens == prompt.achieved_input_tokens == 200
        assert prompt.max_output_tokens == 32


def test_random_completion_prompts_count_special_tokens_as_the_engine_does(
    counter: LocalTokenizer, hf_tokenizer: object
) -> None:
    prompts = random_prompts(
        counter, num_prompts=10, input_tokens=64, output_tokens=8, endpoint="completions"
    )
    for prompt in prompts:
        assert prompt.prompt_text is not None and prompt.messages is None
        assert len(hf_tokenizer.encode(prompt.prompt_text, add_special_tokens=True)) == 64  # type: ignore[attr-defined]


def test_same_seed_gives_the_same_prompts_and_another_seed_others(counter: LocalTokenizer) -> None:
    first = random_prompts(counter, num_prompts=5, input_tokens=50, output_tokens=8, seed=7)
    again = random_prompts(counter, num_prompts=5, input_tokens=50, output_tokens=8, seed=7)
    other = random_prompts(counter, num_prompts=5, input_tokens=50, output_tokens=8, seed=8)
    assert [p.text() for p in first] == [p.text() for p in again]
    assert [p.text() for p in first] != [p.text() for p in other]
    assert len({p.text() for p in first}) == 5


def test_input_range_ratio_draws_lengths_in_the_range_and_each_is_exact(counter: LocalTokenizer) -> None:
    prompts = random_prompts(
        counter, num_prompts=30, input_tokens=100, output_tokens=8, input_range_ratio=0.5
    )
    lengths = [p.requested_input_tokens for p in prompts]
    assert all(length is not None and 50 <= length <= 150 for length in lengths)
    assert len(set(lengths)) > 5
    assert all(p.achieved_input_tokens == p.requested_input_tokens for p in prompts)


def test_exact_length_holds_for_a_tokenizer_that_merges_across_spaces(tmp_path: Path) -> None:
    merging = LocalTokenizer.from_directory(write_tiny_tokenizer(tmp_path, split_on_spaces=False))
    prompts = random_prompts(merging, num_prompts=15, input_tokens=120, output_tokens=8, seed=1)
    assert [p.achieved_input_tokens for p in prompts] == [120] * 15


def test_a_length_below_the_chat_template_is_refused_with_the_minimum(counter: LocalTokenizer) -> None:
    with pytest.raises(InvalidInput, match="fixed part"):
        random_prompts(counter, num_prompts=1, input_tokens=2, output_tokens=8)


def test_build_exact_text_reports_what_it_reached_when_no_word_lands_exactly() -> None:
    # A counter where every word costs two tokens: odd targets cannot be reached.
    result = build_exact_text(lambda body: 2 * len(body.split()), 9, [" aa", " bb"], random.Random(0))
    assert result.achieved_tokens == 8


def test_shared_prefix_prompts_reuse_each_prefix_with_distinct_suffixes(counter: LocalTokenizer) -> None:
    prompts = shared_prefix_prompts(
        counter,
        num_prefixes=3,
        suffixes_per_prefix=4,
        prefix_tokens=60,
        suffix_tokens=20,
        output_tokens=16,
        seed=2,
    )
    assert len(prompts) == 12
    groups: dict[str, list[str]] = {}
    for prompt in prompts:
        groups.setdefault(prompt.source, []).append(prompt.text())
        assert prompt.achieved_input_tokens == prompt.requested_input_tokens
    assert len(groups) == 3
    for texts in groups.values():
        assert len(texts) == 4 and len(set(texts)) == 4
        shared = texts[0]
        for text in texts[1:]:
            while not text.startswith(shared):
                shared = shared[:-1]
        assert counter.count_plain(shared) >= 58  # the prefix (a word may merge at the seam)
    assert len({p.source for p in prompts[:4]}) > 1  # interleaved, not grouped by prefix


RIVERS_ANSWER = "Rivers flow downhill to the sea and carry water"


def _write_sharegpt(path: Path, *, jsonl: bool) -> None:
    def turn(role: str, value: str) -> dict[str, str]:
        return {"from": role, "value": value}

    records = [
        {"conversations": [turn("human", "Tell me about rivers"), turn("gpt", RIVERS_ANSWER)]},
        {
            "conversations": [
                turn("system", "Be brief"),
                turn("human", "Name a colour"),
                turn("gpt", "Blue is a calm colour of the sky"),
            ]
        },
        {"conversations": [turn("gpt", "A record with no user turn")]},
        {
            "messages": [
                {"role": "user", "content": "What is a bridge"},
                {"role": "assistant", "content": "A bridge carries a road over a river or a valley"},
            ]
        },
    ]
    if jsonl:
        path.write_text("\n".join(json.dumps(record) for record in records))
    else:
        path.write_text(json.dumps(records))


@pytest.mark.parametrize("jsonl", [False, True])
def test_sharegpt_takes_the_first_user_turn_and_the_recorded_answer_length(
    tmp_path: Path, counter: LocalTokenizer, jsonl: bool
) -> None:
    path = tmp_path / ("data.jsonl" if jsonl else "data.json")
    _write_sharegpt(path, jsonl=jsonl)
    prompts = sharegpt_prompts(path, num_prompts=3, seed=0, counter=counter)
    by_text = {p.text(): p for p in prompts}
    assert set(by_text) == {"Tell me about rivers", "Name a colour", "What is a bridge"}
    rivers = by_text["Tell me about rivers"]
    assert rivers.max_output_tokens == counter.count_plain(RIVERS_ANSWER)
    expected_input = counter.count_chat([{"role": "user", "content": "Tell me about rivers"}])
    assert rivers.achieved_input_tokens == expected_input


def test_sharegpt_with_fixed_output_repeats_conversations_with_distinct_ids(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    _write_sharegpt(path, jsonl=False)
    prompts = sharegpt_prompts(path, num_prompts=7, seed=1, output_tokens=50)
    assert len(prompts) == 7
    assert len({p.prompt_id for p in prompts}) == 7
    assert {p.max_output_tokens for p in prompts} == {50}


def test_sharegpt_file_that_is_not_json_is_refused_with_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"conversations": []}\nnot json\n')
    with pytest.raises(InvalidInput, match="line 2"):
        sharegpt_prompts(path, num_prompts=1, output_tokens=8)


def test_builtin_set_ships_fifty_varied_prompts_and_repeats_beyond_them() -> None:
    conversations = builtin_conversations()
    assert len(conversations) >= 50
    lengths = sorted(len(entry["messages"][0]["content"]) for entry in conversations)
    assert lengths[0] < 60 and lengths[-1] > 500
    prompts = build_prompts(DatasetSpec(name="builtin", num_prompts=120, output_tokens=64, seed=4), None)
    assert len(prompts) == 120
    assert len({p.prompt_id for p in prompts}) == 120
    assert len({p.text() for p in prompts[:50]}) == 50


def test_saved_prompts_replay_identically(tmp_path: Path, counter: LocalTokenizer) -> None:
    prompts = build_prompts(DatasetSpec(name="random", num_prompts=6, input_tokens=40, seed=5), counter)
    path = tmp_path / "work" / "prompts.jsonl"
    save_prompts(prompts, path, description="random 40")
    replayed = build_prompts(DatasetSpec(name="file", path=path, num_prompts=100), None)
    assert replayed == prompts


def test_a_truncated_prompts_file_is_refused(tmp_path: Path, counter: LocalTokenizer) -> None:
    prompts = build_prompts(DatasetSpec(name="random", num_prompts=3, input_tokens=40), counter)
    path = tmp_path / "prompts.jsonl"
    save_prompts(prompts, path)
    path.write_text("\n".join(path.read_text().splitlines()[:-1]))
    with pytest.raises(InvalidInput, match="truncated"):
        load_prompts(path)


def test_a_file_that_is_not_a_prompts_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.jsonl"
    path.write_text('{"hello": 1}\n')
    with pytest.raises(InvalidInput, match="not a modelyard prompts file"):
        load_prompts(path)


def test_synthetic_datasets_without_a_tokenizer_say_how_to_get_one() -> None:
    with pytest.raises(InvalidInput, match="--tokenizer"):
        build_prompts(DatasetSpec(name="random"), None)


def test_a_tokenizer_directory_without_tokenizer_json_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"tokenizer\.json"):
        LocalTokenizer.from_directory(tmp_path)


def test_each_engine_gets_its_own_way_of_fixing_the_output_length() -> None:
    assert output_length_fields("vllm", 64) == {"max_tokens": 64, "ignore_eos": True}
    assert output_length_fields("SGLang", 64) == {"max_tokens": 64, "ignore_eos": True}
    # transformers serve: a per-request generation config with the stop token turned off.
    transformers = output_length_fields("transformers", 64)
    assert json.loads(transformers.pop("generation_config")) == {"eos_token_id": -1, "max_new_tokens": 64}
    assert transformers == {"max_tokens": 64}
    assert output_length_fields(None, 64) == {"max_tokens": 64}
    assert output_length_fields("vllm", 64, ignore_eos=False) == {"max_tokens": 64}
    assert output_length_fields("transformers", 64, ignore_eos=False) == {"max_tokens": 64}


@pytest.fixture(scope="module")
def vllm_double() -> Iterator[ReferenceServer]:
    """The reference server playing vLLM (its /tokenize counts one token per word)."""
    with ReferenceServer(ReferenceConfig(flavor="vllm", ttft_ms=0, itl_ms=0)) as server:
        yield server


def test_remote_tokenize_builds_exact_prompts_as_the_engine_counts_them(vllm_double: ReferenceServer) -> None:
    counter = open_token_counter(
        tokenizer_path=None, base_url=vllm_double.base_url + "/v1", model="reference-model"
    )
    assert isinstance(counter, RemoteTokenizer)
    try:
        prompts = random_prompts(counter, num_prompts=4, input_tokens=30, output_tokens=8, seed=0)
    finally:
        counter.close()
    for prompt in prompts:
        assert prompt.achieved_input_tokens == 30
        assert count_prompt_tokens(prompt.text()) == 30


def test_an_engine_without_tokenize_gives_no_counter() -> None:
    with ReferenceServer(ReferenceConfig(flavor="transformers", ttft_ms=0, itl_ms=0)) as server:
        assert (
            open_token_counter(tokenizer_path=None, base_url=server.base_url, model="reference-model") is None
        )


def test_prompts_command_saves_a_set_that_replays(tokenizer_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from modelyard.cli.main import app

    out = tmp_path / "work.jsonl"
    arguments = ["bench", "prompts", "--out", str(out), "--tokenizer", str(tokenizer_dir)]
    outcome = CliRunner().invoke(
        app, [*arguments, "--num-prompts", "8", "--input-tokens", "90", "--seed", "3"]
    )
    assert outcome.exit_code == 0, outcome.output
    assert "8 of 8 at exactly their requested input length" in outcome.output
    saved = load_prompts(out)
    rebuilt = build_prompts(
        DatasetSpec(name="random", num_prompts=8, input_tokens=90, seed=3),
        LocalTokenizer.from_directory(tokenizer_dir),
    )
    assert saved == rebuilt


# What the GPU field kit's image said: its transformers refuses the kit's newer huggingface_hub.
_BROKEN_TRANSFORMERS = (
    'raise ImportError("huggingface-hub>=0.34.0,<1.0 is required for a normal functioning of this '
    'module, but found huggingface-hub==1.2.0.")\n'
)
_FALLBACK_SCRIPT = """
import json, sys
from pathlib import Path
from modelyard.bench.datasets import LocalTokenizer
from modelyard.bench.datasets.synthetic import random_prompts

counter = LocalTokenizer.from_directory(Path(sys.argv[1]))
prompts = random_prompts(counter, num_prompts=30, input_tokens=120, output_tokens=8, seed=5)
print(json.dumps({
    "compilations": counter.template_compilations,
    "description": counter.description,
    "prompts": [p.messages for p in prompts],
    "achieved": [p.achieved_input_tokens for p in prompts],
}))
"""


def test_without_transformers_the_chat_template_is_compiled_once_and_the_fallback_is_said(
    tokenizer_dir: Path, tmp_path: Path, hf_tokenizer: object
) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "transformers").mkdir(parents=True)
    (shadow / "transformers" / "__init__.py").write_text(_BROKEN_TRANSFORMERS)
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.run(
        [sys.executable, "-c", _FALLBACK_SCRIPT, str(tokenizer_dir)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout)
    assert seen["compilations"] == 1  # for 30 prompts, each counted many times while it is built
    said = [line for line in child.stderr.splitlines() if "fallback: tokenizers + the chat template" in line]
    assert len(said) == 1 and "transformers cannot be imported (huggingface-hub>=0.34.0" in said[0]
    assert "(fallback:" in seen["description"]
    # And the fallback counts as the engine's tokenizer does.
    for messages, achieved in zip(seen["prompts"], seen["achieved"], strict=True):
        ids = hf_tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            messages, tokenize=True, add_generation_prompt=True, return_dict=False
        )
        assert len(ids) == achieved == 120


def test_the_run_says_what_counted_the_prompt_tokens(tokenizer_dir: Path) -> None:
    from modelyard.bench.records import RunConfig
    from modelyard.bench.runner import prepare_prompts

    config = RunConfig(base_url="http://127.0.0.1:9", model="m", tokenizer_path=str(tokenizer_dir))
    assert len(prepare_prompts(config, 3, api_key=None)) == 3
    assert config.prompt_tokens_counted_by == f"local tokenizer {tokenizer_dir} (transformers)"
