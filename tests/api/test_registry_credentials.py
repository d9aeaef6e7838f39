"""Pull policy and registry credentials of backend versions: stored, shown, validated, sealed."""

from __future__ import annotations

from sqlalchemy import select

from modelyard.store.secret_box import is_sealed
from modelyard.store.tables import RegistryCredential

from .conftest import ApiHarness, assert_error

PASSWORD = "s3cret-registry-password-4f1e"


def backend_yaml(image: str, extension: str = "") -> str:
    mapping = f"\n    modelyard: {{{extension}}}" if extension else ""
    return f"""\
backend_name: pulled-engine
default_version: "1.0"
version_configs:
  "1.0":
    image_name: {image}
    run_command: serve --port {{{{port}}}}
    custom_framework: cpu{mapping}
"""


def add_credential(
    api: ApiHarness, name: str = "lab", registry: str = "127.0.0.1:5000", **extra: object
) -> object:
    body = {"name": name, "registry": registry, "username": "ci", "password": PASSWORD, **extra}
    return api.client.post("/api/v1/registry-credentials", json=body)


def test_a_stored_credential_is_sealed_and_never_shown(api: ApiHarness) -> None:
    response = add_credential(api)
    assert response.status_code == 201, response.text  # type: ignore[attr-defined]
    listed = api.client.get("/api/v1/registry-credentials")
    assert PASSWORD not in response.text + listed.text  # type: ignore[attr-defined]
    [shown] = listed.json()
    assert (
        shown["name"] == "lab" and shown["registry"] == "127.0.0.1:5000" and shown["password"] == "********"
    )
    with api.database.session() as session:
        stored = session.scalar(select(RegistryCredential.password))
    assert stored is not None and is_sealed(stored) and PASSWORD not in stored


def test_a_second_credential_of_the_same_name_is_refused_unless_replaced(api: ApiHarness) -> None:
    add_credential(api)
    again = add_credential(api, username="other")
    assert again.status_code == 409  # type: ignore[attr-defined]
    assert_error(again.json(), "already_exists", "'lab' exists")  # type: ignore[attr-defined]
    replaced = add_credential(api, replace=True)
    assert replaced.status_code == 201  # type: ignore[attr-defined]


def test_a_registry_given_as_a_url_is_refused_with_the_host_to_give(api: ApiHarness) -> None:
    response = add_credential(api, registry="https://registry.example.com/v2/")
    assert response.status_code == 400  # type: ignore[attr-defined]
    assert_error(response.json(), "invalid_input", "'registry.example.com'")  # type: ignore[attr-defined]


def test_an_image_with_a_registry_host_defaults_to_if_missing_and_one_without_to_never(
    api: ApiHarness,
) -> None:
    api.client.post("/api/v1/backends/import", content=backend_yaml("127.0.0.1:5000/team/engine:1").encode())
    [version] = api.client.get("/api/v1/backends/pulled-engine").json()["versions"]
    assert version["pull_policy"] is None and version["effective_pull_policy"] == "if-missing"
    api.client.post("/api/v1/backends/import", content=backend_yaml("engine:1").encode())
    [version] = api.client.get("/api/v1/backends/pulled-engine").json()["versions"]
    assert version["effective_pull_policy"] == "never"


def test_a_version_keeps_its_pull_policy_and_credential_through_export(api: ApiHarness) -> None:
    add_credential(api)
    yaml_text = backend_yaml("127.0.0.1:5000/team/engine:1", "pull_policy: always, registry_credential: lab")
    assert api.client.post("/api/v1/backends/import", content=yaml_text.encode()).status_code == 201
    exported = api.client.get("/api/v1/backends/pulled-engine/export").text
    assert "pull_policy: always" in exported and "registry_credential: lab" in exported
    api.client.delete("/api/v1/backends/pulled-engine")
    assert api.client.post("/api/v1/backends/import", content=exported.encode()).status_code == 201
    [version] = api.client.get("/api/v1/backends/pulled-engine").json()["versions"]
    assert (version["pull_policy"], version["registry_credential"]) == ("always", "lab")


def test_an_unknown_pull_policy_is_refused_with_the_three_allowed(api: ApiHarness) -> None:
    response = api.client.post(
        "/api/v1/backends/import",
        content=backend_yaml("127.0.0.1:5000/e:1", "pull_policy: sometimes").encode(),
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_yaml", "'sometimes'", "never, if-missing, always")


def test_a_pull_policy_on_a_program_version_is_refused(api: ApiHarness) -> None:
    yaml_text = """\
backend_name: program-engine
version_configs:
  "1.0":
    run_command: my-engine --port {{port}}
    modelyard: {pull_policy: always}
"""
    response = api.client.post("/api/v1/backends/import", content=yaml_text.encode())
    assert response.status_code == 400
    assert_error(response.json(), "invalid_yaml", "'pull_policy' is about pulling a container image")


def test_a_version_naming_a_credential_not_stored_is_refused_and_nothing_is_stored(api: ApiHarness) -> None:
    response = api.client.post(
        "/api/v1/backends/import",
        content=backend_yaml("127.0.0.1:5000/e:1", "registry_credential: nowhere").encode(),
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "'nowhere', which is not stored")
    assert (
        "modelyard backends credentials add nowhere --registry 127.0.0.1:5000"
        in response.json()["error"]["hint"]
    )
    assert api.client.get("/api/v1/backends/pulled-engine").status_code == 404


def test_a_credential_for_another_registry_is_refused(api: ApiHarness) -> None:
    add_credential(api, registry="registry.example.com")
    response = api.client.post(
        "/api/v1/backends/import",
        content=backend_yaml("127.0.0.1:5000/e:1", "registry_credential: lab").encode(),
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "for registry.example.com", "from 127.0.0.1:5000")


def test_a_credential_named_by_a_backend_cannot_be_removed(api: ApiHarness) -> None:
    add_credential(api)
    api.client.post(
        "/api/v1/backends/import",
        content=backend_yaml("127.0.0.1:5000/e:1", "registry_credential: lab").encode(),
    )
    response = api.client.delete("/api/v1/registry-credentials/lab")
    assert response.status_code == 409
    assert_error(response.json(), "conflict", "pulled-engine 1.0")
    assert [item["used_by"] for item in api.client.get("/api/v1/registry-credentials").json()] == [
        ["pulled-engine 1.0"]
    ]
    api.client.delete("/api/v1/backends/pulled-engine")
    assert api.client.delete("/api/v1/registry-credentials/lab").status_code == 204


def test_check_only_names_a_credential_that_is_not_stored(api: ApiHarness) -> None:
    text = backend_yaml("127.0.0.1:5000/e:1", "registry_credential: nowhere")
    verdict = api.client.post("/api/v1/backends/check", content=text.encode()).json()
    assert verdict["ok"] is False
    [problem] = verdict["problems"]
    assert (
        "'nowhere', which is not stored" in problem["message"]
        and "credentials add nowhere" in problem["hint"]
    )
    add_credential(api, name="nowhere")
    assert api.client.post("/api/v1/backends/check", content=text.encode()).json()["ok"] is True


def test_a_credential_with_policy_never_is_refused_as_pointless(api: ApiHarness) -> None:
    add_credential(api)
    text = backend_yaml("127.0.0.1:5000/e:1", "pull_policy: never, registry_credential: lab")
    response = api.client.post("/api/v1/backends/import", content=text.encode())
    assert response.status_code == 400
    assert_error(response.json(), "invalid_yaml", "pull_policy 'never' never pulls")
