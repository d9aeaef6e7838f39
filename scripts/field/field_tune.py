"""The field run's steps for ``modelyard tune`` and for a deployment autoscaled under load.

``field_run.py`` registers them beside its own; each goes through modelyard's CLI (the autoscale
setting through the REST API, which is where modelyard takes it today), appends what it saw to
``RESULTS/steps.jsonl`` and returns False when it did not pass.

- ``tune LABEL -- TUNE_ARGS...``: ``modelyard tune`` on the field model with those arguments; its
  report (``report.json``, ``report.md``), its journal and its terminal output kept under
  ``RESULTS/tune-LABEL``, the wall time of the whole command recorded.
- ``autoscale NAME``: a deployment placed by memory (``deploy --gpus 1 --gpu-memory auto``), its
  ``autoscale`` set (``PATCH /api/v1/deployments/NAME``), then ``modelyard bench run`` through the
  gateway for ``--load-s`` and an idle ``--idle-s``; every second the deployment's replicas
  (desired, running, each instance's state) and each running engine's own request counters, so
  the time from the load's start to the new replica serving is read from the samples.
"""

from __future__ import annotations

import argparse
import json
import shlex
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from field_common import (
    DATA,
    MODEL_NAME,
    RESULTS,
    SERVER,
    admin_auth,
    bench_arguments,
    bench_environment,
    deploy_arguments,
    local_gpu_spec,
    model_dir,
    modelyard,
    record,
    running_instance,
    save_deployment_files,
    summarize,
)

# vLLM's and SGLang's counters of requests an engine has finished, and its gauge of running ones.
FINISHED_NAMES = ("vllm:request_success_total", "sglang:num_requests_total")
RUNNING_NAMES = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING_NAMES = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")


def step_tune(arguments: argparse.Namespace) -> bool:
    """``modelyard tune MODEL ARGS --model-dir ... --out ...``, timed; the report kept."""
    folder = RESULTS / f"tune-{arguments.label}"
    folder.mkdir(parents=True, exist_ok=True)
    tune_arguments = [argument for argument in arguments.tune_args if argument != "--"]
    if "--gpus" not in tune_arguments:  # the card this runs on (nvidia-smi), as the estimate takes it
        tune_arguments += ["--gpus", local_gpu_spec()]
    command = ["tune", MODEL_NAME, *tune_arguments, "--model-dir", model_dir(), "--out", str(folder)]
    (folder / "command.txt").write_text("modelyard " + shlex.join(command) + "\n")
    started = time.monotonic()
    result = modelyard(*command, timeout=arguments.timeout)
    seconds = time.monotonic() - started
    (folder / "tune.out").write_text(result.stdout)
    (folder / "tune.err").write_text(result.stderr)
    report: dict[str, Any] = {}
    if (folder / "report.json").is_file():
        report = json.loads((folder / "report.json").read_text())
        tune_id = str(report.get("tune_id") or report.get("id") or "")
        journal = DATA / "tunes" / tune_id / "journal.jsonl"
        if tune_id and journal.is_file():
            (folder / "journal.jsonl").write_text(journal.read_text())
    record(
        "tune",
        label=arguments.label,
        exit_code=result.returncode,
        wall_s=round(seconds, 1),
        winners=report.get("winners"),
        stderr_tail=result.stderr.strip()[-1500:],
    )
    return result.returncode == 0 and bool(report)


def _number(text: str, names: tuple[str, ...]) -> float:
    """The sum of every sample of these metric names in a Prometheus page."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(names):
            try:
                total += float(line.rsplit(" ", 1)[-1])
            except ValueError:
                continue
    return total


def _engine_counters(instance: dict[str, Any]) -> dict[str, float] | None:
    """A running engine's finished and running requests, from its own /metrics; None: no answer."""
    url = f"http://{instance.get('host') or '127.0.0.1'}:{instance.get('port')}/metrics"
    try:
        text = httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return None
    return {
        "finished": _number(text, FINISHED_NAMES),
        "running": _number(text, RUNNING_NAMES),
        "waiting": _number(text, WAITING_NAMES),
    }


