"""The field run's steps, each one a subcommand, each doing its work through modelyard's own CLI.

``scripts/field/h200.sh`` calls these on the GPU machine; they also run on any Linux host with
a GPU and the engines installed. Every step appends what it saw to ``RESULTS/steps.jsonl`` (one
JSON object per step: what ran, how long it took, what came back) and keeps the raw outputs
(engine logs, ``ps --json``, benchmark results) under ``RESULTS/<step>/``, so that a window that
ends mid-way still leaves evidence. A failing step is recorded and the next one still runs.

    python3 scripts/field/field_run.py serve --model-dir /tmp/field/qwen3-field
    python3 scripts/field/field_run.py deploy vllm-1 --backend vllm --version 0.25.0 --args "..."
    python3 scripts/field/field_run.py bench vllm-1
    python3 scripts/field/field_run.py kill-during-bench vllm-1
    python3 scripts/field/field_run.py kv-truth vllm-kv-a --backend vllm --version 0.25.0 --args "..."

Environment: ``FIELD_RESULTS`` (default /tmp/field/results), ``FIELD_DATA`` (modelyard's data
directory, default /tmp/field/data), ``FIELD_PORT`` (default 8080). The exit status is 1 when the
step did not pass (a deployment that did not run, a benchmark that failed, a removal that did not
finish, a deliberately wrong deployment that was not refused), so that a phase can say whether all
of its steps passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from field_common import (
    DATA,
    KEY_FILE,
    MODEL_DIR_FILE,
    MODEL_NAME,
    PORT,
    RESULTS,
    SERVER,
    SGLANG_KV_LINE,
    VLLM_KV_LINE,
    admin_auth,
    api_key,
    bench_arguments,
    bench_environment,
    bench_target,
    cli_environment,
    deploy_arguments,
    deployment,
    engine_busy,
    engine_host,
    engine_metrics_url,
    local_gpu_spec,
    model_dir,
    modelyard,
    record,
    running_instance,
    save_deployment_files,
    summarize,
    wait_for,
)
from field_saturation import add_steps as add_saturation_steps
from field_share import add_steps
from field_tune import add_steps as add_tune_steps

# -- steps ------------------------------------------------------------------------------------------


def step_serve(arguments: argparse.Namespace) -> bool:
    """Start ``modelyard serve`` (its own session, so it outlives this call), make a key, add the model."""
    DATA.mkdir(parents=True, exist_ok=True)
    MODEL_DIR_FILE.write_text(arguments.model_dir)
    # A second server (another FIELD_PORT) keeps its files apart from the first's.
    folder = RESULTS if PORT == 8080 else RESULTS / f"server-{PORT}"
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "serve.log", "a")  # noqa: SIM115 - the server's stdout for its lifetime
    started = time.monotonic()
    command = [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo"]
    command += ["--data-dir", str(DATA), "--port", str(PORT), "--host", "127.0.0.1"]
    command += arguments.serve_arg or []  # e.g. --cluster (docs/clusters.md)
    server = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=cli_environment(), start_new_session=True
    )
    (DATA / "serve.pid").write_text(str(server.pid))

    def answers() -> bool:
        if server.poll() is not None:  # it exited: its log says why (no use waiting)
            raise RuntimeError(f"modelyard serve exited with status {server.returncode}: see {log.name}")
        try:
            return httpx.get(f"{SERVER}/api/v1/system", auth=admin_auth(), timeout=2).status_code == 200
        except (httpx.HTTPError, OSError):
            return False

    ready_s = wait_for("modelyard serve answering", answers, 120)
    record("serve", ready_s=round(ready_s, 2), pid=server.pid)
    key = modelyard("keys", "create", "field", "--json")
    KEY_FILE.write_text(json.loads(key.stdout)["key"])
    gpus_text = modelyard("gpus")
    gpus_json = modelyard("gpus", "--json")
    (folder / "gpus.txt").write_text(gpus_text.stdout)
    (folder / "gpus.json").write_text(gpus_json.stdout)
    api = httpx.get(f"{SERVER}/api/v1/gpus", auth=admin_auth(), timeout=10)
    (folder / "gpus-api.json").write_text(api.text)
    added = modelyard("models", "add", arguments.model_dir, "--name", MODEL_NAME, "--json")
    (folder / "model.json").write_text(added.stdout or added.stderr)
    record(
        "serve-ready",
        seconds_since_start=round(time.monotonic() - started, 2),
        gpus=gpus_text.stdout,
        model_added=added.returncode == 0,
    )
    return added.returncode == 0


def step_deploy(arguments: argparse.Namespace) -> bool:
    """Deploy through the normal path (doctor, start, readiness, verification) and time it.

    ``--reuse``: a deployment of that name that already runs (an earlier phase's) passes as it is.
    """
    folder = RESULTS / arguments.name
    if arguments.reuse and running_instance(arguments.name) is not None:
        record("deploy", name=arguments.name, reused=True)
        return True
    started = time.monotonic()
    result = modelyard(*deploy_arguments(arguments), timeout=arguments.timeout + 60)
    seconds = time.monotonic() - started
    save_deployment_files(arguments.name, folder)
    (folder / "deploy.out").write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    instance = running_instance(arguments.name)
    record(
        "deploy",
        name=arguments.name,
        exit_code=result.returncode,
        seconds_to_running=round(seconds, 1) if instance else None,
        port=instance.get("port") if instance else None,
        stderr_tail=result.stderr.strip()[-1500:],
    )
    return result.returncode == 0 and instance is not None


def step_bench(arguments: argparse.Namespace) -> bool:
    """The same sweep through the gateway and directly at the engine's port."""
    instance = running_instance(arguments.name)
    if instance is None:
        record("bench", name=arguments.name, error="no running instance")
        return False
    gpus = list(instance.get("gpu_ids") or [])
    backend = str((deployment(arguments.name) or {}).get("backend") or "")
    metrics_url = engine_metrics_url(instance, backend)
    # transformers serve 5.17 lists no model in /v1/models, so the bench could not tell its
    # engine (nor fix its output lengths) directly: name the engine for both paths.
    engine = ["--engine", backend] if backend else []
    paths = arguments.paths.split(",")
    if not set(paths) <= {"gateway", "direct"}:
        raise SystemExit(
            f"--paths takes gateway and direct (repeat them to alternate), got {arguments.paths!r}"
        )
    # --repeat-from N: this call's passes are the Nth and later (seeds and folders as if the
    # earlier passes had run in this call), so that two deployments' passes can be alternated.
    passes = {path: arguments.repeat_from - 1 for path in ("gateway", "direct")}
    failed = 0
    for path in paths:
        passes[path] += 1
        repeat = passes[path]
        out = RESULTS / arguments.name / f"bench-{path}{arguments.suffix}{f'-{repeat}' if repeat > 1 else ''}"
        # Every pass has prompts of its own: the same ones would hit the prefix cache an earlier
        # pass filled (the H200 run of 2026-11-30 did that). Every engine gets the same set for
        # the same path and pass, so engines still compare on identical prompts.
        seed = (7 if path == "gateway" else 8) + 2 * (repeat - 1)
        base_url, served, environment = bench_target(arguments.name, instance, backend, path)
        label = f"{arguments.name} {'via gateway' if path == 'gateway' else 'direct'}"
        command = bench_arguments(base_url, served, label, out, metrics_url, seed=seed, gpu_ids=gpus)
        started = time.monotonic()
        result = modelyard(*command, *engine, timeout=900, env=environment)
        (out / "bench.stderr").parent.mkdir(parents=True, exist_ok=True)
        (out / "bench.stderr").write_text(result.stderr)
        record(
            "bench",
            name=arguments.name,
            path=path,
            repeat=repeat,
            exit_code=result.returncode,
            seconds=round(time.monotonic() - started, 1),
            table=summarize(out / "result.json"),
        )
        failed += result.returncode != 0
    return failed == 0


def step_gateway_cost(arguments: argparse.Namespace) -> None:
    """The gateway's cost, side by side: two clients start together, one through the gateway and
    one at the engine's port, each with half the streams, so the engine batches both halves
    together and any difference between them is the gateway's (run one after the other, the two
    paths also differ by whatever the engine did between the runs: 7 % on the H200 before)."""
    instance = running_instance(arguments.name)
    if instance is None:
        record("gateway-cost", name=arguments.name, error="no running instance")
        return
    gpus = list(instance.get("gpu_ids") or [])
    backend = str((deployment(arguments.name) or {}).get("backend") or "")
    metrics_url = engine_metrics_url(instance, backend)
    duration_s = float(os.environ.get("FIELD_SIDE_S", "25"))
    lead_s = float(os.environ.get("FIELD_SIDE_LEAD_S", "15"))  # time to build the prompts
    per_path = [part for part in os.environ.get("FIELD_SIDE_CONCURRENCY", "1,8,32,128").split(",") if part]
    # FIELD_SIDE_PATHS=direct,direct (or gateway,gateway) is the control: two identical clients,
    # whose ratio shows how far the method itself is from 1.
    paths = os.environ.get("FIELD_SIDE_PATHS", "gateway,direct").split(",")
    if len(paths) != 2 or not set(paths) <= {"gateway", "direct"}:
        raise SystemExit(f"FIELD_SIDE_PATHS takes two of gateway and direct, got {paths}")
    for position, streams in enumerate(per_path):
        start_at = time.time() + lead_s
        clients: dict[str, tuple[subprocess.Popen[str], Path]] = {}
        for offset, path in enumerate(paths):
            tag = path if offset == 0 or paths[0] != paths[1] else f"{path}-2"
            out = RESULTS / arguments.name / f"side-{paths[0]}-{paths[1]}-c{streams}{arguments.suffix}-{tag}"
            base_url, served, environment = bench_target(arguments.name, instance, backend, path)
            command = bench_arguments(
                base_url,
                served,
                f"{arguments.name} {path}, side by side",
                out,
                metrics_url,
                seed=100 + 2 * position + offset,  # prompts of its own: no prefix-cache hits
                gpu_ids=gpus,
                concurrency=streams,
                duration_s=duration_s,
            )
            command += ["--start-at", f"{start_at:.3f}", *(["--engine", backend] if backend else [])]
            out.mkdir(parents=True, exist_ok=True)
            print(f"$ modelyard {shlex.join(command)}", flush=True)
            client = subprocess.Popen(
                [sys.executable, "-m", "modelyard.cli.main", *command],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=environment,
            )
            clients[tag] = (client, out)
        exits: dict[str, int] = {}
        for tag, (client, out) in clients.items():
            _, errors = client.communicate(timeout=lead_s + duration_s + 600)
            (out / "bench.stderr").write_text(errors)
            exits[tag] = client.returncode
        record(
            "gateway-cost",
            name=arguments.name,
            streams_per_path=int(streams),
            folders=[out.name for _, out in clients.values()],
            start_at=round(start_at, 3),
            exit_codes=exits,
            tables={tag: summarize(out / "result.json") for tag, (_, out) in clients.items()},
        )


def step_kill_during_bench(arguments: argparse.Namespace) -> None:
    """SIGKILL the engine in the middle of a gateway benchmark; time until it serves again."""
    before = running_instance(arguments.name)
    if before is None:
        record("kill", name=arguments.name, error="no running instance")
        return
    out = RESULTS / arguments.name / "bench-kill"
    command = bench_arguments(f"{SERVER}/v1", arguments.name, f"{arguments.name} killed mid-run", out, None)
    command[command.index("--concurrency") + 1] = "32"
    command[command.index("--duration-s") + 1] = str(arguments.bench_s)
    bench = subprocess.Popen(
        [sys.executable, "-m", "modelyard.cli.main", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=bench_environment(),
    )
    # Building the prompt set takes a while: kill only once requests are in the engine.
    metrics_url = f"http://{engine_host(before)}:{before['port']}/metrics"
    traffic_s = wait_for("the benchmark's requests in the engine", lambda: engine_busy(metrics_url), 300)
    print(f"requests reached the engine after {traffic_s:.1f} s", flush=True)
    time.sleep(arguments.kill_after_s)
    killed_at = time.monotonic()
    os.kill(int(before["pid"]), signal.SIGKILL)
    print(f"SIGKILL sent to engine pid {before['pid']}", flush=True)

    def serving_again() -> bool:
        after = running_instance(arguments.name)
        return after is not None and after["pid"] != before["pid"]

    try:
        recovered_s: float | None = wait_for("engine running again", serving_again, 400, every_s=0.25)
    except TimeoutError:
        recovered_s = None
    answer_s = None
    if recovered_s is not None:
        reply = httpx.post(
            f"{SERVER}/v1/chat/completions",
            headers={"Authorization": f"Bearer {api_key()}"},
            json={"model": arguments.name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
            timeout=60,
        )
        answer_s = time.monotonic() - killed_at
        (RESULTS / arguments.name / "after-kill-chat.json").write_text(reply.text)
    _, stderr = bench.communicate(timeout=900)
    (out / "bench.stderr").parent.mkdir(parents=True, exist_ok=True)
    (out / "bench.stderr").write_text(stderr)
    save_deployment_files(arguments.name, RESULTS / arguments.name / "after-kill")
    errors: dict[str, int] = {}
    requests_path = out / "requests.jsonl"
    if requests_path.exists():
        for line in requests_path.read_text().splitlines():
            error = json.loads(line).get("error")
            if error:
                errors[str(error)[:160]] = errors.get(str(error)[:160], 0) + 1
    record(
        "kill",
        name=arguments.name,
        killed_pid=before["pid"],
        seconds_to_running=round(recovered_s, 2) if recovered_s is not None else None,
        seconds_to_first_answer=round(answer_s, 2) if answer_s is not None else None,
        bench_exit_code=bench.returncode,
        client_errors=errors,
        table=summarize(out / "result.json"),
    )


def step_kv_truth(arguments: argparse.Namespace) -> bool:
    """What ``modelyard estimate`` predicts for the KV cache against what the engine logs."""
    engine_args = shlex.split(arguments.args or "")
    estimate = modelyard(
        "estimate",
        model_dir(),
        "--gpus",
        arguments.estimate_gpus or local_gpu_spec(),
        "--backend",
        arguments.backend,
        "--engine-version",
        arguments.version,
        *[item for value in engine_args for item in ("--args", value)],
        "--json",
        timeout=120,
    )
    folder = RESULTS / arguments.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "estimate.json").write_text(estimate.stdout or estimate.stderr)
    predicted = None
    if estimate.returncode == 0:
        predicted = json.loads(estimate.stdout)["plan_on_total"]["kv_cache_tokens"]
    if not arguments.reuse:
        step_deploy(arguments)
    logs = modelyard("logs", arguments.name, timeout=60).stdout
    (folder / "engine.log").write_text(logs)
    pattern = VLLM_KV_LINE if arguments.backend == "vllm" else SGLANG_KV_LINE
    logged = [int(match.replace(",", "")) for match in pattern.findall(logs)]
    actual = logged[-1] if logged else None
    error_pct = round(100.0 * (predicted - actual) / actual, 2) if predicted and actual else None
    record(
        "kv-truth",
        name=arguments.name,
        backend=arguments.backend,
        args=arguments.args,
        predicted_tokens=predicted,
        logged_tokens=actual,
        error_pct=error_pct,
    )
    if arguments.remove:
        modelyard("rm", arguments.name, "--wait", timeout=300)
    return predicted is not None and actual is not None


def step_remove(arguments: argparse.Namespace) -> bool:
    save_deployment_files(arguments.name, RESULTS / arguments.name / "final")
    started = time.monotonic()
    result = modelyard("rm", arguments.name, "--wait", timeout=300)
    record(
        "remove",
        name=arguments.name,
        exit_code=result.returncode,
        seconds=round(time.monotonic() - started, 1),
    )
    return result.returncode == 0


def step_expect_refusal(arguments: argparse.Namespace) -> bool:
    """A deployment that should be refused (or fail verification) with the fix named."""
    folder = RESULTS / arguments.name
    folder.mkdir(parents=True, exist_ok=True)
    result = modelyard(*deploy_arguments(arguments), timeout=arguments.timeout + 60)
    (folder / "deploy.out").write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    stored = deployment(arguments.name)
    if stored is not None:
        save_deployment_files(arguments.name, folder)
    record(
        "expect-refusal",
        name=arguments.name,
        args=arguments.args,
        exit_code=result.returncode,
        stored=stored is not None,
        message=(result.stderr or result.stdout).strip()[-2500:],
        verification=[
            {key: check.get(key) for key in ("check_id", "status", "message")}
            for instance in (stored or {}).get("instances", [])
            for check in instance.get("verification") or []
        ],
    )
    if stored is not None:
        modelyard("rm", arguments.name, "--wait", timeout=300)
    # Passed: refused (or kept out of rotation by verification), with exit status 1 and a reason.
    return result.returncode != 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True)
    serve = steps.add_parser("serve")
    serve.add_argument("--model-dir", required=True)
    serve.add_argument("--serve-arg", action="append", help="passed to modelyard serve (repeatable)")
    serve.set_defaults(run=step_serve)
    for name, function in (
        ("deploy", step_deploy),
        ("kv-truth", step_kv_truth),
        ("expect-refusal", step_expect_refusal),
    ):
        sub = steps.add_parser(name)
        sub.add_argument("name")
        sub.add_argument("--backend", required=True)
        sub.add_argument("--version", default="")
        sub.add_argument("--args", default="")
        sub.add_argument("--env", action="append")
        sub.add_argument("--gpus", type=int)
        sub.add_argument("--gpu-ids", default="")
        sub.add_argument("--replicas", type=int)
        sub.add_argument("--gpu-memory", help="auto or a size: placed by memory (the knob from the estimate)")
        sub.add_argument("--skip-verification", action="store_true")
        sub.add_argument("--timeout", type=float, default=420.0)
        sub.add_argument("--estimate-gpus", default=None, help="default: this machine's GPU (nvidia-smi)")
        sub.add_argument(
            "--reuse", action="store_true", help="deploy, kv-truth: take a deployment that already runs"
        )
        sub.add_argument("--remove", action="store_true", help="kv-truth: remove the deployment afterwards")
        sub.set_defaults(run=function)
    bench = steps.add_parser("bench")
    bench.add_argument("name")
    bench.add_argument(
        "--paths",
        default="gateway,direct",
        help="in this order; repeat to alternate, e.g. gateway,direct,direct,gateway",
    )
    bench.add_argument("--suffix", default="", help="appended to the output folders' names")
    bench.add_argument("--repeat-from", type=int, default=1, help="number this call's first pass N")
    bench.set_defaults(run=step_bench)
    side = steps.add_parser("gateway-cost", help="gateway and direct side by side (FIELD_SIDE_*)")
    side.add_argument("name")
    side.add_argument("--suffix", default="", help="in the output folders' names (a repeat: -r2)")
    side.set_defaults(run=step_gateway_cost)
    kill = steps.add_parser("kill-during-bench")
    kill.add_argument("name")
    kill.add_argument("--bench-s", type=float, default=180.0)
    kill.add_argument("--kill-after-s", type=float, default=15.0)
    kill.set_defaults(run=step_kill_during_bench)
    remove = steps.add_parser("remove")
    remove.add_argument("name")
    remove.set_defaults(run=step_remove)
    add_steps(steps)
    add_saturation_steps(steps)
    add_tune_steps(steps)
    arguments = parser.parse_args()
    try:
        passed = arguments.run(arguments)
    except Exception as error:  # a field step records its failure and lets the next step run
        record(
            arguments.step, name=getattr(arguments, "name", None), error=f"{type(error).__name__}: {error}"
        )
        raise SystemExit(1) from error
    if passed is False:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
