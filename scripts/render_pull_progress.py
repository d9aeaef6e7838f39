"""Render what `modelyard models pull` shows mid-download, as an SVG and a PNG for the docs.

It runs the real thing against the hub DOUBLE: a `modelyard serve` subprocess pulls a model
directory served by ``HuggingFaceHubDouble`` (throttled, so the download lasts long enough to be
seen, and with one connection dropped to show a retry), and the CLI's own display
(``modelyard.cli.task_progress``) is fed with the server's task JSON and recorded once half of the
bytes are in. The PNG is a headless Chromium screenshot of the SVG.

    python scripts/render_pull_progress.py --model DIR --out docs/images/models-pull
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from modelyard.cli.client import ApiClient
from modelyard.cli.output import format_bytes
from modelyard.cli.task_progress import TaskView
from modelyard.testing.hub_doubles import HuggingFaceHubDouble, RepositoryDouble

REPO_ID = "modelyard-test/tiny-qwen3"
WIDTH = 132


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def _serve(data_dir: Path, endpoint: str, port: int) -> subprocess.Popen[bytes]:
    environment = {key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"}
    environment.update(HF_ENDPOINT=endpoint, MODELYARD_DOWNLOAD_STALL_TIMEOUT_SECONDS="5", NO_COLOR="1")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "modelyard.cli.main",
            "serve",
            "--no-demo",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment,
    )


def _snapshot(task: dict[str, Any], events: list[dict[str, Any]]) -> Console:
    """One frame as the user sees it: the task line, the retry lines so far, the bars."""
    recording = Console(record=True, width=WIDTH, force_terminal=True, color_system="truecolor")
    options = task["options"]
    recording.print(f"$ modelyard models pull hf://{REPO_ID}", style="bold", highlight=False)
    recording.print(
        f"pull task {task['id']}: {task['source']} at {options['commit'][:12]} -> {task['target']}: "
        f"{len(task['files'])} files, {format_bytes(task['total_bytes'])}",
        highlight=False,
    )
    replay = TaskView(events[0], recording)
    for frame in events:
        replay.show(frame)
    bars = TaskView(events[0], Console(file=io.StringIO(), width=WIDTH))
    for frame in events:
        bars.show(frame)
    recording.print(bars.display.progress.get_renderable())
    return recording


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", type=Path, required=True, help="a model directory to serve (several shards)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output path without suffix (.svg and .png)")
    parser.add_argument(
        "--bytes-per-second", type=float, default=6000.0, help="per-file throttle of the double"
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="the server's data directory (default: temporary)"
    )
    arguments = parser.parse_args()

    repository = RepositoryDouble.from_directory(REPO_ID, arguments.model)
    with tempfile.TemporaryDirectory() as scratch, HuggingFaceHubDouble([repository]) as hub:
        for number, path in enumerate(repository.shards()):
            hub.faults.throttle(path, arguments.bytes_per_second * (1 + 0.35 * (number % 3)))
        hub.faults.drop_after(repository.shards()[1], 9_000)
        data_dir, port = arguments.data_dir or Path(scratch) / "data", _free_port()
        server = _serve(data_dir, hub.endpoint, port)
        try:
            password_file = data_dir / "admin-password"
            _wait(password_file.is_file, 60, "the admin password")
            url, password = f"http://127.0.0.1:{port}", password_file.read_text().strip()
            _wait(lambda: _answers(url, password), 120, "modelyard serve")
            client = ApiClient(url, password)
            task = client.post("/models/pull", {"source": f"hf://{REPO_ID}"})
            frames: list[dict[str, Any]] = []
            while True:
                task = client.get(f"/tasks/{task['id']}")
                frames.append(task)
                downloading = sum(1 for entry in task["files"] if entry["state"] == "downloading")
                if task["fraction_done"] >= 0.45 and downloading >= 3 and task["rate_bytes_per_second"]:
                    break
                if task["state"] != "running" and task["state"] != "queued":
                    raise SystemExit(
                        f"the pull ended before a frame was taken: {task['state']} {task['reason']}"
                    )
                time.sleep(0.25)
            recording = _snapshot(task, frames)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    svg = arguments.out.with_suffix(".svg")
    recording.save_svg(str(svg), title="modelyard models pull")
    _png(svg, arguments.out.with_suffix(".png"))
    print(f"wrote {svg} and {arguments.out.with_suffix('.png')}")
    return 0


def _answers(url: str, password: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/system", auth=("admin", password), timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _png(svg: Path, png: Path) -> None:
    """A headless Chromium screenshot of the SVG at its own size."""
    import re

    text = svg.read_text()
    match = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', text)
    width, height = (int(float(match.group(1))) + 1, int(float(match.group(2))) + 1) if match else (1400, 600)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium to turn the SVG into a PNG")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--screenshot={png.absolute()}",
                svg.absolute().as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


if __name__ == "__main__":
    raise SystemExit(main())
