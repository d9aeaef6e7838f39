"""`modelyard models`, `keys`, `backends`, `password` and the errors a user sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelyard.testing.ports import refusing_port

from .conftest import LiveServer


def test_models_add_list_show_rm(live_server: LiveServer, tiny_model_dir: Path) -> None:
    result = live_server.cli("models", "add", str(tiny_model_dir), "--name", "tiny")
    assert result.exit_code == 0, result.output
    assert "added model tiny: Qwen3ForCausalLM" in result.stdout
    listing = json.loads(live_server.cli("models", "list", "--json").stdout)
    assert [model["name"] for model in listing] == ["tiny"]
    assert "tiny" in live_server.cli("models", "list").stdout
    assert "Qwen3ForCausalLM" in live_server.cli("models", "show", "tiny").stdout
    assert live_server.cli("models", "rm", "tiny").exit_code == 0
    assert json.loads(live_server.cli("models", "list", "--json").stdout) == []


def test_bad_model_directory_is_one_error_line(live_server: LiveServer, tmp_path: Path) -> None:
    directory = tmp_path / "empty-model"
    directory.mkdir()
    result = live_server.cli("models", "add", str(directory))
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error:") and "config.json" in lines[0]
    assert "Traceback" not in result.output


def test_keys_create_json_list_revoke(live_server: LiveServer) -> None:
    created = live_server.cli("keys", "create", "ci", "--json")
    assert created.exit_code == 0, created.output
    key = json.loads(created.stdout)["key"]
    assert key.startswith("my-")
    listing = live_server.cli("keys", "list").stdout
    assert "ci" in listing and key not in listing
    assert live_server.cli("keys", "revoke", "ci").exit_code == 0
    assert json.loads(live_server.cli("keys", "list", "--json").stdout)[0]["active"] is False


def test_a_keys_limits_are_listed_with_its_quota_use(live_server: LiveServer) -> None:
    created = live_server.cli(
        "keys", "create", "capped", "--rpm", "30", "--quota", "5000", "--quota-period", "day"
    )
    assert created.exit_code == 0, created.output
    listing = live_server.cli("keys", "list").stdout
    line = next(line for line in listing.splitlines() if line.startswith("capped"))
    assert "30 rpm, 0/5000 tokens this day" in line, listing


def test_plain_keys_create_prints_only_the_key_on_stdout(live_server: LiveServer) -> None:
    result = live_server.cli("keys", "create", "shell")
    assert result.exit_code == 0
    assert result.stdout.strip().startswith("my-")
    assert len(result.stdout.strip().split()) == 1
    assert "only this once" in result.stderr


def test_no_server_is_one_clear_line(live_server: LiveServer) -> None:
    with refusing_port() as port:
        result = live_server.runner.invoke(
            __import__("modelyard.cli.main", fromlist=["app"]).app,
            ["--url", f"http://127.0.0.1:{port}", "keys", "list"],
            env={"MODELYARD_DATA_DIR": str(live_server.data_dir)},
        )
    assert result.exit_code == 1
    assert f"no modelyard server at http://127.0.0.1:{port}" in result.stderr
    assert "modelyard serve" in result.stderr


def test_wrong_password_is_refused_with_a_hint(live_server: LiveServer) -> None:
    result = live_server.cli("keys", "list", password="not-the-password")
    assert result.exit_code == 1
    assert "wrong username or password" in result.stderr
    assert "MODELYARD_PASSWORD" in result.stderr


def test_password_change_from_stdin(live_server: LiveServer) -> None:
    result = live_server.cli("password", "--new-password-stdin", stdin="brand-new-password\n")
    assert result.exit_code == 0, result.output
    assert (live_server.data_dir / "admin-password").read_text().strip() == "brand-new-password"
    # The CLI reads the rewritten file: it keeps working.
    assert live_server.cli("keys", "list").exit_code == 0
    assert live_server.cli("keys", "list", password=live_server.password).exit_code == 1


def test_backends_list_import_export(live_server: LiveServer, tmp_path: Path) -> None:
    listing = live_server.cli("backends", "list")
    assert listing.exit_code == 0
    assert "vllm" in listing.stdout and "transformers" in listing.stdout
    exported = tmp_path / "vllm.yaml"
    result = live_server.cli("backends", "export", "vllm", "-o", str(exported))
    assert result.exit_code == 0, result.output
    custom = exported.read_text().replace("backend_name: vllm", "backend_name: vllm-mine", 1)
    (tmp_path / "mine.yaml").write_text(custom)
    result = live_server.cli("backends", "import", str(tmp_path / "mine.yaml"))
    assert result.exit_code == 0, result.output
    assert "imported backend vllm-mine" in result.stdout
    assert "0.25.0" in live_server.cli("backends", "show", "vllm-mine").stdout


def test_malformed_backend_yaml_names_the_line(live_server: LiveServer, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("backend_name: x\nversion_configs:\n  '1': [unclosed\n")
    result = live_server.cli("backends", "import", str(broken))
    assert result.exit_code == 1
    assert "line" in result.stderr


def test_usage_lists_tokens_by_key(live_server: LiveServer) -> None:
    from modelyard.store.tables import ApiKey, UsageRecord

    with live_server.database.session() as session:
        key = ApiKey(name="ci", prefix="my-abcde", key_hash="1" * 64)
        session.add(key)
        session.flush()
        session.add(UsageRecord(api_key_id=key.id, deployment_name="chat", endpoint="chat", prompt_tokens=12))
        session.commit()
    result = live_server.cli("usage", "--by", "key")
    assert result.exit_code == 0, result.output
    assert "ci" in result.stdout and "12" in result.stdout
    rows = json.loads(live_server.cli("usage", "--by", "deployment", "--json").stdout)["rows"]
    assert rows[0]["prompt_tokens"] == 12


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", "/api/v1"])
def test_the_openai_base_url_the_server_prints_is_accepted_as_the_server_url(
    live_server: LiveServer, suffix: str
) -> None:
    result = live_server.runner.invoke(
        __import__("modelyard.cli.main", fromlist=["app"]).app,
        ["keys", "list"],
        env={"MODELYARD_URL": live_server.url + suffix, "MODELYARD_DATA_DIR": str(live_server.data_dir)},
    )
    assert result.exit_code == 0, result.stderr
    assert "no route" not in result.stderr
    note = f"note: using {live_server.url} as the server URL ({suffix.rstrip('/')} dropped"
    assert result.stderr.count(note) == 1
