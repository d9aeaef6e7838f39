"""The Ray head's ports, checked before Ray starts (``--ray-port`` inside Ray's worker-port range,
or in use), and a ``ray start`` that fails anyway shows the lines of its log that say why."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modelyard.cli.main import app
from modelyard.cluster.head import HeadStartFailed, check_head_ports, start_head
from modelyard.cluster.ray_processes import failure_lines
from modelyard.errors import InvalidInput
from modelyard.runtimes.engine_ports import PortRange
from modelyard.settings import Settings
from modelyard.testing.serve_process import free_port
from ray_cluster import require_ray_for_tests

TOKEN = "0123456789abcdef" * 4
# What ray start 2.60 wrote to cluster-head.log for `serve --cluster --ray-port 15000`.
CLASH_LOG = """\
Usage stats collection is disabled.
Traceback (most recent call last):
  File "ray/scripts/scripts.py", line 1074, in start
    node = ray._private.node.Node(
  File "ray/_private/parameter.py", line 343, in update_pre_selected_port
    raise ValueError(
ValueError: Ray component worker_ports is trying to use a port number 15000 that is used by other components.
Port information: {'gcs_server': 15000, 'worker_ports': '9998 ports from 10002 to 19999'}
If you allocate ports, please make sure the same port is not used by multiple components.
"""


def test_a_ray_port_inside_rays_worker_ports_is_refused_naming_the_range_and_the_flags(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidInput) as raised:
        check_head_ports(Settings(data_dir=tmp_path, cluster=True, ray_port=15000))
    assert raised.value.message == (
        "--ray-port 15000 is taken by Ray's worker ports (ray start --min-worker-port/--max-worker-port): "
        "10002-19999"
    )
    hint = str(raised.value.hint)
    assert "outside 10002-19999 (Ray's default 6379)" in hint
    assert "--ray-head-arg=--min-worker-port=20000 --ray-head-arg=--max-worker-port=29999" in hint
    # Ray's workers moved elsewhere: the same port is fine.
    moved = ("--min-worker-port=20000", "--max-worker-port=29999")
    check_head_ports(Settings(data_dir=tmp_path, cluster=True, ray_port=15000, ray_head_arguments=moved))


def test_engine_ports_over_the_ray_port_are_refused(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, cluster=True, ray_port=30005, engine_ports=PortRange(30000, 30009))
    with pytest.raises(InvalidInput, match=r"overlaps the Ray head's port \(--ray-port\) \(30005\)"):
        check_head_ports(settings)


def test_serve_cluster_refuses_the_ray_port_before_anything_starts(tmp_path: Path) -> None:
    require_ray_for_tests()
    result = CliRunner().invoke(
        app, ["serve", "--cluster", "--no-demo", "--data-dir", str(tmp_path), "--ray-port", "15000"]
    )
    assert result.exit_code == 1
    assert "--ray-port 15000 is taken by Ray's worker ports" in result.output
    assert "another Ray already running" not in result.output
    assert not (tmp_path / "cluster-head.log").exists()


def test_a_ray_port_in_use_is_named_before_ray_starts(tmp_path: Path) -> None:
    require_ray_for_tests()
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(HeadStartFailed) as raised:
            start_head(Settings(data_dir=tmp_path, cluster=True, ray_port=port), TOKEN, say=print)
    assert raised.value.message == f"port {port} (--ray-port) is in use on this host"
    assert "ss -ltnp" in str(raised.value.hint)
    assert not (tmp_path / "cluster-head.log").exists()


def test_the_lines_that_say_why_are_the_exception_and_what_follows() -> None:
    shown = failure_lines(CLASH_LOG)
    assert shown.splitlines()[0].strip().startswith("ValueError: Ray component worker_ports")
    assert "Port information" in shown and "Traceback" not in shown


@pytest.mark.slow
def test_a_ray_start_that_fails_shows_its_log_lines_in_the_error(tmp_path: Path) -> None:
    require_ray_for_tests()
    # Two of Ray's own ports clash (not a --ray-port modelyard can check): ray start refuses.
    settings = Settings(
        data_dir=tmp_path,
        cluster=True,
        ray_port=free_port(),
        ray_head_arguments=("--dashboard-agent-listen-port=15000",),
    )
    with pytest.raises(HeadStartFailed) as raised:
        start_head(settings, TOKEN, say=print)
    message = raised.value.message
    assert "the Ray head did not start: Ray's " in message and "would take port 15000" in message
    assert "ray start said:\n    ValueError: Ray component" in message
    assert f"(all of it in {tmp_path / 'cluster-head.log'})" in message
    assert "another Ray already running" not in message + str(raised.value.hint)
    assert "--ray-head-arg" in str(raised.value.hint)
