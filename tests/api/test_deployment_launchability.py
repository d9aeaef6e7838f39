"""What the kernel would refuse to launch is refused when the deployment is created, naming it,
and nothing is stored; the verification can be asked for again only where an engine runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from modelyard.store.tables import Deployment, Instance

from .conftest import ApiHarness, add_model, assert_error


@pytest.fixture
def with_model(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    add_model(api, tiny_model_dir)
    return api


def _stored(api: ApiHarness) -> list[str]:
    with api.database.session() as session:
        return list(session.scalars(select(Deployment.name)))


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HF_TOKEN": "abc\x00def"}, "env value of HF_TOKEN contains a NUL byte"),
        ({"NOTE": "a\x1b[31mred"}, "env value of NOTE contains the control character U+001B"),
        (["HF_TOKEN=abc\x00def"], "NUL"),
    ],
)
def test_control_characters_in_env_values_are_refused(
    with_model: ApiHarness, env: dict[str, str] | list[str], expected: str
) -> None:
    response = with_model.client.post("/api/v1/deployments", json={"model": "tiny", "env": env})
    assert response.status_code == 400, response.text
    assert_error(response.json(), "invalid_input", expected)
    assert _stored(with_model) == []


def test_a_nul_byte_in_a_parameter_is_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend_parameters": ["--max-new-tokens", "8\x00"]}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "NUL byte")
    assert _stored(with_model) == []


def test_parameters_over_the_kernels_argument_list_limit_are_refused_with_both_sizes(
    with_model: ApiHarness,
) -> None:
    # Each parameter passes the door's bound; together they pass what execve accepts (ARG_MAX).
    parameters = [f"--chat-template={index}" + "x" * 60_000 for index in range(40)]
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend_parameters": parameters}
    )
    assert response.status_code == 400, response.text
    body = response.json()
    assert_error(body, "invalid_input", "arguments and environment are", "over the kernel's limit")
    assert "files" in body["error"]["hint"]
    assert _stored(with_model) == []


def test_a_tab_and_a_line_break_in_a_value_are_fine(with_model: ApiHarness) -> None:
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "env": {"NOTE": "line one\n\tline two"}}
    )
    assert response.status_code == 201, response.text


def test_verification_again_needs_an_engine_and_marks_the_instances_that_have_one(
    with_model: ApiHarness,
) -> None:
    api = with_model
    assert api.client.post("/api/v1/deployments", json={"model": "tiny", "name": "chat"}).status_code == 201
    refused = api.client.post("/api/v1/deployments/chat/verify")
    assert refused.status_code == 409
    assert_error(refused.json(), "conflict", "no engine to verify")
    with api.database.session() as session:
        deployment = session.scalar(select(Deployment).where(Deployment.name == "chat"))
        assert deployment is not None
        session.add(
            Instance(
                deployment_id=deployment.id,
                replica_index=0,
                state="error",
                reason="verification failed",
                handle={"runtime": "process", "id": "1:1.0", "label": "pid 1"},
            )
        )
        session.commit()
    pokes = api.controller.pokes
    accepted = api.client.post("/api/v1/deployments/chat/verify")
    assert accepted.status_code == 202, accepted.text
    assert api.controller.pokes == pokes + 1
    with api.database.session() as session:
        [instance] = session.scalars(select(Instance))
        assert instance.verification_requested_at is not None
