"""Which names carry secrets, how they are masked, and sealing at rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.errors import InvalidInput
from modelyard.secret_names import MASK, is_secret_env_name, is_secret_flag, mask_arguments
from modelyard.store.secret_box import SecretBox, is_sealed


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "my_key"],
)
def test_secret_environment_names(name: str) -> None:
    assert is_secret_env_name(name)


@pytest.mark.parametrize(
    "name", ["TOKENIZERS_PARALLELISM", "VLLM_LOGGING_LEVEL", "CUDA_VISIBLE_DEVICES", "KEYS_X"]
)
def test_ordinary_environment_names(name: str) -> None:
    assert not is_secret_env_name(name)


@pytest.mark.parametrize(
    "flag", ["--api-key", "--hf-token", "--ssl-keyfile-password", "--api-key=x", "--admin-api-key"]
)
def test_secret_flags(flag: str) -> None:
    assert is_secret_flag(flag)


@pytest.mark.parametrize(
    "flag", ["--tokenizer", "--max-num-batched-tokens", "--ssl-keyfile", "--kv-cache-dtype", "key"]
)
def test_ordinary_flags(flag: str) -> None:
    assert not is_secret_flag(flag)


def test_the_values_of_secret_flags_are_masked_and_nothing_else() -> None:
    arguments = ["serve", "/m", "--api-key", "sk-1", "--port", "8000", "--hf-token=hf_2", "--api-key", "--x"]
    assert mask_arguments(arguments) == [
        "serve",
        "/m",
        "--api-key",
        MASK,
        "--port",
        "8000",
        f"--hf-token={MASK}",
        "--api-key",
        "--x",
    ]


def test_a_sealed_value_opens_with_its_key_only(tmp_path: Path) -> None:
    box = SecretBox.for_data_dir(tmp_path / "a")
    sealed = box.seal("hf_secret")
    assert is_sealed(sealed) and "hf_secret" not in sealed
    assert box.reveal(sealed) == "hf_secret"
    assert SecretBox.for_data_dir(tmp_path / "a").reveal(sealed) == "hf_secret"  # the key file is kept
    assert (tmp_path / "a" / "secret-key").stat().st_mode & 0o777 == 0o600
    with pytest.raises(InvalidInput, match="another data directory's secret-key"):
        SecretBox.for_data_dir(tmp_path / "b").reveal(sealed)


def test_arguments_are_revealed_whole_and_after_an_equals_sign(tmp_path: Path) -> None:
    box = SecretBox.for_data_dir(tmp_path)
    stored = ["--api-key", box.seal("sk-1"), f"--hf-token={box.seal('hf_2')}", "--port", "8000"]
    assert box.reveal_arguments(stored) == ["--api-key", "sk-1", "--hf-token=hf_2", "--port", "8000"]
