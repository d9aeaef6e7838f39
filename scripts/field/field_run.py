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
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

RESULTS = Path(os.environ.get("FIELD_RESULTS", "/tmp/field/results"))
DATA = Path(os.environ.get("FIELD_DATA", "/tmp/field/data"))
PORT = int(os.environ.get("FIELD_PORT", "8080"))
SERVER = f"http://127.0.0.1:{PORT}"
MODEL_NAME = "qwen3-field"
KEY_FILE = DATA / "field-key"
MODEL_DIR_FILE = DATA / "field-model-dir"
STARTED = time.monotonic()

# What each engine logs about its KV cache once it has sized it.
VLLM_KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
SGLANG_KV_LINE = re.compile(r"max_total_num_tokens=(\d+)")


def cli_environment() -> dict[str, str]:
    return {**os.environ, "MODELYARD_URL": SERVER, "MODELYARD_DATA_DIR": str(DATA), "NO_COLOR": "1"}


def bench_environment() -> dict[str, str]:
    """The CLI's environment with the gateway key, which never goes on a command line (logged)."""
    return {**cli_environment(), "MODELYARD_BENCH_API_KEY": api_key()}


def modelyard(
    *arguments: str, timeout: float = 900.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``modelyard ARGUMENTS`` as a user would; never raises for a non-zero exit."""
    command = [sys.executable, "-m", "modelyard.cli.main", *arguments]
    print(f"$ modelyard {shlex.join(arguments)}", flush=True)
    result = subprocess.run(
        command, capture_output=True, text=True, env=env or cli_environment(), timeout=timeout, check=False
    )
    if result.returncode != 0:
        print(f"  exit {result.returncode}: {result.stderr.strip()[-2000:]}", flush=True)
    return result


def record(step: str, **fields: Any) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    entry = {"step": step, "at_s": round(time.time(), 3), **fields}
    with open(RESULTS / "steps.jsonl", "a") as steps:
        steps.write(json.dumps(entry) + "\n")
    print(f"[{step}] " + json.dumps(fields)[:1500], flush=True)


def admin_auth() -> tuple[str, str]:
    return ("admin", (DATA / "admin-password").read_text().strip())


def api_key() -> str:
    return KEY_FILE.read_text().strip()


def model_dir() -> str:
    return MODEL_DIR_FILE.read_text().strip()


def deployment(name: str) -> dict[str, Any] | None:
    result = modelyard("ps", name, "--json", timeout=60)
    if result.returncode != 0:
        return None
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def running_instance(name: str) -> dict[str, Any] | None:
    found = deployment(name)
    for instance in (found or {}).get("instances", []):
        if instance.get("state") == "running":
            return dict(instance)
    return None


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float, every_s: float = 0.5) -> float:
    """Seconds until ``condition()`` held; raises TimeoutError naming ``what``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if condition():
            return time.monotonic() - started
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


def save_deployment_files(name: str, folder: Path) -> None:
    """``ps NAME --json`` (instances, verification, events) and the engine's log, as they are now."""
    folder.mkdir(parents=True, exist_ok=True)
    ps = modelyard("ps", name, "--json", timeout=60)
    (folder / "ps.json").write_text(ps.stdout or ps.stderr)
    logs = modelyard("logs", name, timeout=60)
    (folder / "engine.log").write_text(
        logs.stdout + ("\n--- stderr ---\n" + logs.stderr if logs.stderr else "")
    )


# -- steps ------------------------------------------------------------------------------------------


def step_serve(arguments: argparse.Namespace) -> bool:
    """Start ``modelyard serve`` (its own session, so it outlives this call), make a key, add the model."""
    DATA.mkdir(parents=True, exist_ok=True)
    MODEL_DIR_FILE.write_text(arguments.model_dir)
    log = open(RESULTS / "serve.log", "a")  # noqa: SIM115 - the server's stdout for its lifetime
    started = time.monotonic()
    command = [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo"]
    command += ["--data-dir", str(DATA), "--port", str(PORT), "--host", "127.0.0.1"]
    server = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=cli_environment(), start_new_session=True
    )
    (DATA / "serve.pid").write_text(str(server.pid))

    def answers() -> bool:
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
    (RESULTS / "gpus.txt").write_text(gpus_text.stdout)
    (RESULTS / "gpus.json").write_text(gpus_json.stdout)
    api = httpx.get(f"{SERVER}/api/v1/gpus", auth=admin_auth(), timeout=10)
    (RESULTS / "gpus-api.json").write_text(api.text)
    added = modelyard("models", "add", arguments.model_dir, "--name", MODEL_NAME, "--json")
    (RESULTS / "model.json").write_text(added.stdout or added.stderr)
    record(
        "serve-ready",
        seconds_since_start=round(time.monotonic() - started, 2),
        gpus=gpus_text.stdout,
        model_added=added.returncode == 0,
    )
    return added.returncode == 0


def deploy_arguments(arguments: argparse.Namespace) -> list[str]:
    command = ["deploy", MODEL_NAME, "--name", arguments.name, "--backend", arguments.backend]
    if arguments.version:
        command += ["--version", arguments.version]
    if arguments.args:
        command += ["--args", arguments.args]
    for pair in arguments.env or []:
        command += ["--env", pair]
    if arguments.gpu_ids:
        command += ["--gpu-ids", arguments.gpu_ids]
    elif arguments.gpus is not None:
        command += ["--gpus", str(arguments.gpus)]
    if arguments.skip_verification:
        command += ["--skip-verification"]
    return [*command, "--timeout", str(arguments.timeout), "--json"]


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


def bench_arguments(
    base_url: str,
    model: str,
    label: str,
    out: Path,
    metrics_url: str | None,
    seed: int = 7,
    gpu_ids: list[int] | None = None,
    concurrency: str | None = None,
    duration_s: float | None = None,
) -> list[str]:
    """``modelyard bench run`` for the field run; the load and its length come from FIELD_*
    unless given."""
    command = ["bench", "run", "--base-url", base_url, "--model", model, "--label", label]
    command += ["--concurrency", concurrency or os.environ.get("FIELD_CONCURRENCY", "1,16,64,256")]
    if duration_s is not None:
        command += ["--duration-s", f"{duration_s:g}", "--warmup-s", "3"]
    elif os.environ.get("FIELD_NUM_REQUESTS"):  # a fixed amount of work per point, repeated
        command += ["--num-requests", os.environ["FIELD_NUM_REQUESTS"], "--warmup-requests", "16"]
        command += ["--repeats", os.environ.get("FIELD_REPEATS", "1")]
    else:
        command += ["--duration-s", os.environ.get("FIELD_POINT_S", "12"), "--warmup-s", "3"]
    command += [
        "--input-tokens",
        "256",
        "--output-tokens",
        "128",
        "--tokenizer",
        model_dir(),
        "--seed",
        str(seed),
    ]
    command += ["--metrics-interval-s", "0.5", "--out", str(out), "--json"]
    if metrics_url:
        command += ["--metrics-url", metrics_url]
    if gpu_ids:  # the engine's GPUs only: an idle neighbour would dilute its utilization
        command += ["--gpu-ids", ",".join(str(index) for index in gpu_ids)]
    return command


def bench_target(
    name: str, instance: dict[str, Any], backend: str, path: str
) -> tuple[str, str, dict[str, str]]:
    """Where a bench on ``path`` sends (base URL), the model name it sends, and its environment
    (the gateway's key only for the gateway). transformers serve answers to its model path."""
    if path == "gateway":
        return f"{SERVER}/v1", name, bench_environment()
    served = model_dir() if backend == "transformers" else name
    return f"http://127.0.0.1:{instance['port']}/v1", served, cli_environment()


def engine_metrics_url(instance: dict[str, Any], backend: str) -> str | None:
    """The engine's own /metrics (transformers serve has none)."""
    return None if backend == "transformers" else f"http://127.0.0.1:{instance['port']}/metrics"


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
    passes: dict[str, int] = {}
    failed = 0
    for path in paths:
        passes[path] = passes.get(path, 0) + 1
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
            out = RESULTS / arguments.name / f"side-{paths[0]}-{paths[1]}-c{streams}-{tag}"
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


def summarize(result_path: Path) -> list[dict[str, Any]]:
    """Per point: load, requests, failures, output tokens/s, TTFT/TPOT/ITL medians (ms)."""
    if not result_path.exists():
        return []
    run = json.loads(result_path.read_text())
    rows = []
    for point in run.get("points", []):
        metrics = point.get("metrics", {})
        rows.append(
            {
                "load": point.get("point", {}).get("value"),
                "ok": point.get("requests_succeeded"),
                "failed": point.get("requests_failed"),
                "out_tok_s": round(point.get("output_token_throughput_per_s") or 0.0, 1),
            }
            | {
                f"{name}_p50": round(metrics[name]["median"], 2)
                for name in ("ttft_ms", "tpot_ms", "itl_ms")
                if (metrics.get(name) or {}).get("median") is not None
            }
        )
    return rows


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
    metrics_url = f"http://127.0.0.1:{before['port']}/metrics"
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


def engine_busy(metrics_url: str) -> bool:
    """True once vLLM's or SGLang's /metrics counts a running request."""
    try:
        text = httpx.get(metrics_url, timeout=2).text
    except httpx.HTTPError:
        return False
    names = ("vllm:num_requests_running", "sglang:num_running_reqs")
    return any(line.startswith(names) and float(line.rsplit(" ", 1)[-1]) > 0 for line in text.splitlines())


def step_kv_truth(arguments: argparse.Namespace) -> bool:
    """What ``modelyard estimate`` predicts for the KV cache against what the engine logs."""
    engine_args = shlex.split(arguments.args or "")
    estimate = modelyard(
        "estimate",
        model_dir(),
        "--gpus",
        arguments.estimate_gpus,
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
        sub.add_argument("--skip-verification", action="store_true")
        sub.add_argument("--timeout", type=float, default=420.0)
        sub.add_argument("--estimate-gpus", default="1xH200")
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
    bench.set_defaults(run=step_bench)
    side = steps.add_parser("gateway-cost", help="gateway and direct side by side (FIELD_SIDE_*)")
    side.add_argument("name")
    side.set_defaults(run=step_gateway_cost)
    kill = steps.add_parser("kill-during-bench")
    kill.add_argument("name")
    kill.add_argument("--bench-s", type=float, default=180.0)
    kill.add_argument("--kill-after-s", type=float, default=15.0)
    kill.set_defaults(run=step_kill_during_bench)
    remove = steps.add_parser("remove")
    remove.add_argument("name")
    remove.set_defaults(run=step_remove)
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
