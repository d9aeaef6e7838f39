"""The download settings: read from the environment once, each documented, bad values named."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.downloads import SETTINGS, DownloadOptions
from modelyard.errors import InvalidInput
from modelyard.hub.files import RemoteFile, select_files
from modelyard.hub.reference import parse_model_reference

DOCS = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def test_every_setting_is_in_the_docs() -> None:
    text = DOCS.read_text()
    missing = [setting.variable for setting in SETTINGS if f"`{setting.variable}`" not in text]
    assert missing == []


def test_settings_come_from_the_environment() -> None:
    options = DownloadOptions.from_environment(
        {
            "HF_ENDPOINT": "https://hf-mirror.example/",
            "MODELYARD_DOWNLOAD_STALL_TIMEOUT_SECONDS": "15",
            "MODELYARD_DOWNLOAD_PARALLEL_FILES": "8",
            "MODELYARD_DOWNLOAD_HEADROOM_FRACTION": "0.1",
        }
    )
    assert options.hf_endpoint == "https://hf-mirror.example"
    assert options.transfer.stall_timeout_seconds == 15.0
    assert options.parallel_files == 8
    assert options.headroom.fraction == 0.1


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("MODELYARD_DOWNLOAD_STALL_TIMEOUT_SECONDS", "soon", "is not a number"),
        ("MODELYARD_DOWNLOAD_PARALLEL_FILES", "0", "must be above 0"),
        ("MODELYARD_DOWNLOAD_HEADROOM_FRACTION", "1.5", "must be between 0 and 1"),
        ("HF_ENDPOINT", "hf-mirror.com", "is not a URL"),
        ("MODELYARD_MODELS_ROOT", "models", "is not an absolute path"),
    ],
)
def test_a_bad_setting_names_its_variable(variable: str, value: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=f"{variable}=.*{message}"):
        DownloadOptions.from_environment({variable: value})


def test_references_say_what_to_write() -> None:
    reference = parse_model_reference("hf://Qwen/Qwen3-8B@main")
    assert (reference.hub, reference.repo_id, reference.revision) == ("huggingface", "Qwen/Qwen3-8B", "main")
    assert parse_model_reference("ms://Qwen/Qwen3-8B").revision is None
    with pytest.raises(InvalidInput) as bare:
        parse_model_reference("Qwen/Qwen3-8B")
    assert bare.value.hint is not None and "hf://Qwen/Qwen3-8B" in bare.value.hint
    with pytest.raises(InvalidInput) as address:
        parse_model_reference("https://huggingface.co/Qwen/Qwen3-8B")
    assert address.value.hint == "write it as hf://Qwen/Qwen3-8B"
    with pytest.raises(InvalidInput, match="is not a repository id"):
        parse_model_reference("hf://Qwen/../etc")


def test_patterns_and_quantisation_choose_the_files() -> None:
    files = [
        RemoteFile("config.json", 10),
        RemoteFile("model-00001-of-00002.safetensors", 100),
        RemoteFile("gguf/Qwen3-8B-Q4_K_M.gguf", 50),
        RemoteFile("gguf/Qwen3-8B-Q8_0.gguf", 90),
        RemoteFile("README.md", 5),
    ]

    def paths(chosen: list[RemoteFile]) -> list[str]:
        return [file.path for file in chosen]

    assert paths(select_files(files, include=["*.safetensors", "*.json"])) == [
        "config.json",
        "model-00001-of-00002.safetensors",
    ]
    assert "gguf/Qwen3-8B-Q8_0.gguf" not in paths(select_files(files, exclude=["*.gguf"]))
    assert paths(select_files(files, quantization="q4_k_m")) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "gguf/Qwen3-8B-Q4_K_M.gguf",
        "README.md",
    ]
    with pytest.raises(InvalidInput) as unknown:
        select_files(files, quantization="Q2_K")
    assert unknown.value.hint == "it has: Q4_K_M, Q8_0"
