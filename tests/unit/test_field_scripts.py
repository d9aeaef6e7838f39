"""The field run's scripts on CPU: what a call carries (in bytes), the bundles in pieces, and a
phase's exit status.

The GPU steps cannot run here: a phase's steps go to a double of ``field_run.py`` (a script that
records each step and fails the ones it is told to), which is how ``h200.sh`` is driven without
engines (``FIELD_RUN``). Everything else is the real scripts, in a scratch copy of the checkout.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

FIELD_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "field"

needs_tools = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("git", "bash", "xz", "sha256sum")),
    reason="needs git, bash, xz and sha256sum",
)


def _git(root: Path, *arguments: str) -> None:
    subprocess.run(["git", *arguments], cwd=root, check=True, capture_output=True)


def _carry(root: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(FIELD_SCRIPTS / "carry.py"), "--root", str(root), *arguments]
    return subprocess.run(command, capture_output=True, text=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    _git(root, "init", "-q")
    (root / ".gitignore").write_text("/.big/\n")
    (root / "tracked.txt").write_bytes(b"t" * 1000)
    (root / "docs").mkdir()
    (root / "docs" / "picture.png").write_bytes(b"d" * 3000)
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "files")
    (root / "untracked.txt").write_bytes(b"u" * 500)
    (root / ".big").mkdir()
    (root / ".big" / "bundle").write_bytes(b"b" * 2000)
    return root


@needs_tools
def test_carry_counts_the_working_tree_and_the_carried_paths_in_bytes(checkout: Path) -> None:
    tree = 1000 + 3000 + 500 + len((checkout / ".gitignore").read_bytes())
    result = _carry(checkout, "--limit-bytes", str(tree + 1999), "--margin-bytes", "0", "small=", "big=.big")
    assert result.returncode == 1
    assert f"working tree: {tree:,} bytes" in result.stdout
    assert f"small: {tree:,} bytes" in result.stdout and "fits" in result.stdout
    assert f"big: {tree + 2000:,} bytes" in result.stdout and "TOO LARGE" in result.stdout
    assert "big would pass" in result.stderr
    roomy = _carry(checkout, "--limit-bytes", str(tree + 2000), "--margin-bytes", "0", "big=.big")
    assert roomy.returncode == 0, roomy.stdout
    piece = _carry(
        checkout, "--limit-bytes", "10000", "--margin-bytes", "100", "--largest-piece-bytes", "x=.big"
    )
    assert int(piece.stdout) == 10000 - 100 - tree - 2000


@needs_tools
def test_carry_refuses_a_carried_path_that_is_not_there(checkout: Path) -> None:
    result = _carry(checkout, "setup=.whl/field")
    assert result.returncode != 0
    assert "run prepare.sh first" in result.stderr


@needs_tools
def test_a_trimmed_checkout_leaves_docs_out_of_what_travels(checkout: Path) -> None:
    scripts = checkout / "scripts" / "field"
    scripts.mkdir(parents=True)
    shutil.copy(FIELD_SCRIPTS / "trim-checkout.sh", scripts)
    _git(checkout, "add", "scripts")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "scripts")
    before = _carry(checkout, "a=").stdout
    subprocess.run(["bash", str(scripts / "trim-checkout.sh"), "on"], check=True, capture_output=True)
    trimmed = _carry(checkout, "a=").stdout
    subprocess.run(["bash", str(scripts / "trim-checkout.sh"), "off"], check=True, capture_output=True)
    assert (checkout / "docs" / "picture.png").read_bytes() == b"d" * 3000  # back, unchanged
    assert _tree_bytes(before) - _tree_bytes(trimmed) == 3000


def _tree_bytes(carry_output: str) -> int:
    return int(carry_output.split("working tree: ")[1].split(" bytes")[0].replace(",", ""))


# -- h200.sh ----------------------------------------------------------------------------------------

# The double of field_run.py: each step is appended to STEPS_LOG; a step whose words contain
# FAIL_STEP exits 1 (as field_run.py does for a step that did not pass).
STEP_DOUBLE = """#!/bin/bash
echo "$*" >> "$STEPS_LOG"
if [ -n "${FAIL_STEP:-}" ] && [[ "$*" == *"$FAIL_STEP"* ]]; then exit 1; fi
exit 0
"""


def _h200(root: Path, phase: str, tmp_path: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    double = tmp_path / "field_run_double.sh"
    double.write_text(STEP_DOUBLE)
    settings = {
        **os.environ,
        "FIELD_RUN": f"bash {double}",
        "FIELD_GPUS": "1",
        "FIELD_TMP": str(tmp_path / "field"),
        "FIELD_STAGE": str(tmp_path / "stage"),
        "OUT": str(tmp_path / "out"),
        "STEPS_LOG": str(tmp_path / "steps.log"),
        "SGLANG_PYTHONPATH": str(tmp_path / "sgl"),
        **environment,
    }
    script = root / "scripts" / "field" / "h200.sh"
    return subprocess.run(
        ["bash", str(script), phase], capture_output=True, text=True, env=settings, timeout=120
    )


@pytest.fixture
def field_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copytree(FIELD_SCRIPTS, root / "scripts" / "field")
    return root


@needs_tools
def test_one_gpu_phase_benchmarks_vllm_then_sglang_on_the_same_gpu_and_exits_0(
    field_checkout: Path, tmp_path: Path
) -> None:
    result = _h200(field_checkout, "engines-one-gpu", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    steps = [line.split()[:2] for line in (tmp_path / "steps.log").read_text().splitlines()]
    assert steps == [
        ["deploy", "vllm"],
        ["bench", "vllm"],
        ["remove", "vllm"],
        ["deploy", "sglang"],
        ["bench", "sglang"],
        ["remove", "sglang"],
    ]
    log = (tmp_path / "steps.log").read_text()
    assert "--gpu-ids 0" in log.splitlines()[3] and "--reuse" in log.splitlines()[0]
    assert "all 6 steps passed" in result.stdout


@needs_tools
def test_a_failed_step_makes_the_phase_exit_1_and_names_it(field_checkout: Path, tmp_path: Path) -> None:
    result = _h200(field_checkout, "engines-one-gpu", tmp_path, FAIL_STEP="bench sglang")
    assert result.returncode == 1
    assert "1 of 6 steps failed" in result.stdout and "bench sglang" in result.stdout


@needs_tools
def test_bench_on_one_gpu_exits_0_when_its_steps_passed(field_checkout: Path, tmp_path: Path) -> None:
    # It used to end on a test for a second GPU and exit 1 with every step passed.
    result = _h200(field_checkout, "bench", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split()[:2] for line in (tmp_path / "steps.log").read_text().splitlines()] == [
        ["bench", "vllm"],
        ["kv-truth", "vllm"],
    ]


@needs_tools
def test_steps_side_by_side_count_each_failure(field_checkout: Path, tmp_path: Path) -> None:
    result = _h200(field_checkout, "faults-kv", tmp_path, FIELD_GPUS="2", FAIL_STEP="kill-during-bench")
    assert result.returncode == 1
    assert "kill-during-bench vllm" in result.stdout
    assert "remove sglang" in (tmp_path / "steps.log").read_text()  # the other side still ran


def _fake_sglang_bundle() -> bytes:
    """A .tar.xz holding an importable ``sglang`` package (a stand-in for the real bundle)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
        source = b'__version__ = "0.0-field-test"\n'
        info = tarfile.TarInfo("sglang/__init__.py")
        info.size = len(source)
        archive.addfile(info, io.BytesIO(source))
    return buffer.getvalue()


