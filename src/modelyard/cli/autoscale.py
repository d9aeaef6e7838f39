"""``modelyard autoscale NAME``: show a deployment's autoscale, set it, or turn it off.

The options given change the deployment's current ``autoscale`` (the others are kept) and the
whole is sent with ``PATCH /api/v1/deployments/NAME``; the server checks every value (the same
check as the API's) and stores nothing when one is wrong, and its error is printed as it says it.
Without options, the settings are shown with what the autoscaler last saw and decided
(``GET .../autoscale``).

Usage::

    modelyard autoscale chat --min 1 --max 4 --target waiting_per_replica=2
    modelyard autoscale chat --min 0 --idle 10m --schedule 'cron=0 8 * * 1-5; duration=10h; min=2'
    modelyard autoscale chat            # settings, last reading and decision, recent decisions
    modelyard autoscale chat --off      # replicas by hand again, where the autoscaler left them
"""

from __future__ import annotations

import re
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stdout
from modelyard.cli.markup import escape
from modelyard.cli.output import print_fields, print_json, print_table

METRICS = ("waiting_per_replica", "kv_cache_use", "ttft_p90_ms")
METRIC_WORDS = {
    "waiting_per_replica": "waiting requests per replica",
    "kv_cache_use": "KV cache use (0 to 1)",
    "ttft_p90_ms": "TTFT p90 at the gateway, ms",
}
SCHEDULE_FIELDS = ("cron", "duration", "min", "timezone", "name")
_SCHEDULE_KEYS = ", ".join(f"{field}=..." for field in SCHEDULE_FIELDS)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms]?)")
_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "": 1.0}
_DURATION_HELP = "seconds, or with units: 30s, 5m, 1h30m"


def parse_seconds(option: str, text: str) -> float:
    """``"300"``, ``"300s"``, ``"5m"``, ``"1h30m"``: seconds (the server checks the bounds)."""
    compact = text.strip().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not compact or "".join(number + unit for number, unit in parts) != compact:
        fail(f"{option} {text!r} is not a duration", f"write {_DURATION_HELP}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def parse_target(text: str) -> dict[str, Any]:
    """``waiting_per_replica=2``: the metric and its value (the server checks both)."""
    metric, separator, value = text.partition("=")
    if not separator or not metric.strip() or not value.strip():
        fail(
            f"--target {text!r} is not METRIC=VALUE",
            f"e.g. --target waiting_per_replica=2; metrics: {', '.join(METRICS)}",
        )
    return {"metric": metric.strip(), "value": value.strip()}


def parse_schedule(text: str) -> dict[str, str]:
    """``cron=0 8 * * 1-5; duration=10h; min=2; timezone=Europe/Paris; name=working hours``."""
    entry: dict[str, str] = {}
    for part in filter(None, (piece.strip() for piece in text.split(";"))):
        key, separator, value = part.partition("=")
        key = key.strip()
        if not separator or key not in SCHEDULE_FIELDS:
            fail(
                f"--schedule {text!r}: {part!r} is not one of {_SCHEDULE_KEYS}",
                "e.g. --schedule 'cron=0 8 * * 1-5; duration=10h; min=2; timezone=Europe/Paris'",
            )
        entry[key] = value.strip()
    return entry


def _changed(
    current: dict[str, Any] | None,
    given: dict[str, Any],
    schedule: list[dict[str, str]],
    no_schedule: bool,
) -> dict[str, Any]:
    """The current settings with the given ones over them (``scale_down_stabilisation_s`` None:
    twice the scale-up window, as the server fills it in, so it is sent only when it was set)."""
    changed = dict(current or {})
    if changed.get("scale_down_stabilisation_s") is None:
        changed.pop("scale_down_stabilisation_s", None)
    changed.update({field: value for field, value in given.items() if value is not None})
    if no_schedule:
        changed["schedule"] = []
    elif schedule:
        changed["schedule"] = schedule
    return changed


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g} s"


def _settings_lines(autoscale: dict[str, Any]) -> list[tuple[str, Any]]:
    target = autoscale["target"]
    down = autoscale.get("scale_down_stabilisation_s")
    lines: list[tuple[str, Any]] = [
        ("replicas", f"{autoscale['min']} to {autoscale['max']}"),
        ("target", f"{target['metric']} = {target['value']:g} ({METRIC_WORDS.get(target['metric'], '')})"),
        (
            "windows",
            f"above the target {_seconds(autoscale['stabilisation_s'])} to scale up, below it "
            f"{_seconds(down if down is not None else 2 * autoscale['stabilisation_s'])} to scale down; "
            f"cool-down {_seconds(autoscale['cooldown_s'])}",
        ),
    ]
    if autoscale["min"] == 0:
        lines.append(
            (
                "scale to zero",
                f"after {_seconds(autoscale['idle_s'])} without a request; then up to "
                f"{autoscale['max_held_requests']} request(s) held, each for at most "
                f"{_seconds(autoscale['max_hold_s'])}, while a replica starts",
            )
        )
    for entry in autoscale.get("schedule") or []:
        name = f"{entry['name']}: " if entry.get("name") else ""
        lines.append(
            (
                "schedule",
                f"{name}at least {entry['min']} from '{entry['cron']}' for {entry['duration']} "
                f"({entry.get('timezone') or 'UTC'})",
            )
        )
    return lines


