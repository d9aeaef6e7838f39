"""The field run's estimates are for the card the engines ran on (issue 23: ``kv-shared`` once
estimated an H200 whatever the card): ``field_common.local_gpu_spec`` on an H100 and on a card
the estimator knows by size only, read through NVML (here the NVML double) when nvidia-smi is
not there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NVML_DOUBLE = ROOT / "src" / "modelyard" / "testing" / "nvml_double"


@pytest.mark.parametrize(
    ("name", "total_bytes", "spec"),
    [
        ("NVIDIA H100 80GB HBM3", 85_520_809_984, "1xH100"),
        ("NVIDIA RTX 6000 Ada Generation", 51_527_024_640, "1x47GiB"),
    ],
)
def test_the_field_estimate_names_the_local_card(
    tmp_path: Path, name: str, total_bytes: int, spec: str
) -> None:
    gpus = tmp_path / "gpus.json"
    gpus.write_text(
        json.dumps(
            {
                "driver_version": "580.95.05",
                "cuda_driver_version": 13000,
                "gpus": [
                    {"name": name, "uuid": "GPU-1", "memory_total_bytes": total_bytes, "memory_used_bytes": 0}
                ],
            }
        )
    )
    environment = {
        **os.environ,
        "PATH": str(tmp_path),  # no nvidia-smi here
        "PYTHONPATH": os.pathsep.join([str(NVML_DOUBLE), str(ROOT / "src"), str(ROOT / "scripts" / "field")]),
        "MODELYARD_NVML_DOUBLE": str(gpus),
    }
    printed = subprocess.run(
        [sys.executable, "-c", "import field_common; print(field_common.local_gpu_spec())"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == spec
