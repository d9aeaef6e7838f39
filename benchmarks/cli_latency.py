"""How long ``modelyard`` takes per command, against ``python -c pass`` measured in the same run.

Each command runs ``--runs`` times (default 10) in a fresh process, as a user's shell would start
it (``python -m modelyard.cli.main ...``), interleaved with the baseline so that both see the
same machine load; the median wall time of each is printed with its ratio to the baseline's
median. The commands that talk to a server (``ps``, ``keys list``) run against a real
``modelyard serve --no-demo`` on a temporary data directory, as the CLI on the server's host
does (with the data directory's CLI token). The targets: 0.3 s for a command that does not talk
to a server, 0.4 s for ``ps`` and ``keys list``.

    python benchmarks/cli_latency.py
    python benchmarks/cli_latency.py --runs 20 --json /tmp/cli-latency.json
    python benchmarks/cli_latency.py --source /path/to/other/checkout/src   # another version's code

Takes about a minute; never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

TARGET_LOCAL_S = 0.3
TARGET_SERVER_S = 0.4
START_SECONDS = 120.0

# A model directory the estimator can read (config.json and a safetensors header): Qwen3-0.6B's shape.
QWEN3_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}


def _write_model_directory(path: Path) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(QWEN3_CONFIG))
    save_file({"model.norm.weight": np.zeros(1024, dtype=np.float16)}, str(path / "model.safetensors"))
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _time_once(command: list[str], environment: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--source", type=Path, help="Put this src/ first on PYTHONPATH (another version).")
    parser.add_argument("--json", type=Path, help="Also write the figures to this file.")
    arguments = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="modelyard-cli-latency-"))
    environment = {**os.environ, "NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}
    if arguments.source:
        environment["PYTHONPATH"] = (
            f"{arguments.source.resolve()}{os.pathsep}{environment.get('PYTHONPATH', '')}"
        )
    data_dir, port = work / "data", _free_port()
    environment.update(MODELYARD_URL=f"http://127.0.0.1:{port}", MODELYARD_DATA_DIR=str(data_dir))
    environment.pop("MODELYARD_PASSWORD", None)
    model_dir = _write_model_directory(work / "qwen3-shape")

    cli = [sys.executable, "-m", "modelyard.cli.main"]
    local = {
        "--version": [*cli, "--version"],
        "--help": [*cli, "--help"],
        "keys --help": [*cli, "keys", "--help"],
        "bench --help": [*cli, "bench", "--help"],
        "estimate DIR": [*cli, "estimate", str(model_dir), "--gpus", "1x24GB", "--backend", "vllm"],
    }
    remote = {"ps": [*cli, "ps"], "keys list": [*cli, "keys", "list"]}

    with open(work / "serve.log", "w") as log:
        server = subprocess.Popen(
            [*cli, "serve", "--no-demo", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the server exited: {(work / 'serve.log').read_text()[-1000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/v1/system", timeout=2).status_code in (200, 401):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not answer")
            time.sleep(0.1)
        commands = {"python -c pass": [sys.executable, "-c", "pass"], **local, **remote}
        for command in commands.values():  # warm the file cache once
            _time_once(command, environment)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(arguments.runs):
            for name, command in commands.items():
                samples[name].append(_time_once(command, environment))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)

    baseline = statistics.median(samples["python -c pass"])
    load = os.getloadavg()[0]
    print(f"median of {arguments.runs} runs; load average (1 min) {load:.2f}; {os.cpu_count()} CPUs")
    print(f"{'command':16} {'median':>9} {'ratio':>7} {'target':>8}")
    figures = {}
    for name, times in samples.items():
        median = statistics.median(times)
        target = TARGET_SERVER_S if name in remote else TARGET_LOCAL_S if name in local else None
        verdict = "" if target is None else ("met" if median <= target else "NOT MET")
        shown_target = "" if target is None else f"{target:.1f} s"
        print(f"{name:16} {median * 1000:7.0f} ms {median / baseline:6.1f}x {shown_target:>8} {verdict}")
        figures[name] = {"median_s": median, "ratio_to_python": median / baseline, "samples_s": times}
    if arguments.json:
        arguments.json.write_text(json.dumps({"load_average": load, "commands": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
