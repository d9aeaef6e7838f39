"""Which GPUs a preset fits, as the estimator says (``modelyard estimate``).

A preset fits a GPU type when ``preset.gpus`` of them hold the weights and a KV cache of at least
one sequence of ``context_tokens`` under the preset's memory knob, with no memory error or
warning from the doctor (``memory.*`` findings).

Usage::

    fitting_gpus(preset, read_model_facts(model_dir))  # ["L40S", "H100", "H200", "B200"]
"""

from __future__ import annotations

from collections.abc import Sequence

from modelyard.doctor.findings import Severity
from modelyard.doctor.memory import memory_findings
from modelyard.estimate import estimate_memory, parse_gpu_specs
from modelyard.estimate.estimate_result import MemoryEstimate
from modelyard.modeldir import ModelFacts
from modelyard.presets.catalog import Preset

# The GPU types the catalog states fits for, smallest first (names ``modelyard estimate`` knows).
CANDIDATE_GPUS: tuple[str, ...] = ("RTX4090", "RTX5090", "L40S", "H100", "H200", "B200")


def estimate_preset(preset: Preset, model: ModelFacts, gpu: str) -> MemoryEstimate:
    return estimate_memory(
        model,
        preset.backend,
        parse_gpu_specs(f"{max(preset.gpus, 1)}x{gpu}"),
        list(preset.parameters),
        engine_version=preset.version,
    )


def preset_fits(preset: Preset, model: ModelFacts, gpu: str) -> bool:
    findings = memory_findings(estimate_preset(preset, model, gpu))
    return not any(finding.severity in (Severity.ERROR, Severity.WARNING) for finding in findings)


def fitting_gpus(preset: Preset, model: ModelFacts, candidates: Sequence[str] = CANDIDATE_GPUS) -> list[str]:
    return [gpu for gpu in candidates if preset_fits(preset, model, gpu)]