class Sampler:
    """Every ``every_s``: the deployment's replicas, instance states and engine counters."""

    def __init__(self, name: str, out: Path, every_s: float = 1.0) -> None:
        self.name = name
        self.out = out
        self.every_s = every_s
        self.origin = time.monotonic()
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        auth = admin_auth()
        with open(self.out, "a") as timeline:
            while not self._stop.is_set():
                sample = self.sample(auth)
                self.samples.append(sample)
                timeline.write(json.dumps(sample) + "\n")
                timeline.flush()
                self._stop.wait(self.every_s)

    def sample(self, auth: tuple[str, str]) -> dict[str, Any]:
        at = round(time.monotonic() - self.origin, 2)
        try:
            found = httpx.get(f"{SERVER}/api/v1/deployments/{self.name}", auth=auth, timeout=5).json()
            scaling = httpx.get(f"{SERVER}/api/v1/deployments/{self.name}/autoscale", auth=auth, timeout=5)
            view = scaling.json()
        except (httpx.HTTPError, ValueError) as error:
            return {"t_s": at, "error": f"{type(error).__name__}: {error}"[:200]}
        instances = []
        for instance in found.get("instances", []):
            row = {"id": instance.get("id"), "state": instance.get("state")}
            if instance.get("state") == "running":
                row["engine"] = _engine_counters(instance)
            instances.append(row)
        last = view.get("last") or {}
        return {
            "t_s": at,
            "desired": view.get("desired_replicas"),
            "running": view.get("running_replicas"),
            "instances": instances,
            "rule": last.get("reason") or last.get("decision") or last.get("hold"),
        }


def scale_up_times(samples: list[dict[str, Any]], load_started_s: float) -> dict[str, Any]:
    """From the samples, in seconds from the load's start: when the first replica first had
    requests waiting (the overload), when the autoscaler asked for more replicas, when a new
    instance first ran and when it first served a request; and the same from the overload."""
    first = next((s for s in samples if "desired" in s), None)
    if first is None:
        return {}
    initial = {row["id"] for row in first["instances"]}
    base_desired = first["desired"]
    overload = asked = running = served = None
    for sample in samples:
        if "desired" not in sample:
            continue
        if asked is None and (sample["desired"] or 0) > base_desired:
            asked = sample["t_s"]
        for row in sample["instances"]:
            engine = row.get("engine") or {}
            if row["id"] in initial:
                if overload is None and sample["t_s"] >= load_started_s and engine.get("waiting", 0) > 0:
                    overload = sample["t_s"]
                continue
            if row.get("state") != "running":
                continue
            running = sample["t_s"] if running is None else running
            if served is None and (engine.get("finished", 0) > 0 or engine.get("running", 0) > 0):
                served = sample["t_s"]

    def since(value: float | None, origin: float | None) -> float | None:
        return None if value is None or origin is None else round(value - origin, 1)

    return {
        "overload_s": since(overload, load_started_s),
        "asked_s": since(asked, load_started_s),
        "new_replica_running_s": since(running, load_started_s),
        "new_replica_serving_s": since(served, load_started_s),
        "asked_after_overload_s": since(asked, overload),
        "serving_after_overload_s": since(served, overload),
        "max_running": max((s.get("running") or 0) for s in samples if "desired" in s),
    }


def replica_steps(samples: list[dict[str, Any]], load_started_s: float) -> list[dict[str, Any]]:
    """The replica counts over time, one row per change (seconds from the load's start)."""
    rows: list[dict[str, Any]] = []
    for sample in samples:
        if "desired" not in sample:
            continue
        pair = (sample["desired"], sample["running"])
        if not rows or (rows[-1]["desired"], rows[-1]["running"]) != pair:
            rows.append(
                {"t_s": round(sample["t_s"] - load_started_s, 1), "desired": pair[0], "running": pair[1]}
            )
    return rows


