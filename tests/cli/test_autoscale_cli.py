"""`modelyard autoscale NAME` against the live server: set, change, show and turn off a deployment's
autoscale; a bad value is the server's own error, and nothing is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from modelyard.store.tables import AutoscaleEvent, Deployment

from .conftest import LiveServer

WORKING_HOURS = "cron=0 8 * * 1-5; duration=10h; min=2; timezone=Europe/Paris; name=working hours"


@pytest.fixture
def deployed(live_server: LiveServer, tiny_model_dir: Path) -> LiveServer:
    assert live_server.cli("models", "add", str(tiny_model_dir), "--name", "tiny").exit_code == 0
    assert live_server.cli("deploy", "tiny", "--no-wait").exit_code == 0
    return live_server


def set_autoscale(server: LiveServer, *arguments: str) -> None:
    result = server.cli("autoscale", "tiny", *arguments)
    assert result.exit_code == 0, result.output


def _stored(server: LiveServer) -> dict[str, Any] | None:
    shown: dict[str, Any] | None = json.loads(server.cli("ps", "tiny", "--json").stdout)["autoscale"]
    return shown


def test_autoscale_is_set_with_its_options_and_shown(deployed: LiveServer) -> None:
    result = deployed.cli(
        "autoscale", "tiny", "--min", "1", "--max", "3", "--target", "waiting_per_replica=2",
        "--cooldown", "2m", "--schedule", WORKING_HOURS,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    stored = _stored(deployed)
    assert stored is not None
    assert (stored["min"], stored["max"], stored["target"]) == (
        1,
        3,
        {"metric": "waiting_per_replica", "value": 2.0},
    )
    assert stored["cooldown_s"] == 120
    assert stored["schedule"] == [
        {
            "cron": "0 8 * * 1-5",
            "duration": "10h",
            "min": 2,
            "timezone": "Europe/Paris",
            "name": "working hours",
        }
    ]
    assert "1 to 3" in result.stdout
    assert "waiting_per_replica = 2" in result.stdout
    assert "working hours: at least 2 from '0 8 * * 1-5' for 10h (Europe/Paris)" in result.stdout
    assert "autoscaled 1..3 on waiting_per_replica" in deployed.cli("ps", "tiny").stdout


def test_an_option_changes_only_its_own_setting(deployed: LiveServer) -> None:
    set_autoscale(deployed, "--min", "1", "--max", "3", "--target", "kv_cache_use=0.8")
    result = deployed.cli("autoscale", "tiny", "--min", "0", "--idle", "1h30m")
    assert result.exit_code == 0, result.output
    stored = _stored(deployed)
    assert stored is not None
    assert (stored["min"], stored["max"], stored["idle_s"]) == (0, 3, 5400)
    assert stored["target"] == {"metric": "kv_cache_use", "value": 0.8}
    assert "after 5400 s without a request" in result.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--min", "5", "--max", "2"], "min (5) is more than max (2): set min to at most max, or raise max"),
        (
            ["--target", "gpu_use=1"],
            "body field 'autoscale.target.metric': Input should be 'waiting_per_replica'",
        ),
        (["--target", "kv_cache_use=80"], "kv_cache_use is a fraction from 0 to 1, got 80"),
        (
            ["--schedule", "cron=0 25 * * *; duration=10h; min=1"],
            "'autoscale.schedule.0.cron': Value error, cron '0 25 * * *' is not a valid cron expression",
        ),
        (["--max-hold", "0"], "autoscale.max_hold_s"),
    ],
)
def test_a_bad_value_is_the_servers_error_and_nothing_is_stored(
    deployed: LiveServer, arguments: list[str], message: str
) -> None:
    set_autoscale(deployed, "--min", "1", "--max", "3", "--target", "waiting_per_replica=2")
    before = _stored(deployed)
    result = deployed.cli("autoscale", "tiny", *arguments)
    assert result.exit_code == 1
    assert message in " ".join(result.stderr.split()), result.stderr
    assert _stored(deployed) == before


def test_a_first_setting_without_a_target_says_it_is_needed(deployed: LiveServer) -> None:
    result = deployed.cli("autoscale", "tiny", "--min", "1", "--max", "2")
    assert result.exit_code == 1
    assert (
        "tiny has no autoscale yet: a first setting needs --min, --max and --target (missing: --target)"
        in (" ".join(result.stderr.split()))
    )
    assert _stored(deployed) is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--idle", "soon"], "--idle 'soon' is not a duration"),
        (["--target", "waiting_per_replica"], "--target 'waiting_per_replica' is not METRIC=VALUE"),
        (["--schedule", "at 8 for 10h"], "'at 8 for 10h' is not one of cron=..., duration=..."),
        (["--off", "--max", "3"], "--off takes no other setting"),
    ],
)
def test_an_option_that_cannot_be_read_is_refused_before_anything_is_sent(
    deployed: LiveServer, arguments: list[str], message: str
) -> None:
    result = deployed.cli("autoscale", "tiny", *arguments)
    assert result.exit_code == 1
    assert message in " ".join(result.stderr.split()), result.stderr
    assert _stored(deployed) is None


def test_off_keeps_the_replicas_and_scale_works_again(deployed: LiveServer) -> None:
    set_autoscale(deployed, "--min", "2", "--max", "3", "--target", "waiting_per_replica=2")
    refused = deployed.cli("scale", "tiny", "1", "--no-wait")
    assert refused.exit_code == 1 and "autoscaled (2 to 3 replicas)" in refused.stderr
    result = deployed.cli("autoscale", "tiny", "--off")
    assert result.exit_code == 0, result.output
    assert "autoscale off; 2 replica(s), set by hand from now on" in result.stdout
    assert _stored(deployed) is None
    assert deployed.cli("scale", "tiny", "1", "--no-wait").exit_code == 0


def test_without_options_it_shows_the_settings_and_the_recent_decisions(deployed: LiveServer) -> None:
    shown = deployed.cli("autoscale", "tiny")
    assert shown.exit_code == 0, shown.output
    assert "tiny: no autoscale; 1 replica(s) set by hand" in " ".join(shown.stdout.split())
    set_autoscale(deployed, "--min", "1", "--max", "3", "--target", "waiting_per_replica=2")
    with deployed.database.session() as session:
        deployment = session.scalar(select(Deployment).where(Deployment.name == "tiny"))
        assert deployment is not None
        session.add(
            AutoscaleEvent(
                deployment_name="tiny",
                deployment_uid=deployment.uid,
                direction="up",
                from_replicas=1,
                to_replicas=2,
                reason="3.0 waiting per replica for 31 s > 2: 1 → 2",
            )
        )
        session.commit()
    shown = deployed.cli("autoscale", "tiny")
    assert shown.exit_code == 0, shown.output
    assert "recent decisions" in shown.stdout
    assert "3.0 waiting per replica for 31 s > 2: 1 → 2" in " ".join(shown.stdout.split())
    # No autoscaler runs beside this test server: the rule has not said anything yet.
    assert "the autoscaler has not sampled it" in " ".join(shown.stdout.split())
    view = json.loads(deployed.cli("autoscale", "tiny", "--json").stdout)
    assert [event["direction"] for event in view["events"]] == ["up"]
