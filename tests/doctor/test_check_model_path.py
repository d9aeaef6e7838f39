"""A Hugging Face cache repository folder given as the model path (model.hub-cache-repo-folder),
and the engine's refusal of a path it took for a hub id (log.model-not-found)."""

from __future__ import annotations

from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.doctor.hub_paths import hub_cache_repository
from modelyard.doctor.log_signatures import diagnose_log

FOLDER = "/srv/hf/hub/models--mistralai--Mistral-7B-Instruct-v0.3"


def test_the_repository_folder_is_refused_with_the_snapshot_and_the_repo_id_named() -> None:
    (finding,) = of_id(
        plan_findings("", engine="sglang", model_argument=FOLDER), "model.hub-cache-repo-folder"
    )
    assert finding.severity is Severity.ERROR
    assert f"{FOLDER}/snapshots/<revision>" in finding.fix
    assert "mistralai/Mistral-7B-Instruct-v0.3" in finding.fix and "HF_HOME=/srv/hf" in finding.fix


def test_snapshots_hub_ids_and_other_folders_are_fine() -> None:
    for argument in (
        f"{FOLDER}/snapshots/e0bc86c23ce5aae1db576c8cca6f06f1f73af2db",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "/models/Mistral-7B-Instruct-v0.3",
        "models--mistralai--Mistral-7B-Instruct-v0.3",  # no path: a (bad) hub id, not a folder
    ):
        assert of_id(plan_findings("", model_argument=argument), "model.hub-cache-repo-folder") == []


def test_repo_ids_are_read_back_from_the_folder_name() -> None:
    assert hub_cache_repository("./models--gpt2/") == "gpt2"
    assert hub_cache_repository("/cache/hub/models--Qwen--Qwen3-30B-A3B") == "Qwen/Qwen3-30B-A3B"
    assert hub_cache_repository("/cache/hub/datasets--org--name") is None


def test_the_log_says_which_path_was_taken_for_a_hub_id() -> None:
    refused = (
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '{}'. Use `repo_type` argument if needed."
    )
    (cache,) = [
        f
        for f in diagnose_log(refused.format(FOLDER), engine="sglang")
        if f.check_id == "log.model-not-found"
    ]
    assert "snapshots/<revision>" in cache.fix
    (missing,) = [
        f
        for f in diagnose_log(refused.format("/models/"), engine="vllm")
        if f.check_id == "log.model-not-found"
    ]
    assert "where the engine runs" in missing.fix
    # A malformed hub id (not a path) is the hub's refusal of a name, not a missing directory.
    assert not diagnose_log(refused.format("org/name/extra"), engine="vllm")