def step_autoscale(arguments: argparse.Namespace) -> bool:
    """Deploy by memory, set autoscale, load it through the gateway, then leave it idle."""
    folder = RESULTS / arguments.name
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deployed = modelyard(*deploy_arguments(arguments), timeout=arguments.timeout + 60)
    (folder / "deploy.out").write_text(deployed.stdout + "\n--- stderr ---\n" + deployed.stderr)
    deploy_s = time.monotonic() - started
    if deployed.returncode != 0 or running_instance(arguments.name) is None:
        save_deployment_files(arguments.name, folder)
        record("autoscale", name=arguments.name, error="the first replica did not run",
               stderr_tail=deployed.stderr.strip()[-1500:])  # fmt: skip
        return False
    setting = {
        "min": arguments.min,
        "max": arguments.max,
        "target": {"metric": arguments.metric, "value": arguments.target},
        "stabilisation_s": arguments.stabilisation_s,
        "scale_down_stabilisation_s": arguments.scale_down_stabilisation_s,
        "cooldown_s": arguments.cooldown_s,
    }
    patched = httpx.patch(
        f"{SERVER}/api/v1/deployments/{arguments.name}",
        json={"autoscale": setting},
        auth=admin_auth(),
        timeout=30,
    )
    (folder / "autoscale-set.json").write_text(patched.text)
    if patched.status_code != 200:
        error = f"PATCH autoscale: {patched.status_code} {patched.text[:300]}"
        record("autoscale", name=arguments.name, error=error)
        return False
    sampler = Sampler(arguments.name, folder / "timeline.jsonl")
    sampler.start()
    time.sleep(2)  # a reading of the quiet deployment before the load
    out = folder / "bench-load"
    command = bench_arguments(
        f"{SERVER}/v1", arguments.name, f"{arguments.name} under load", out, None,
        concurrency=str(arguments.concurrency), duration_s=arguments.load_s,
    )  # fmt: skip
    load_started = time.monotonic() - sampler.origin
    bench = modelyard(*command, "--engine", "vllm", timeout=arguments.load_s + 300, env=bench_environment())
    load_ended = time.monotonic() - sampler.origin
    (folder / "bench.stderr").write_text(bench.stderr)
    time.sleep(arguments.idle_s)
    sampler.stop()
    view = httpx.get(f"{SERVER}/api/v1/deployments/{arguments.name}/autoscale", auth=admin_auth(), timeout=10)
    (folder / "autoscale.json").write_text(view.text)
    save_deployment_files(arguments.name, folder)
    events = view.json().get("events", []) if view.status_code == 200 else []
    times = scale_up_times(sampler.samples, load_started)
    record(
        "autoscale",
        name=arguments.name,
        deploy_s=round(deploy_s, 1),
        setting=setting,
        concurrency=arguments.concurrency,
        load_s=round(load_ended - load_started, 1),
        bench_exit_code=bench.returncode,
        table=summarize(out / "result.json"),
        events=events,
        replicas=replica_steps(sampler.samples, load_started),
        **times,
    )
    return bench.returncode == 0 and times.get("new_replica_serving_s") is not None


def add_steps(steps: Any) -> None:
    """Register this module's steps on ``field_run.py``'s subcommand parser."""
    tune = steps.add_parser("tune", help="modelyard tune on the field model (arguments after --)")
    tune.add_argument("label")
    tune.add_argument("--timeout", type=float, default=3600.0)
    tune.add_argument("tune_args", nargs=argparse.REMAINDER)
    tune.set_defaults(run=step_tune)
    scale = steps.add_parser("autoscale", help="a deployment autoscaled under the bench's load")
    scale.add_argument("name")
    scale.add_argument("--backend", default="vllm")
    scale.add_argument("--version", default="0.25.0")
    scale.add_argument("--args", default="")
    scale.add_argument("--env", action="append")
    scale.add_argument("--gpus", type=int, default=1)
    scale.add_argument("--gpu-ids", default=None)
    scale.add_argument("--gpu-memory", default="auto")
    scale.add_argument("--skip-verification", action="store_true")
    scale.add_argument("--timeout", type=float, default=420.0)
    scale.add_argument("--min", type=int, default=1)
    scale.add_argument("--max", type=int, default=2)
    scale.add_argument("--metric", default="waiting_per_replica")
    scale.add_argument("--target", type=float, default=2.0)
    scale.add_argument("--stabilisation-s", type=float, default=10.0)
    scale.add_argument("--scale-down-stabilisation-s", type=float, default=20.0)
    scale.add_argument("--cooldown-s", type=float, default=30.0)
    scale.add_argument("--concurrency", type=int, default=64)
    scale.add_argument("--load-s", type=float, default=150.0)
    scale.add_argument("--idle-s", type=float, default=60.0)
    scale.set_defaults(run=step_autoscale)