def _print_view(view: dict[str, Any]) -> None:
    name = escape(view["name"])
    autoscale = view.get("autoscale")
    if not autoscale:
        stdout.print(
            f"{name}: no autoscale; {view['desired_replicas']} replica(s) set by hand "
            f"({view['running_replicas']} running). Set it: modelyard autoscale {name} --min 1 --max 4 "
            "--target waiting_per_replica=2",
            highlight=False,
        )
    else:
        last = view.get("last")
        pairs = [*_settings_lines(autoscale)]
        pairs.append(
            ("now", f"{view['desired_replicas']} replica(s) asked for, {view['running_replicas']} running")
        )
        if last is not None:
            value = "no reading" if last["value"] is None else f"{last['value']:g}"
            pairs.append(("last reading", f"{last['metric']} {value}; {last['ready_replicas']} ready"))
            pairs.append(("the rule says", last["reason"]))
        else:
            pairs.append(
                ("the rule says", "nothing yet (the autoscaler has not sampled it since the server started)")
            )
        print_fields(pairs)
    events = view.get("events") or []
    if events:
        stdout.print()
        print_table(
            ["AT", "DIRECTION", "FROM", "TO", "REASON"],
            [
                [
                    event["at"][:19].replace("T", " "),
                    event["direction"],
                    event["from_replicas"],
                    event["to_replicas"],
                    event["reason"],
                ]
                for event in events
            ],
            title="recent decisions",
        )


def autoscale(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The deployment."),
    minimum: int | None = typer.Option(
        None, "--min", help="The fewest replicas (0: scale to zero when idle)."
    ),
    maximum: int | None = typer.Option(None, "--max", help="The most replicas (at most 64)."),
    target: str | None = typer.Option(
        None,
        "--target",
        help=f"METRIC=VALUE to hold the signal near; METRIC one of {', '.join(METRICS)}.",
    ),
    stabilisation: str | None = typer.Option(
        None, "--stabilisation", help=f"How long above the target before a scale-up ({_DURATION_HELP})."
    ),
    scale_down_stabilisation: str | None = typer.Option(
        None,
        "--scale-down-stabilisation",
        help="How long below the target before a scale-down (default: twice --stabilisation).",
    ),
    cooldown: str | None = typer.Option(None, "--cooldown", help="The shortest time between two changes."),
    idle: str | None = typer.Option(
        None, "--idle", help="With --min 0: how long without a request before the last replica stops."
    ),
    max_held: int | None = typer.Option(
        None, "--max-held", help="With --min 0: the most requests held at once while a replica starts."
    ),
    max_hold: str | None = typer.Option(
        None, "--max-hold", help="With --min 0: the longest one request is held."
    ),
    schedule: list[str] = typer.Option(
        [],
        "--schedule",
        help="A minimum for windows of time, 'cron=0 8 * * 1-5; duration=10h; min=2[; timezone=Europe/Paris]"
        "[; name=working hours]' (repeatable; replaces the schedule).",
    ),
    no_schedule: bool = typer.Option(False, "--no-schedule", help="Remove every schedule entry."),
    off: bool = typer.Option(False, "--off", help="Stop autoscaling; the replicas stay where they are."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show a deployment's autoscale and the autoscaler's last decision, set it, or turn it off.

    Options change the current settings, the others kept; the server checks each, storing none on error.
    """
    client = ApiClient.from_context(ctx)
    path = f"/deployments/{name}"
    given: dict[str, Any] = {
        "min": minimum,
        "max": maximum,
        "target": parse_target(target) if target is not None else None,
        "stabilisation_s": parse_seconds("--stabilisation", stabilisation)
        if stabilisation is not None
        else None,
        "scale_down_stabilisation_s": (
            parse_seconds("--scale-down-stabilisation", scale_down_stabilisation)
            if scale_down_stabilisation is not None
            else None
        ),
        "cooldown_s": parse_seconds("--cooldown", cooldown) if cooldown is not None else None,
        "idle_s": parse_seconds("--idle", idle) if idle is not None else None,
        "max_held_requests": max_held,
        "max_hold_s": parse_seconds("--max-hold", max_hold) if max_hold is not None else None,
    }
    entries = [parse_schedule(text) for text in schedule]
    changes = any(value is not None for value in given.values()) or bool(entries) or no_schedule
    if off and changes:
        fail("--off takes no other setting", f"turn it off with `modelyard autoscale {name} --off` alone")
    if off:
        client.patch(path, {"autoscale": None})
    elif changes:
        current = client.get(path).get("autoscale")
        missing = [
            f"--{field}" for field in ("min", "max", "target") if current is None and given[field] is None
        ]
        if missing:
            fail(
                f"{name} has no autoscale yet: a first setting needs --min, --max and --target "
                f"(missing: {', '.join(missing)})",
                f"e.g. modelyard autoscale {name} --min 1 --max 4 --target waiting_per_replica=2",
            )
        client.patch(path, {"autoscale": _changed(current, given, entries, no_schedule)})
    view: dict[str, Any] = client.get(f"{path}/autoscale", {"limit": 10})
    if as_json:
        print_json(view)
        return
    if off:
        stdout.print(
            f"{escape(name)}: autoscale off; {view['desired_replicas']} replica(s), set by hand from now on "
            f"(modelyard scale {escape(name)} N)",
            highlight=False,
        )
        return
    _print_view(view)


def register(app: typer.Typer) -> None:
    app.command("autoscale")(autoscale)