@needs_tools
def test_the_sglang_bundle_travels_in_pieces_and_is_unpacked_once_all_are_there(
    field_checkout: Path, tmp_path: Path
) -> None:
    bundle = _fake_sglang_bundle()
    kit = field_checkout / ".sglx" / "kit"
    kit.mkdir(parents=True)
    (kit / "SHA256SUMS.base").write_text(f"{hashlib.sha256(bundle).hexdigest()}  sgl-base.tar.xz\n")
    half = len(bundle) // 2
    first, second = field_checkout / ".field" / "sglang-1", field_checkout / ".field" / "sglang-2"
    first.mkdir(parents=True)
    (first / "piece-00").write_bytes(bundle[:half])
    early = _h200(field_checkout, "stage-sglang", tmp_path)  # the first call carries piece 1 only
    assert early.returncode == 0, early.stdout + early.stderr
    assert not (tmp_path / "sgl" / ".ok").exists()
    assert "a piece is missing" in early.stdout
    shutil.rmtree(first)
    second.mkdir(parents=True)
    (second / "piece-01").write_bytes(bundle[half:])
    late = _h200(field_checkout, "stage-sglang", tmp_path)  # the second call: piece 2
    assert late.returncode == 0, late.stdout + late.stderr
    assert (tmp_path / "sgl" / ".ok").exists()
    assert "sglang 0.0-field-test" in late.stdout


