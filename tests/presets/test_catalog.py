"""Every preset: the doctor's preflight finds no error or warning on each GPU type it claims to fit,
and that list is what the estimator computes, on stand-ins built from the models' public configs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from modelyard.backends.catalog import load_builtin_backends
from modelyard.doctor.findings import Severity
from modelyard.doctor.preflight import preflight_deployment
from modelyard.estimate.gpus import (
    GIB,
    KNOWN_GPU_TOTAL_GIB,
    MEASURED_CUDA_TOTAL_BYTES,
    MIB,
    RESERVED_BYTES_MEASURED_MAX,
    RESERVED_SHARE_MEASURED_MAX,
    cuda_visible_total_bytes,
)
from modelyard.hardware.gpus import GpuInfo
from modelyard.modeldir import read_model_facts
from modelyard.presets import Preset, get_preset, load_presets
from modelyard.presets.fit import CANDIDATE_GPUS, fitting_gpus
from modelyard.testing.stand_ins import build_stand_in, stand_in_names

PRESETS = load_presets()


def _stand_in_name(preset: Preset) -> str:
    return preset.model.split("/", 1)[1].lower()


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stand-ins")
    return {name: build_stand_in(name, root / name) for name in sorted({_stand_in_name(p) for p in PRESETS})}


def _nvml_total_bytes(kind: str) -> int:
    """The NVML total of a board whose CUDA total is ``KNOWN_GPU_TOTAL_GIB[kind]`` (what
    ``modelyard estimate --gpus 1xKIND`` takes): the measured board's, else the least NVML total
    that leaves that much after the reservation the estimator assumes."""
    cuda = int(KNOWN_GPU_TOTAL_GIB[kind] * GIB)
    for mib, measured in MEASURED_CUDA_TOTAL_BYTES.items():
        if abs(measured - cuda) < 16 * MIB:
            return mib * MIB
    nvml = max(cuda + RESERVED_BYTES_MEASURED_MAX, math.ceil(cuda / (1 - RESERVED_SHARE_MEASURED_MAX)))
    assert cuda_visible_total_bytes(nvml) >= cuda - MIB
    return nvml


def _gpus(kind: str, count: int) -> list[GpuInfo]:
    # The inventory reads NVML's total; the preflight takes CUDA's view of it, as the fit does.
    total = _nvml_total_bytes(kind)
    return [
        GpuInfo(
            index=index,
            uuid=f"GPU-{index}",
            name=kind,
            memory_total_bytes=total,
            memory_free_bytes=total,
            memory_used_bytes=0,
        )
        for index in range(count)
    ]


def test_the_catalog_covers_the_models_the_guides_use() -> None:
    models = {preset.model for preset in PRESETS}
    assert {"Qwen/Qwen3.6-27B", "Qwen/Qwen3.6-35B-A3B", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B"} <= models
    assert all(_stand_in_name(preset) in stand_in_names() for preset in PRESETS)
    assert {preset.backend for preset in PRESETS} == {"vllm", "sglang"}


@pytest.mark.parametrize("preset", PRESETS, ids=[preset.name for preset in PRESETS])
def test_every_preset_passes_the_doctor_on_every_gpu_it_fits(
    preset: Preset, stand_ins: dict[str, Path]
) -> None:
    assert preset.fits, f"{preset.name} fits no GPU type"
    for kind in preset.fits:
        findings = preflight_deployment(
            deployment_name=preset.name,
            model_dir=stand_ins[_stand_in_name(preset)],
            engine=preset.backend,
            version=preset.version,
            backend_parameters=list(preset.parameters),
            env=[f"{key}={value}" for key, value in preset.env.items()],
            gpus=_gpus(kind, preset.gpus),
        )
        loud = [
            f"{f.severity.value} {f.check_id}: {f.message}" for f in findings if f.severity != Severity.INFO
        ]
        assert loud == [], f"{preset.name} on {preset.gpus}x{kind}"
        assert any(finding.check_id == "memory.summary" for finding in findings)


@pytest.mark.parametrize("preset", PRESETS, ids=[preset.name for preset in PRESETS])
def test_the_gpus_a_preset_fits_are_what_the_estimator_says(
    preset: Preset, stand_ins: dict[str, Path]
) -> None:
    facts = read_model_facts(stand_ins[_stand_in_name(preset)])
    assert fitting_gpus(preset, facts) == list(preset.fits), (
        f"update `fits` of {preset.name} in src/modelyard/presets/catalog.yaml"
    )


def test_presets_name_engine_versions_that_exist() -> None:
    versions = {(spec.name, version) for spec in load_builtin_backends() for version in spec.versions}
    assert [preset.name for preset in PRESETS if (preset.backend, preset.version) not in versions] == []


def test_a_preset_too_big_for_a_gpu_says_so(stand_ins: dict[str, Path]) -> None:
    preset = get_preset("qwen3.6-27b-vllm-1gpu")
    smaller = [gpu for gpu in CANDIDATE_GPUS if gpu not in preset.fits]
    assert smaller == ["RTX4090", "RTX5090", "L40S"]
    findings = preflight_deployment(
        deployment_name=preset.name,
        model_dir=stand_ins["qwen3.6-27b"],
        engine=preset.backend,
        version=preset.version,
        backend_parameters=list(preset.parameters),
        env=[],
        gpus=_gpus("L40S", 1),
    )
    errors = [finding.check_id for finding in findings if finding.severity == Severity.ERROR]
    assert errors and all(check.startswith("memory.") for check in errors)


def test_the_docs_table_is_the_catalog() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    for preset in PRESETS:
        row = (
            f"| `{preset.name}` | {preset.model} | {preset.backend} {preset.version} | {preset.gpus} | "
            f"{preset.context_tokens:,} | {', '.join(preset.fits)} |"
        )
        assert row in text, f"docs/models.md lacks or differs on: {row}"
