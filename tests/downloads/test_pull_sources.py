"""Malformed pull sources are refused at once, from the API and the CLI, with what is wrong and
what a valid one looks like; nothing is stored and the hub is never asked."""

from __future__ import annotations

import pytest

from modelyard.hub.huggingface import HuggingFaceSource
from modelyard.hub.identifiers import InvalidModelReference
from modelyard.hub.reference import ModelReference
from modelyard.testing.hub_doubles import HuggingFaceHubDouble

from .conftest import StartServer

# What a user may type, and a part of the message that must say what is wrong.
MALFORMED = [
    ("hf://Qwen/a..b", "'..'"),
    ("hf://Qwen/a--b", "'--'"),
    ("hf://Qwen/-Qwen3", "starts with '-'"),
    ("hf://Qwen/Qwen3.", "ends with '.'"),
    ("hf://Qwen/Qwen3.git", "'.git'"),
    (f"hf://Qwen/{'a' * 97}", "97 characters"),
    ("hf://Qwen/Qwen 3", "' '"),
    ("hf://Qwen/Qwén3", "'é'"),
    ("hf://Qwen//Qwen3", "empty"),
    ("hf://Qwen/", "empty"),
    ("hf://Qwen3-8B", "ORG/NAME"),
    ("hf://Qwen/Qwen3-8B/tree/main", "hf://Qwen/Qwen3-8B@main"),
    ("hf://Qwen/Qwen3-8B@release 1", "' '"),
    ("hf://Qwen/Qwen3-8B@a..b", "'..'"),
    ("hf://Qwen/Qwen3-8B@", "empty"),
    ("ms://Qwen/a..b", "'..'"),
    ("ms://Qwen/Qwen3-8B@v1.0.lock", "'.lock'"),
    ("hf://https://huggingface.co/Qwen/Qwen3-8B", "hf://Qwen/Qwen3-8B"),
    ("https://modelscope.cn/models/Qwen/Qwen3-8B", "ms://Qwen/Qwen3-8B"),
]


@pytest.mark.parametrize(("source", "problem"), MALFORMED)
def test_the_api_refuses_a_malformed_source_with_400_saying_what_is_wrong(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble, source: str, problem: str
) -> None:
    server = start_server()
    for dry_run in (False, True):
        answer = server.api("POST", "/models/pull", json={"source": source, "dry_run": dry_run})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "invalid_model_reference"
        assert problem in error["message"] + " " + (error["hint"] or ""), error
        # What a valid one looks like.
        assert "/" in (error["hint"] or ""), error
    assert server.api("GET", "/models").json() == []
    assert server.api("GET", "/tasks").json() == []
    assert hf_hub.log.requests == []


def test_the_cli_refuses_a_malformed_source_in_one_line(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble
) -> None:
    server = start_server()
    result = server.cli("models", "pull", "hf://Qwen/a..b")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: 'Qwen/a..b' in 'hf://Qwen/a..b' is not a repository id: ")
    assert "'..'" in lines[0] and "Qwen/Qwen3-8B" in lines[0]
    assert server.api("GET", "/models").json() == [] and hf_hub.log.requests == []


def test_an_id_only_the_hub_library_refuses_is_an_input_error_not_a_crash(
    hf_hub: HuggingFaceHubDouble,
) -> None:
    # Built around parse_model_reference, as a stored task from an older release could be.
    reference = ModelReference("huggingface", "Qwen/a..b")
    with pytest.raises(InvalidModelReference, match=r"huggingface_hub refused hf://Qwen/a\.\.b"):
        HuggingFaceSource(endpoint=hf_hub.endpoint).list_files(reference)
    assert hf_hub.log.requests == []
