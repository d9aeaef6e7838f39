"""Hostile values inside well-formed requests: names, YAML, numbers, paths, files, lengths.

Each is answered with a 4xx in the documented error shape that names the problem, never a 500,
and in no more time than a normal request.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from .conftest import HostileTarget


def _error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), response.text
    error: dict[str, object] = body["error"]
    return error


@pytest.mark.parametrize("name", ["team/../../outside", "a/./b", "a//b", "a/", "x/..", "a\x00b", "n" * 129])
def test_a_key_name_breaking_the_name_rule_is_refused(target: HostileTarget, name: str) -> None:
    with target.client(admin=True) as client:
        error = _error(client.post("/api/v1/keys", json={"name": name}), 400)
    assert error["code"] == "invalid_input"


def test_a_model_name_with_a_dot_dot_segment_is_refused_before_its_path_is_looked_at(
    target: HostileTarget,
) -> None:
    with target.client(admin=True) as client:
        error = _error(client.post("/api/v1/models", json={"path": "/nowhere", "name": "m/../../x"}), 400)
    assert "'..' segment" in str(error["message"])


def _bomb(levels: int) -> str:
    lines = ["backend_name: bomb", 'icon: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for level in range(1, levels + 1):
        aliases = ",".join([f"*a{level - 1}"] * 9)
        lines.append(f"k{level}: &a{level} [{aliases}]")
    lines.append("version_configs: {'1.0': {run_command: 'serve {{model_path}}'}}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("yaml_text", "fragment"),
    [
        (_bomb(9), "aliases expand to more than"),
        ("backend_name: deep\nicon: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested deeper than 64"),
        ("".join(" " * level + f"k{level}:\n" for level in range(1_000)), "nested deeper than 64"),
        ("backend_name: loop\nicon: &a [*a]\n", "refers to the value that contains it"),
    ],
    ids=["alias-bomb", "flow-10000-deep", "block-1000-deep", "self-reference"],
)
def test_hostile_backend_yaml_is_refused_naming_the_problem(
    target: HostileTarget, yaml_text: str, fragment: str
) -> None:
    with target.client(admin=True) as client:
        error = _error(client.post("/api/v1/backends/import", content=yaml_text.encode()), 400)
        listed = client.get("/api/v1/backends").json()
    assert error["code"] == "invalid_yaml"
    assert fragment in str(error["message"])
    assert all(backend["name"] not in ("bomb", "deep", "loop") for backend in listed)


@pytest.mark.parametrize(
    "query",
    ["limit=18446744073709551616", "limit=0", "limit=-1"],
)
def test_an_events_limit_out_of_range_is_a_400(target: HostileTarget, query: str) -> None:
    with target.client(admin=True) as client:
        error = _error(client.get(f"/api/v1/deployments/demo/events?{query}"), 400)
    assert "limit" in str(error["message"])


@pytest.mark.parametrize(
    "query",
    ["tail=18446744073709551616", "instance=18446744073709551616", "start=18446744073709551616", "start=0"],
)
def test_a_logs_number_out_of_range_is_a_400(target: HostileTarget, query: str) -> None:
    with target.client(admin=True) as client:
        error = _error(client.get(f"/api/v1/deployments/demo/logs?{query}"), 400)
    assert query.split("=")[0] in str(error["message"])


def test_a_model_path_under_an_unknown_users_home_is_a_400(target: HostileTarget) -> None:
    with target.client(admin=True) as client:
        error = _error(client.post("/api/v1/models", json={"path": "~nosuchuser/models/x"}), 400)
    assert error["code"] == "invalid_model_directory"
    assert "home directory this host does not know" in str(error["message"])


def test_a_300_mb_config_json_is_refused_without_reading_it(target: HostileTarget, tmp_path: Path) -> None:
    model = tmp_path / "huge-config"
    model.mkdir()
    with open(model / "config.json", "wb") as handle:
        handle.truncate(300 * 1024 * 1024)  # sparse: 300 MB to read, nothing on disk
    rss_before = target.rss_bytes()
    with target.client(admin=True) as client:
        error = _error(client.post("/api/v1/models", json={"path": str(model)}), 400)
    assert error["code"] == "invalid_model_directory"
    assert "config.json is 300 MiB" in str(error["message"])
    assert target.rss_bytes() - rss_before < 64 * 1024 * 1024


def test_backend_parameters_longer_than_the_limit_are_a_400_naming_the_field(target: HostileTarget) -> None:
    body = {"model": "any", "backend_parameters": "--chat-template " + "x" * (256 * 1024)}
    with target.client(admin=True) as client:
        error = _error(client.post("/api/v1/deployments", json=body), 400)
    assert "backend_parameters" in str(error["message"])
    assert "65536" in str(error["message"])


def test_the_console_yaml_check_refuses_an_alias_bomb_as_a_problem_of_its_line(target: HostileTarget) -> None:
    with target.client(admin=True) as client:
        response = client.post("/api/v1/backends/check", content=_bomb(9).encode())
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["ok"] is False
    assert "aliases expand to more than" in result["problems"][0]["message"]