def _steps(tmp_path: Path) -> list[str]:
    return (tmp_path / "steps.log").read_text().splitlines()


@needs_tools
def test_share_setup_places_both_deployments_by_memory_and_starts_pair_one_replica_at_a_time(
    field_checkout: Path, tmp_path: Path
) -> None:
    result = _h200(field_checkout, "share-setup", tmp_path, FIELD_SOFTWARE="0")
    assert result.returncode == 0, result.stdout + result.stderr
    steps = _steps(tmp_path)
    assert [line.split()[:2] for line in steps] == [
        ["serve", "--model-dir"],
        ["deploy", "pair"],
        ["scale", "pair"],
        ["deploy", "solo"],
        ["kv-shared", "pair"],
    ]
    deploys = [line for line in steps if line.startswith("deploy")]
    assert all("--gpu-memory auto" in line for line in deploys)
    # The placement sets the knob: the field script never does.
    assert not any("--gpu-memory-utilization" in line for line in deploys)
    assert "--replicas" not in steps[1] and steps[2].split()[2] == "2"  # the second replica after the first
    assert steps[4].split()[1:] == ["pair", "solo"]


@needs_tools
def test_share_setup_stops_when_the_server_does_not_start(field_checkout: Path, tmp_path: Path) -> None:
    result = _h200(field_checkout, "share-setup", tmp_path, FIELD_SOFTWARE="0", FAIL_STEP="serve")
    assert result.returncode == 1
    assert "1 of 1 steps failed" in result.stdout
    assert [line.split()[0] for line in _steps(tmp_path)] == ["serve"]


@needs_tools
def test_share_routing_runs_both_policies_then_each_side_by_side_pair_twice(
    field_checkout: Path, tmp_path: Path
) -> None:
    result = _h200(field_checkout, "share-routing", tmp_path, FAIL_STEP="gateway-cost solo --suffix=-r1")
    assert result.returncode == 1
    assert "3 of 7 steps failed" in result.stdout  # the first repeat's three pairs
    steps = _steps(tmp_path)
    assert steps[0] == "prefix-routing pair"
    assert steps[1:] == ["gateway-cost solo --suffix=-r1"] * 3 + ["gateway-cost solo --suffix=-r2"] * 3


def _wheel(name: str, version: str, source: str) -> bytes:
    """A minimal wheel holding one importable package (a stand-in for Ray's)."""
    import zipfile

    buffer = io.BytesIO()
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{name}/__init__.py", source)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return buffer.getvalue()


