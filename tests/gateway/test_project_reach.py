"""A key reaches its own project's deployments only, through the gateway over real HTTP: another
project's deployment is refused with 403 ``model_not_in_project`` naming the key's project, and
``/v1/models`` does not list it. The console's own key reaches every project's; a member's
playground key (``services/console_key.py``) those of the member's projects, following them."""

from __future__ import annotations

from pathlib import Path

import httpx

from modelyard.services.console_key import (
    console_key_file,
    ensure_console_key,
    ensure_playground_key,
    playground_key_file,
)
from modelyard.store.tables import ApiKey, Deployment, ModelFile, Project, ProjectMember, User
from modelyard.testing.http_clients import shared_tls_context

from .conftest import GatewayHarness, ReferenceServers, unique_name


def _chat(gateway: GatewayHarness, key: str, model: str) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=60,
        verify=shared_tls_context(),
    )


def _models(gateway: GatewayHarness, key: str) -> set[str]:
    headers = {"Authorization": f"Bearer {key}"}
    answer = httpx.get(
        gateway.base_url + "/v1/models", headers=headers, timeout=60, verify=shared_tls_context()
    )
    assert answer.status_code == 200, answer.text
    return {model["id"] for model in answer.json()["data"]}


def _project_with_deployment(gateway: GatewayHarness, engines: ReferenceServers) -> tuple[str, int, str]:
    """A project, and a deployment of it served by a reference engine (the double of vLLM)."""
    project_name, deployment = unique_name("team"), unique_name("reach")
    with gateway.database.session() as session:
        project = Project(name=project_name)
        model_file = ModelFile(name=deployment, path="/models/x")
        session.add_all([project, model_file])
        session.flush()
        session.add(
            Deployment(
                name=deployment,
                model_file_id=model_file.id,
                backend="vllm",
                backend_version="0.25.0",
                project_id=project.id,
            )
        )
        session.commit()
        project_id = project.id
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    return project_name, project_id, deployment


def _refusal(response: httpx.Response) -> str:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert (error["code"], error["type"], error["param"]) == (
        "model_not_in_project",
        "permission_error",
        "model",
    ), error
    return str(error["message"])


def test_a_key_of_one_project_cannot_call_another_projects_deployment(
    gateway: GatewayHarness, engines: ReferenceServers
) -> None:
    own_name, own_id, own = _project_with_deployment(gateway, engines)
    _other_name, _other_id, other = _project_with_deployment(gateway, engines)
    key_name = unique_name("key")
    key = gateway.create_key(name=key_name, project_id=own_id)
    assert _chat(gateway, key, own).status_code == 200
    message = _refusal(_chat(gateway, key, other))
    assert f"API key {key_name!r} belongs to project {own_name!r}" in message
    assert f"model {other!r} is a deployment of another project" in message
    visible = _models(gateway, key)
    assert own in visible and other not in visible


def test_the_consoles_key_reaches_every_projects_deployments(
    gateway: GatewayHarness, engines: ReferenceServers, tmp_path: Path
) -> None:
    _first_name, _first_id, first = _project_with_deployment(gateway, engines)
    _second_name, _second_id, second = _project_with_deployment(gateway, engines)
    with gateway.database.session() as session:
        key, _created = ensure_console_key(session, console_key_file(tmp_path))
    gateway.call(lambda: gateway.context.key_cache.invalidate())
    assert _chat(gateway, key, first).status_code == 200
    assert _chat(gateway, key, second).status_code == 200


def test_a_members_playground_key_reaches_their_projects_only_and_follows_them(
    gateway: GatewayHarness, engines: ReferenceServers, tmp_path: Path
) -> None:
    member_name, member_project_id, member_deployment = _project_with_deployment(gateway, engines)
    _other_name, other_project_id, other_deployment = _project_with_deployment(gateway, engines)
    with gateway.database.session() as session:
        member = User(username=unique_name("mia"), password_hash="scrypt$x", role="member")
        session.add(member)
        session.flush()
        session.add(ProjectMember(project_id=member_project_id, user_id=member.id))
        session.commit()
        member_id = member.id
        key_file = playground_key_file(tmp_path, member_id)
        key, created = ensure_playground_key(session, key_file, member_id)
        again, created_again = ensure_playground_key(session, key_file, member_id)
        record = session.query(ApiKey).filter(ApiKey.owner_id == member_id).one()
        assert (created, created_again, again) == (True, False, key)
        assert record.reach == "member_projects" and record.project_id == member_project_id
    gateway.call(lambda: gateway.context.key_cache.invalidate())
    assert _chat(gateway, key, member_deployment).status_code == 200
    message = _refusal(_chat(gateway, key, other_deployment))
    assert f"belongs to project {member_name!r}" in message
    # Added to the other project (the REST route drops the key cache the same way), they reach it.
    with gateway.database.session() as session:
        session.add(ProjectMember(project_id=other_project_id, user_id=member_id))
        session.commit()
    gateway.call(lambda: gateway.context.key_cache.invalidate())
    assert _chat(gateway, key, other_deployment).status_code == 200
    assert {member_deployment, other_deployment} <= _models(gateway, key)
