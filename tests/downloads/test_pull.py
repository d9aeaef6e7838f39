"""`modelyard models pull` against a real server with its download manager, and the hub doubles."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from modelyard.testing.hub_doubles import HuggingFaceHubDouble, ModelScopeDouble, RepositoryDouble

from .conftest import FAST_TRANSFER, REPO_ID, SHARD_1, SHARD_2, StartServer

SOURCE = f"hf://{REPO_ID}"


def test_pull_then_deploy(
    start_server: StartServer, database_url: str, hf_hub: HuggingFaceHubDouble, repository: RepositoryDouble
) -> None:
    server = start_server(database_url=database_url)
    result = server.cli("models", "pull", SOURCE)
    assert result.exit_code == 0, result.output
    assert f"pull task 1: {SOURCE} at {repository.commit[:12]}" in result.stderr
    assert "pull task 1 completed" in result.stderr and "files checked by SHA-256, " in result.stderr
    assert "deploy it with: modelyard deploy tiny-qwen3" in result.stdout
    model = server.api("GET", "/models/tiny-qwen3").json()
    assert model["state"] == "valid", model
    assert (model["source"], model["repo_id"], model["revision"]) == (
        "huggingface",
        REPO_ID,
        repository.commit,
    )
    assert model["files"]["verified"] and model["files"]["problems"] == []
    assert model["architecture"] == "Qwen3ForCausalLM"
    manifest = {entry["path"]: entry["sha256"] for entry in model["details"]["manifest"]["files"]}
    assert manifest == {path: served.sha256 for path, served in repository.files.items()}
    deployed = server.api("POST", "/deployments", json={"model": "tiny-qwen3", "backend": "transformers"})
    assert deployed.status_code == 201, deployed.text


def test_a_model_still_downloading_cannot_be_deployed_and_show_names_its_files(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble
) -> None:
    # A stall timeout longer than the test: the cancel must not wait for it.
    server = start_server(transfer=replace(FAST_TRANSFER, stall_timeout_seconds=60))
    hold = hf_hub.faults.hold_after(SHARD_2, 20_000)
    queued = server.cli("models", "pull", SOURCE, "--no-wait", "--json")
    assert queued.exit_code == 0, queued.output
    task_id = json.loads(queued.stdout)["id"]
    assert hold.reached.wait(10)
    refused = server.api("POST", "/deployments", json={"model": "tiny-qwen3"})
    assert refused.status_code == 400
    assert "still downloading" in refused.json()["error"]["message"]
    shown = server.cli("models", "show", "tiny-qwen3")
    assert "downloading" in shown.stdout and SHARD_2 in shown.stdout
    cancelled = server.cli("tasks", "cancel", str(task_id))
    assert cancelled.exit_code == 0, cancelled.output
    hold.release()
    task = server.wait_for_task(task_id)
    assert task["state"] == "cancelled"
    model = server.api("GET", "/models/tiny-qwen3").json()
    assert model["state"] == "incomplete"
    assert any(f"modelyard tasks resume {task_id}" in reason for reason in model["reasons"])
    refused = server.api("POST", "/deployments", json={"model": "tiny-qwen3"})
    assert refused.status_code == 400 and "incomplete" in refused.json()["error"]["message"]
    resumed = server.cli("tasks", "resume", str(task_id))
    assert resumed.exit_code == 0, resumed.output
    assert server.api("GET", "/models/tiny-qwen3").json()["state"] == "valid"
    # The resume asked for the rest of the shard, not the whole of it.
    ranges = [request.range for request in hf_hub.log.for_file(SHARD_2)]
    assert ranges[0] is None and ranges[-1] is not None and ranges[-1].startswith("bytes=")


def test_a_persistent_mismatch_fails_the_task_naming_the_file(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble
) -> None:
    server = start_server()
    hf_hub.faults.corrupt(SHARD_1, times=None)
    result = server.cli("models", "pull", SOURCE)
    assert result.exit_code == 1
    assert f"failed {SHARD_1}: SHA-256" in result.stderr
    assert f"error: pull task 1 failed: {SHARD_1}: SHA-256" in result.stderr
    task = server.api("GET", "/tasks/1").json()
    shard = next(entry for entry in task["files"] if entry["path"] == SHARD_1)
    assert (shard["state"], shard["restarts"]) == ("failed", 1)
    assert "after 2 downloads" in shard["error"]
    model = server.api("GET", "/models/tiny-qwen3").json()
    assert model["state"] == "incomplete"
    problems = {problem["path"]: problem for problem in model["files"]["problems"]}
    assert problems[SHARD_1]["problem"] == "failed"
    refused = server.api("POST", "/deployments", json={"model": "tiny-qwen3"})
    assert refused.status_code == 400 and SHARD_1 in refused.json()["error"]["message"]


def test_a_full_disk_is_refused_before_the_first_byte(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble
) -> None:
    server = start_server(disk_space=lambda path: 5 * 10**6)  # 5 MB free: less than 1 GiB of headroom
    result = server.cli("models", "pull", SOURCE)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: not enough disk space for")
    assert "headroom" in lines[0] and "5.0 MB free" in lines[0]
    assert hf_hub.log.downloads() == []
    assert server.api("GET", "/models").json() == []
    assert server.api("GET", "/tasks").json() == []


def test_patterns_and_dry_run_show_the_plan_without_storing(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble
) -> None:
    server = start_server()
    result = server.cli("models", "pull", SOURCE, "--dry-run", "--exclude", "*.md", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert "README.md" in plan["skipped"] and SHARD_1 in [file["path"] for file in plan["files"]]
    assert plan["free_bytes"] > plan["needed_bytes"] == plan["total_bytes"]
    assert server.api("GET", "/tasks").json() == [] and hf_hub.log.downloads() == []
    nothing = server.cli("models", "pull", SOURCE, "--include", "*.gguf")
    assert nothing.exit_code == 1 and "leave no file to download" in nothing.stderr
    quantized = server.cli("models", "pull", SOURCE, "--quantization", "Q4_K_M")
    assert quantized.exit_code == 1 and "no file of quantisation 'Q4_K_M'" in quantized.stderr


def test_pull_from_modelscope(
    start_server: StartServer, modelscope_hub: ModelScopeDouble, tmp_path: Path
) -> None:
    server = start_server()
    target = tmp_path / "models" / "from-modelscope"
    result = server.cli("models", "pull", f"ms://{REPO_ID}", "--name", "tiny-ms", "--to", str(target))
    assert result.exit_code == 0, result.output
    model = server.api("GET", "/models/tiny-ms").json()
    assert model["state"] == "valid" and model["path"] == str(target)
    assert {request.file for request in modelscope_hub.log.downloads()} >= {SHARD_1, SHARD_2}


def test_a_shard_lost_after_the_pull_blocks_the_deploy_and_show_names_it(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble
) -> None:
    server = start_server()
    assert server.cli("models", "pull", SOURCE).exit_code == 0
    model = server.api("GET", "/models/tiny-qwen3").json()
    shard = Path(model["path"]) / SHARD_1
    with shard.open("r+b") as handle:
        handle.truncate(1000)
    shown = server.cli("models", "show", "tiny-qwen3")
    assert f"wrong-size {SHARD_1}: 1000 bytes, expected" in shown.stdout
    assert "1 missing or damaged" in shown.stdout
    refused = server.api("POST", "/deployments", json={"model": "tiny-qwen3"})
    assert refused.status_code == 400
    assert f"{SHARD_1} (1000 bytes, expected" in refused.json()["error"]["message"]


def test_a_server_told_to_stay_offline_refuses_to_pull(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    server = start_server()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = server.cli("models", "pull", SOURCE)
    assert result.exit_code == 1
    assert "HF_HUB_OFFLINE is set in the server's environment" in result.stderr
    assert "modelyard models export / import" in result.stderr
    assert hf_hub.log.requests == []