@needs_tools
def test_the_ray_wheels_travel_in_pieces_and_are_installed_once_all_are_there(
    field_checkout: Path, tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        wheel = _wheel("ray", "0.0", '__version__ = "0.0-field-test"\n')
        info = tarfile.TarInfo("ray-0.0-py3-none-any.whl")
        info.size = len(wheel)
        archive.addfile(info, io.BytesIO(wheel))
    bundle = buffer.getvalue()
    kit = field_checkout / ".field" / "ray-kit"
    kit.mkdir(parents=True)
    (kit / "SHA256SUMS").write_text(f"{hashlib.sha256(bundle).hexdigest()}  ray-wheels.tar\n")
    first = field_checkout / ".field" / "ray-1"
    first.mkdir(parents=True)
    (first / "piece-00").write_bytes(bundle[:1000])
    site = tmp_path / "ray-site"
    early = _h200(field_checkout, "stage-ray", tmp_path, RAY_SITE=str(site))
    assert early.returncode == 0, early.stdout + early.stderr
    assert "a piece is missing" in early.stdout and not (site / ".ok").exists()
    shutil.rmtree(first)
    second = field_checkout / ".field" / "ray-2"
    second.mkdir(parents=True)
    (second / "piece-01").write_bytes(bundle[1000:])
    late = _h200(field_checkout, "stage-ray", tmp_path, RAY_SITE=str(site))
    assert late.returncode == 0, late.stdout + late.stderr
    assert (site / ".ok").exists() and "ray 0.0-field-test" in late.stdout


# The double, recording which server (FIELD_PORT) each step went to.
PORT_DOUBLE = """#!/bin/bash
echo "$FIELD_PORT $*" >> "$STEPS_LOG"
exit 0
"""


@needs_tools
def test_ray_runtime_needs_ray_staged_first(field_checkout: Path, tmp_path: Path) -> None:
    result = _h200(field_checkout, "ray-runtime", tmp_path, RAY_SITE=str(tmp_path / "no-ray"))
    assert result.returncode == 3
    assert "stage-ray first" in result.stdout
    assert not (tmp_path / "steps.log").exists()


@needs_tools
def test_ray_runtime_deploys_on_a_second_server_and_alternates_the_runtimes(
    field_checkout: Path, tmp_path: Path
) -> None:
    site = tmp_path / "ray-site"
    site.mkdir()
    (site / ".ok").touch()
    double = tmp_path / "port_double.sh"
    double.write_text(PORT_DOUBLE)
    result = _h200(field_checkout, "ray-runtime", tmp_path, RAY_SITE=str(site), FIELD_RUN=f"bash {double}")
    assert result.returncode == 0, result.stdout + result.stderr
    steps = [line.split()[:3] for line in _steps(tmp_path)]
    assert steps[:4] == [
        ["8081", "serve", "--model-dir"],
        ["8081", "deploy", "ray-solo"],
        ["8081", "chat", "ray-solo"],
        ["8080", "chat", "solo"],
    ]
    second = _h200(field_checkout, "ray-runtime-2", tmp_path, RAY_SITE=str(site), FIELD_RUN=f"bash {double}")
    assert second.returncode == 0, second.stdout + second.stderr
    steps = [line.split()[:3] for line in _steps(tmp_path)]
    benches = [(port, name) for port, step, name in steps if step == "bench"]
    assert benches == [("8081", "ray-solo"), ("8080", "solo"), ("8080", "solo"), ("8081", "ray-solo")]
    assert steps[-1] == ["8081", "kv-shared", "ray-solo"]
    lines = _steps(tmp_path)
    assert "--serve-arg=--cluster" in lines[0] and "--gpu-memory auto" in lines[1]
    assert [line.endswith("--repeat-from 2") for line in lines if " bench " in f" {line} "] == [
        False,
        False,
        True,
        True,
    ]


def test_publish_keeps_neither_the_admin_password_nor_the_cluster_token(tmp_path: Path) -> None:
    results = tmp_path / "results" / "server-8081"
    results.mkdir(parents=True)
    token = "3f6c" * 16
    (results / "serve.log").write_text(
        "  admin password   s3cret-Passw0rd  (shown once)\n"
        f"  join a worker    modelyard worker join 10.0.0.5:6379 --token {token}\n"
        "  cluster          Ray head at 10.0.0.5:6379 (started here; token authentication on)\n"
    )
    target = tmp_path / "published"
    subprocess.run(
        [sys.executable, str(FIELD_SCRIPTS / "publish.py"), str(tmp_path / "results"), str(target)],
        check=True,
    )
    excerpt = (target / "server-8081" / "serve-excerpt.log").read_text()
    assert token not in excerpt and "s3cret" not in excerpt
    assert "worker join 10.0.0.5:6379 --token <the cluster token: not published>" in excerpt
    assert "Ray head at 10.0.0.5:6379" in excerpt


@needs_tools
def test_gateway_saturation_reuses_vllm_and_measures_each_load_in_one_client(
    field_checkout: Path, tmp_path: Path
) -> None:
    result = _h200(field_checkout, "gateway-saturation", tmp_path, FIELD_SAT_S="90")
    assert result.returncode == 0, result.stdout + result.stderr
    steps = _steps(tmp_path)
    assert steps[0].startswith("deploy vllm") and "--reuse" in steps[0]
    assert [line.split()[:4] for line in steps[1:]] == [
        ["gateway-saturation", "vllm", "--streams", "256"],
        ["gateway-saturation", "vllm", "--streams", "512"],
    ]
    assert all("--duration-s 90 --warmup-s 15" in line for line in steps[1:])
    assert "all 3 steps passed" in result.stdout


@needs_tools
def test_gateway_saturation_names_the_load_that_failed(field_checkout: Path, tmp_path: Path) -> None:
    result = _h200(
        field_checkout,
        "gateway-saturation",
        tmp_path,
        FIELD_SAT_STREAMS="128 384 128",
        FAIL_STEP="--streams 384",
    )
    assert result.returncode == 1
    assert "1 of 4 steps failed" in result.stdout and "--streams 384" in result.stdout
    steps = _steps(tmp_path)[1:]
    assert [line.split()[3] for line in steps] == ["128", "384", "128"]
    # A load given again is a repeat: its own seed and folder.
    assert steps[0].endswith("--seed 1") and steps[2].endswith("--seed 2 --suffix=-r2")


@needs_tools
def test_gateway_scaling_removes_vllm_before_it_measures(field_checkout: Path, tmp_path: Path) -> None:
    result = _h200(field_checkout, "gateway-scaling", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _steps(tmp_path) == ["remove vllm", "gateway-scaling"]
    assert (tmp_path / "out" / "results-gateway-scaling.tar.gz").exists()


def _free_port() -> str:
    """A loopback port nothing listens on: the phases' server check finds no server there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


@needs_tools
def test_autoscale_starts_the_server_then_autoscales_vllm_checks_its_estimate_and_removes_it(
    field_checkout: Path, tmp_path: Path
) -> None:
    result = _h200(field_checkout, "autoscale", tmp_path, FIELD_SOFTWARE="0", FIELD_PORT=_free_port())
    assert result.returncode == 0, result.stdout + result.stderr
    steps = _steps(tmp_path)
    assert [line.split()[:2] for line in steps] == [
        ["serve", "--model-dir"],
        ["autoscale", "vllm-auto"],
        ["kv-shared", "vllm-auto"],
        ["remove", "vllm-auto"],
    ]
    # Placed by memory, one to two replicas on their waiting requests, under 48 streams.
    assert "--gpus 1 --gpu-memory auto" in steps[1] and "--min 1 --max 2 --target 2" in steps[1]
    assert "--args=--max-model-len 2048 --max-num-seqs 8" in steps[1] and "--concurrency 48" in steps[1]
    assert "all 4 steps passed" in result.stdout


@needs_tools
def test_autoscale_stops_when_the_server_does_not_start(field_checkout: Path, tmp_path: Path) -> None:
    result = _h200(
        field_checkout, "autoscale", tmp_path, FIELD_SOFTWARE="0", FIELD_PORT=_free_port(), FAIL_STEP="serve"
    )
    assert result.returncode == 1
    assert _steps(tmp_path) == [f"serve --model-dir {tmp_path / 'field' / 'qwen3-field'}"]
    assert "serve" in result.stdout.split("steps failed:")[1]


@needs_tools
def test_the_servers_python3_gives_sglang_its_bundle_and_leaves_other_calls_alone(
    field_checkout: Path, tmp_path: Path
) -> None:
    # A stand-in SGLang package in the bundle's folder: it prints where it was imported from.
    bundle = tmp_path / "sgl"
    (bundle / "sglang").mkdir(parents=True)
    (bundle / "sglang" / "__init__.py").write_text("")
    (bundle / "sglang" / "launch_server.py").write_text(
        "import os, sys\nprint(os.environ['PYTHONPATH'], *sys.argv[1:])\n"
    )
    _h200(field_checkout, "autoscale", tmp_path, FIELD_SOFTWARE="0", FIELD_PORT=_free_port())
    python3 = tmp_path / "field" / "sgl-bin" / "python3"
    environment = {**os.environ, "PYTHONPATH": "/the/servers/path"}
    engine = subprocess.run(
        [str(python3), "-m", "sglang.launch_server", "--model-path", "m"],
        capture_output=True, text=True, env=environment, check=True,
    ).stdout.split()  # fmt: skip
    backends = ["--attention-backend", "triton", "--sampling-backend", "pytorch"]
    assert engine == [str(bundle), "--model-path", "m", *backends]
    other = subprocess.run(
        [str(python3), "-c", "import os; print(os.environ['PYTHONPATH'])"],
        capture_output=True, text=True, env=environment, check=True,
    ).stdout.strip()  # fmt: skip
    assert other == "/the/servers/path"


@needs_tools
def test_tune_runs_modelyard_tune_in_its_own_session_and_waits_for_its_exit(
    field_checkout: Path, tmp_path: Path
) -> None:
    result = _h200(field_checkout, "tune", tmp_path, FIELD_PORT=_free_port())
    assert result.returncode == 0, result.stdout + result.stderr
    steps = _steps(tmp_path)
    assert steps[0].startswith("serve --model-dir")
    assert steps[1].startswith("tune field -- --workload chat ")
    assert "--backends vllm,sglang --version vllm=0.25.0 --version sglang=0.5.17" in steps[1]
    assert "all 2 steps passed" in result.stdout
    # The next call's tune-wait finds it ended: nothing is started again.
    again = _h200(field_checkout, "tune-wait", tmp_path)
    assert again.returncode == 0 and len(_steps(tmp_path)) == 2


@needs_tools
def test_a_failed_tune_makes_the_phase_exit_1(field_checkout: Path, tmp_path: Path) -> None:
    result = _h200(field_checkout, "tune", tmp_path, FIELD_PORT=_free_port(), FAIL_STEP="tune field")
    assert result.returncode == 1
    assert "tune (exit 1)" in result.stdout
