"""How soon ``modelyard serve`` answers: the port, ``/api/v1/system`` and the demo's first chat answer.

Runs ``modelyard serve`` as a user would, on a fresh data directory and a free port, and times
from the moment the process is started:

- **bind**: the port accepts a TCP connection;
- **system**: ``GET /api/v1/system`` answers 200 (with the CLI token the server writes);
- **first answer**: ``POST /v1/chat/completions`` for ``demo`` answers 200 with text (polled
  every 0.25 s with a key made as soon as the API answers; the 503 messages seen meanwhile, e.g.
  "demo is being prepared (42%)", are counted).

Three runs: **cold** (fresh data directory: the demo model is converted), **warm** (the same data
directory after a graceful stop: nothing to convert, the engine starts again), and the
**baseline**, measured in the same run: the bare engine (``transformers serve`` on the prepared
demo directory, the command the platform runs) from its start to its first answer. The ratios
warm / baseline and cold / baseline say what modelyard adds to the engine's own start. The
targets: bind and system <= 3 s, first answer <= 60 s cold (under load) and <= 15 s warm. The
load average is printed before and after (this machine is shared: "under load" is what it was).

    python benchmarks/first_answer.py
    python benchmarks/first_answer.py --json /tmp/first-answer.json

Takes one to three minutes; never run as a test. Needs the engine extra and the demo package.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

TARGET_BIND_S = 3.0
TARGET_COLD_S = 60.0
TARGET_WARM_S = 15.0
POLL_S = 0.25
GIVE_UP_S = 600.0
QUESTION = {"role": "user", "content": "What is the capital of France?"}


@dataclass
class Timings:
    label: str
    bind_s: float | None = None
    system_s: float | None = None
    first_answer_s: float | None = None
    answer: str = ""
    progress_messages: list[str] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _chat(client: httpx.Client, url: str, model: str, headers: dict[str, str]) -> httpx.Response | None:
    body = {"model": model, "messages": [QUESTION], "max_tokens": 16}
    try:
        return client.post(url, json=body, headers=headers, timeout=120)
    except httpx.HTTPError:
        return None


def _wait_for_answer(
    client: httpx.Client, url: str, model: str, headers: dict[str, str], started: float, timings: Timings
) -> None:
    while time.monotonic() - started < GIVE_UP_S:
        response = _chat(client, url, model, headers)
        if response is not None and response.status_code == 200:
            timings.first_answer_s = time.monotonic() - started
            timings.answer = response.json()["choices"][0]["message"]["content"] or ""
            return
        if response is not None and response.status_code == 503:
            message = response.json()["error"]["message"]
            if not timings.progress_messages or timings.progress_messages[-1] != message:
                timings.progress_messages.append(message)
        time.sleep(POLL_S)
    raise SystemExit(f"{timings.label}: no answer within {GIVE_UP_S:.0f} s")


def _admin_headers(data_dir: Path) -> dict[str, str]:
    """The CLI token when the server wrote one, else the admin password (servers before the token)."""
    token_file, password_file = data_dir / "cli-token", data_dir / "admin-password"
    if token_file.is_file():
        return {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    if password_file.is_file():
        basic = base64.b64encode(f"admin:{password_file.read_text().strip()}".encode()).decode()
        return {"Authorization": f"Basic {basic}"}
    return {}


def time_serve(label: str, data_dir: Path, log_path: Path) -> Timings:
    """Start ``modelyard serve`` on ``data_dir``, time it to its first answer, stop it gracefully."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    timings = Timings(label)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    with open(log_path, "w") as log:
        started = time.monotonic()
        command = [sys.executable, "-m", "modelyard.cli.main", "serve", "--data-dir", str(data_dir)]
        server = subprocess.Popen(
            [*command, "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    try:
        with httpx.Client() as client:
            while timings.bind_s is None:
                if server.poll() is not None:
                    raise SystemExit(f"{label}: the server exited ({server.returncode}); see {log_path}")
                if _accepts(port):
                    timings.bind_s = time.monotonic() - started
                else:
                    time.sleep(0.02)
            while timings.system_s is None:
                admin = _admin_headers(data_dir)
                try:
                    response = client.get(f"{url}/api/v1/system", headers=admin, timeout=30)
                    if response.status_code == 200:
                        timings.system_s = time.monotonic() - started
                except httpx.HTTPError:
                    pass
                if timings.system_s is None:
                    time.sleep(0.02)
            key = client.post(
                f"{url}/api/v1/keys", json={"name": f"bench-{time.time_ns()}"}, headers=admin, timeout=30
            ).json()["key"]
            gateway = f"{url}/v1/chat/completions"
            _wait_for_answer(client, gateway, "demo", {"Authorization": f"Bearer {key}"}, started, timings)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return timings


def time_bare_engine(model_dir: Path, log_path: Path) -> Timings:
    """``transformers serve`` on the prepared demo directory, as the platform launches it."""
    from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
    from modelyard.backends.render import render_launch

    port = _free_port()
    version = BackendCatalog(builtin=load_builtin_backends()).resolve_version("transformers", None)
    launch = render_launch(
        version,
        model_path=str(model_dir),
        port=port,
        worker_ip="127.0.0.1",
        model_name="demo",
        gpu_ids=[],
        backend_parameters=[],
        env={},
    )
    timings = Timings("baseline: the engine alone")
    with open(log_path, "w") as log:
        started = time.monotonic()
        engine = subprocess.Popen(
            launch.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **launch.env},
            start_new_session=True,
        )
    try:
        with httpx.Client() as client:
            engine_url = f"http://127.0.0.1:{port}/v1/chat/completions"
            _wait_for_answer(client, engine_url, str(model_dir), {}, started, timings)
    finally:
        os.killpg(engine.pid, signal.SIGTERM)
        engine.wait(timeout=60)
    return timings


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:6.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="Also write the figures to this file.")
    parser.add_argument("--keep", action="store_true", help="Keep the data directory and logs.")
    arguments = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="modelyard-first-answer-"))
    load_before = os.getloadavg()
    cold = time_serve("cold (fresh data directory)", work / "data", work / "cold.log")
    warm = time_serve("warm (same data directory, after a graceful stop)", work / "data", work / "warm.log")
    baseline = time_bare_engine(work / "data" / "models" / "smollm2-135m-instruct", work / "engine.log")
    load_after = os.getloadavg()

    cpus = os.cpu_count()
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}; {cpus} CPUs")
    print(f"{'run':52} {'bind':>8} {'system':>8} {'answer':>8}  ratio to baseline")
    for run in (cold, warm, baseline):
        ratio = (run.first_answer_s or 0) / (baseline.first_answer_s or 1)
        print(
            f"{run.label:52} {_seconds(run.bind_s):>8} {_seconds(run.system_s):>8} "
            f"{_seconds(run.first_answer_s):>8}  {ratio:.2f}"
        )
    print(f"cold: 503 messages while waiting: {cold.progress_messages}")
    print(f"answers: cold {cold.answer!r}, warm {warm.answer!r}, baseline {baseline.answer!r}")
    checks = {
        f"bind <= {TARGET_BIND_S:.0f} s (cold)": (cold.bind_s or 1e9) <= TARGET_BIND_S,
        f"system <= {TARGET_BIND_S:.0f} s (cold)": (cold.system_s or 1e9) <= TARGET_BIND_S,
        f"first answer <= {TARGET_COLD_S:.0f} s (cold)": (cold.first_answer_s or 1e9) <= TARGET_COLD_S,
        f"first answer <= {TARGET_WARM_S:.0f} s (warm)": (warm.first_answer_s or 1e9) <= TARGET_WARM_S,
    }
    for name, passed in checks.items():
        print(f"  {'met    ' if passed else 'NOT MET'}  {name}")
    if arguments.json:
        figures = {
            "load_average_before": load_before,
            "load_average_after": load_after,
            "runs": [asdict(run) for run in (cold, warm, baseline)],
            "targets_met": checks,
        }
        arguments.json.write_text(json.dumps(figures, indent=2))
    if arguments.keep:
        print(f"kept {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
