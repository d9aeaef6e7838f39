"""A key may name in ``allowed_deployments`` only deployments of its own project: one naming
another project's is refused when it is made (400, naming the deployment and the key's project),
and nothing is stored. Before, it was stored and refused only at each call through the gateway.

Over real HTTP against a real ``modelyard serve``; the two deployments are rows written into its
database (stopped, no replicas: no engine is needed to name one).
"""

from __future__ import annotations

import pytest

from modelyard.services.roles import Role
from modelyard.store.database import Database
from modelyard.store.tables import Deployment, ModelFile, Project
from teams.conftest import MEMBER_PROJECT, TeamServer

OWN = "research-chat"
FOREIGN = "ops-chat"


@pytest.fixture(scope="module")
def deployments(team_server: TeamServer) -> TeamServer:
    """``research-chat`` in the member's project, ``ops-chat`` in ``default``."""
    database = Database.open(f"sqlite:///{team_server.server.data_dir / 'modelyard.db'}", migrate=False)
    try:
        with database.session() as session:
            projects = {project.name: project.id for project in session.query(Project)}
            for name, project in ((OWN, MEMBER_PROJECT), (FOREIGN, "default")):
                model_file = ModelFile(name=f"{name}-model", path=f"/models/{name}")
                session.add(model_file)
                session.flush()
                session.add(
                    Deployment(
                        name=name,
                        model_file_id=model_file.id,
                        backend="vllm",
                        backend_version="0.25.0",
                        replicas=0,
                        desired_state="stopped",
                        project_id=projects[project],
                    )
                )
            session.commit()
    finally:
        database.close()
    return team_server


def _key_names(team_server: TeamServer) -> set[str]:
    with team_server.client(Role.ADMIN) as admin:
        listed = admin.get("/api/v1/keys")
    assert listed.status_code == 200, listed.text
    return {str(key["name"]) for key in listed.json()}


def _audited_creates(team_server: TeamServer, name: str) -> list[object]:
    with team_server.client(Role.ADMIN) as admin:
        answer = admin.get("/api/v1/audit", params={"object_type": "key", "object_name": name})
    assert answer.status_code == 200, answer.text
    events: list[object] = answer.json()["events"]
    return events


def test_a_member_cannot_make_a_key_for_another_projects_deployment(deployments: TeamServer) -> None:
    with deployments.client(Role.MEMBER) as member:
        refused = member.post("/api/v1/keys", json={"name": "mia-ops", "allowed_deployments": [FOREIGN]})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["message"] == (
        f"allowed_deployments names '{FOREIGN}', not a deployment of project '{MEMBER_PROJECT}' "
        "(the key's project): a key may use only its own project's deployments"
    )
    # The hint lists the key's project's deployments, never another project's.
    assert error["hint"].startswith(f"project '{MEMBER_PROJECT}' has: {OWN};")
    assert "mia-ops" not in _key_names(deployments)
    assert _audited_creates(deployments, "mia-ops") == []


def test_a_member_gets_the_same_answer_for_no_deployment_and_another_projects(
    deployments: TeamServer,
) -> None:
    """A member cannot tell another project's deployment from none at all."""
    with deployments.client(Role.MEMBER) as member:
        unknown = member.post("/api/v1/keys", json={"name": "mia-typo", "allowed_deployments": ["nowhere"]})
    assert unknown.status_code == 400, unknown.text
    assert unknown.json()["error"]["message"].startswith(
        f"allowed_deployments names 'nowhere', not a deployment of project '{MEMBER_PROJECT}'"
    )


def test_a_key_naming_its_own_projects_deployment_is_made(deployments: TeamServer) -> None:
    with deployments.client(Role.MEMBER) as member:
        made = member.post("/api/v1/keys", json={"name": "mia-own", "allowed_deployments": [OWN]})
    assert made.status_code == 201, made.text
    assert (made.json()["project"], made.json()["allowed_deployments"]) == (MEMBER_PROJECT, [OWN])


def test_an_admin_is_refused_too_and_told_the_keys_project(deployments: TeamServer) -> None:
    with deployments.client(Role.ADMIN) as admin:
        mixed = admin.post(
            "/api/v1/keys",
            json={"name": "lab-both", "project": MEMBER_PROJECT, "allowed_deployments": [OWN, FOREIGN]},
        )
        in_default = admin.post("/api/v1/keys", json={"name": "ops-only", "allowed_deployments": [FOREIGN]})
    assert mixed.status_code == 400, mixed.text
    # An admin sees every project, so is told where the deployment is.
    assert mixed.json()["error"]["message"] == (
        f"allowed_deployments names '{FOREIGN}', not a deployment of project '{MEMBER_PROJECT}' "
        f"(the key's project): a key may use only its own project's deployments ('{FOREIGN}' is in "
        "project 'default')"
    )
    assert "lab-both" not in _key_names(deployments)
    assert in_default.status_code == 201, in_default.text
    assert in_default.json()["project"] == "default"


def test_an_admin_naming_no_deployment_at_all_gets_a_404(deployments: TeamServer) -> None:
    with deployments.client(Role.ADMIN) as admin:
        unknown = admin.post(
            "/api/v1/keys",
            json={"name": "lab-typo", "project": MEMBER_PROJECT, "allowed_deployments": ["ghost"]},
        )
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["error"]["message"] == "no deployment named 'ghost'"
    assert "lab-typo" not in _key_names(deployments)
