"""The seven failures of the Qwen3.6 deployment guides, each caught by its owner's check, and the
official Qwen3.6 commands, which must raise no error.

Stories live in ``fixtures/stories/*.yaml`` (flags, env, model, log). ``owner`` says which checks
catch the story: ``param`` (``modelyard.doctor.parameters``, run here through the preflight the
server calls), ``model`` (model directory checks), ``host`` (host checks) and ``log`` (log
diagnosis after start).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from param_fixtures import STORIES, gpu, make_model_dir, model_facts

from modelyard.backends.catalog import load_builtin_backends
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters import check_parameters
from modelyard.doctor.preflight import preflight_deployment

STORY_FILES = sorted(STORIES.glob("0*.yaml"))
OFFICIAL = yaml.safe_load((STORIES / "official-commands.yaml").read_text())
# The official commands target the releases the built-in catalog ships (older ones lack their parsers).
CATALOG_VERSIONS = {
    spec.family: sorted(spec.versions)
    for spec in load_builtin_backends()
    if spec.family in {"vllm", "sglang"}
}


def _load(path: Path) -> dict[str, Any]:
    story: dict[str, Any] = yaml.safe_load(path.read_text())
    return story


def _findings_for(story: dict[str, Any], tmp_path: Path) -> list[Finding]:
    owner = story["owner"]
    if owner == "param":
        return preflight_deployment(
            deployment_name=story["deployment_name"],
            model_dir=make_model_dir(tmp_path, story["model"]),
            engine=story["engine"],
            version=story["version"],
            backend_parameters=story["backend_parameters"],
            env=story["env"],
            gpus=[gpu(index) for index in range(story["gpus"])],
        )
    if owner == "model":
        from modelyard.doctor.model_directory import check_model_directory

        return check_model_directory(
            make_model_dir(tmp_path, story["model"], eos_token_ids=story["eos_token_ids"])
        )
    if owner == "host":
        from modelyard.doctor.host import HostCheckRequest, check_docker
        from modelyard.doctor.host_sources import DockerInfo

        request = HostCheckRequest(
            backend_family=story["engine"],
            backend_version=story["version"],
            runs_in_container=True,
            volume_mounts=story["volume_mounts"],
            model_path=Path(story["model_path"]),
        )
        return check_docker(request, DockerInfo(available=True, runtimes=("nvidia", "runc")))
    if owner == "log":
        from modelyard.doctor.log_signatures import diagnose_log

        text = (STORIES / story["log_fixture"]).read_text()
        return diagnose_log(text, exit_code=story["exit_code"], engine=story["engine"])
    raise AssertionError(f"unknown owner {owner!r}")


def test_there_are_seven_stories() -> None:
    assert len(STORY_FILES) == 7


@pytest.mark.parametrize("path", STORY_FILES, ids=[path.stem for path in STORY_FILES])
def test_story_is_caught_by_its_owner(path: Path, tmp_path: Path) -> None:
    story = _load(path)
    findings = _findings_for(story, tmp_path)
    for expected in story["expect"]:
        matching = [finding for finding in findings if finding.check_id == expected["check_id"]]
        assert matching, f"{story['id']}: no {expected['check_id']} in {[f.check_id for f in findings]}"
        finding = matching[0]
        assert finding.severity is Severity(expected["severity"])
        assert expected.get("fix_contains", "") in finding.fix
        assert expected.get("message_contains", "") in finding.message


@pytest.mark.parametrize(
    ("command", "version"),
    [(command, version) for command in OFFICIAL for version in CATALOG_VERSIONS[command["engine"]]],
    ids=lambda value: value if isinstance(value, str) else value["engine"],
)
def test_official_qwen36_command_raises_no_error(
    command: dict[str, Any], version: str, tmp_path: Path
) -> None:
    findings = check_parameters(
        engine=command["engine"],
        version=version,
        backend_parameters=command["backend_parameters"],
        env={},
        deployment_name="qwen36",
        model=model_facts(tmp_path),
        gpus=[gpu(index) for index in range(command["gpus"])],
    )
    errors = [
        f"{finding.check_id}: {finding.message}" for finding in findings if finding.severity is Severity.ERROR
    ]
    assert errors == [], command["source"]
    warnings = [finding.check_id for finding in findings if finding.severity is Severity.WARNING]
    assert warnings == [], command["source"]
