"""What a user sees when joining or starting a cluster goes wrong, and that the single-host
server never touches Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modelyard.cli.main import app
from modelyard.testing.serve_process import ServeProcess, free_port

TOKEN = "0123456789abcdef" * 4


def _join(*arguments: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["worker", "join", *arguments])
    return result.exit_code, result.output


def test_join_help_says_what_it_runs_and_what_it_needs() -> None:
    result = CliRunner().invoke(app, ["worker", "join", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for words in ("ray start --address HOST:PORT --block", "--token-file", "--num-gpus", "--label", "Ctrl-C"):
        assert words in result.output, words


def test_join_refuses_the_console_url_naming_the_address_to_give() -> None:
    code, output = _join("http://10.0.0.5:8080", "--token", TOKEN)
    assert code == 1
    assert "is a web address; join needs the Ray head's HOST:PORT" in output
    assert "HOST:6379" in output


def test_join_refuses_an_address_without_a_port_number() -> None:
    code, output = _join("10.0.0.5:port", "--token", TOKEN)
    assert code == 1 and "the port in '10.0.0.5:port' is not a number" in output


def test_join_refuses_a_short_token_before_reaching_anything() -> None:
    code, output = _join("127.0.0.1:6379", "--token", "abc")
    assert code == 1
    assert "the cluster token from --token has 3 characters" in output
    assert "cluster-token" in output


def test_join_without_a_token_says_where_to_find_it() -> None:
    code, output = _join("127.0.0.1:6379")
    assert code == 1
    assert "joining needs the cluster's token" in output and "--token-file" in output


def test_join_to_a_head_that_does_not_answer_names_the_port_and_the_firewall() -> None:
    port = free_port()
    code, output = _join(f"127.0.0.1:{port}", "--token", TOKEN)
    assert code == 1
    assert f"cannot reach the cluster's head at 127.0.0.1:{port} (Connection refused)" in output
    assert "modelyard serve --cluster" in output and f"TCP {port}" in output


def test_serve_cluster_without_ray_installed_says_which_extra_to_install(tmp_path: Path) -> None:
    # Ray made unimportable for this one process, as on a host without the extra.
    program = (
        "import sys; sys.modules['ray'] = None; from modelyard.cli.main import main; "
        f"sys.argv = ['modelyard', 'serve', '--cluster', '--no-demo', '--data-dir', {str(tmp_path)!r}, "
        f"'--port', '{free_port()}']; main()"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "Ray is not installed, and clusters run on Ray" in result.stderr
    assert "pip install 'modelyard[ray]'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_serve_without_cluster_never_loads_ray(tmp_path: Path) -> None:
    server = ServeProcess(data_dir=tmp_path / "data")
    server.start("--no-demo", "--gateway-workers", "0")
    try:
        server.wait_until_answering()
        with server.api() as client:
            listed = client.get("/api/v1/workers").json()
        assert listed["cluster"] is None
        assert [worker["name"] for worker in listed["workers"]] == ["local"]
        assert server.process is not None
        maps = Path(f"/proc/{server.process.pid}/maps").read_text()
        assert "_raylet" not in maps and "/ray/" not in maps
    finally:
        server.stop()


def test_join_passes_more_ray_start_options_through_but_not_its_own() -> None:
    from modelyard.cluster.join import JoinPlan

    plan = JoinPlan(
        head_host="10.0.0.5",
        head_port=6379,
        name="gpu-2",
        gpus=2,
        labels={"zone": "b"},
        token=TOKEN,
        ray_arguments=("--node-manager-port=8076", "--object-manager-port=8077"),
    )
    argv = plan.argv()
    assert argv[argv.index("--address") + 1] == "10.0.0.5:6379"
    assert argv[argv.index("--labels") + 1] == "modelyard.io/worker=gpu-2,zone=b"
    assert argv[-2:] == ["--node-manager-port=8076", "--object-manager-port=8077"]
    assert TOKEN not in " ".join(argv)
    code, output = _join("127.0.0.1:6379", "--token", TOKEN, "--ray-arg=--num-gpus=4")
    assert code == 1 and "--ray-arg --num-gpus is set by modelyard itself" in output
    code, output = _join("127.0.0.1:6379", "--token", TOKEN, "--ray-arg=8076")
    assert code == 1 and "--ray-arg '8076' is not an option of ray start" in output
