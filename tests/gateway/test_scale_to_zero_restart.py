"""Scale to zero across a restart of a real ``modelyard serve``: the idle time counted before the
restart is kept (it runs from the last request the gateway recorded, not from the new start), so
a deployment idle for most of ``idle_s`` when the server stops is scaled to zero soon after it is
back, without waiting another ``idle_s``."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from .served import ServedPlatform
from .test_scale_to_zero import chat, scaled_to_zero, wait_until

IDLE_S = 30
DOWN_S = 10


def test_a_restart_keeps_the_idle_time_counted_before_it(tmp_path: Path) -> None:
    platform = ServedPlatform(tmp_path / "data", gateway_workers=1)
    platform.start()
    try:
        platform.deploy_double("resumed", tmp_path)
        autoscale = {
            "min": 0,
            "max": 1,
            "target": {"metric": "waiting_per_replica", "value": 1},
            "stabilisation_s": 0,
            "cooldown_s": 0,
            "idle_s": IDLE_S,
        }
        response = platform.api("PATCH", "/api/v1/deployments/resumed", json={"autoscale": autoscale})
        assert response.status_code == 200, response.text
        answer = chat(platform, platform.create_key("uses-resumed"), "resumed")
        assert answer.status_code == 200, answer.text
        last_request_at = time.time()

        platform.stop()
        # The server stays down a while (an upgrade, a host reboot): the idle time runs on.
        time.sleep(DOWN_S)
        platform.start()
        restarted_at = time.time()
        wait_until(
            "resumed scaled to zero", lambda: scaled_to_zero(platform, "resumed"), timeout_s=IDLE_S + 60
        )
        events = platform.api("GET", "/api/v1/deployments/resumed/events").json()
        [down] = [event for event in events if event["kind"] == "autoscale" and event["direction"] == "down"]
        down_at = datetime.fromisoformat(down["at"]).timestamp()
        print(
            f"\nrestart took {restarted_at - last_request_at:.1f} s after the last request; scaled to zero "
            f"{down_at - last_request_at:.1f} s after it ({down_at - restarted_at:.1f} s after the restart)"
        )
        # From the last request, as without a restart (a sample a second, the store's clock);
        # counted from the restart it would have been IDLE_S after it, plus the replica's new start.
        assert down_at - last_request_at < IDLE_S + 5, down["reason"]
        assert down_at < restarted_at + IDLE_S - DOWN_S / 2, down["reason"]
        assert down["reason"].endswith(f"(idle_s {IDLE_S}): 1 → 0, scaled to zero"), down["reason"]
    finally:
        platform.stop()
