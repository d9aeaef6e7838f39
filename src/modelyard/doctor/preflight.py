"""Preflight: every check doctor can run on a deployment before its engine starts.

The server runs it when a deployment is created and refuses the deployment when any finding is
an error; warnings are kept on the deployment and shown. It runs, in order:

1. the model directory checks (``model.*``, ``modelyard.doctor.model_directory``);
2. the checks of the plan (``modelyard.doctor.plan``): flags and env as typed, the parallel
   layout, what the model's config allows, the environment and machine the engine starts in;
3. the memory fit (``memory.*``, ``modelyard.estimate``) when the GPUs are known.

Usage::

    findings = preflight_deployment(
        deployment_name="qwen",
        model_dir=Path("/models/Qwen3.6-27B"),
        engine="vllm", version="0.25.0",
        backend_parameters=["--tensor-parallel-size 2", "--max-model-len 32768"],
        env=["VLLM_LOGGING_LEVEL=INFO"],
        gpus=read_gpu_inventory().gpus[:2],
    )
    if has_errors(findings): ...
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from modelyard.backends.parameters import ParsedParameters
from modelyard.backends.spec import BackendVersion
from modelyard.doctor.findings import Finding
from modelyard.doctor.host_facts import HostFacts
from modelyard.doctor.parameters.chat_template import judges_chat_template
from modelyard.doctor.plan import DeploymentPlan, check_plan
from modelyard.errors import ModelyardError
from modelyard.estimate.correction import StartObservation
from modelyard.estimate.gpus import engine_view
from modelyard.hardware.gpus import GpuInfo
from modelyard.modeldir import ModelFacts, read_model_facts

logger = logging.getLogger(__name__)


def preflight_deployment(
    *,
    deployment_name: str | None,
    model_dir: Path | str,
    engine: str,
    version: str | BackendVersion | None,
    backend_parameters: list[str] | str,
    env: dict[str, str] | list[str] | str,
    gpus: list[GpuInfo] | None,
    gpu_count: int | None = None,
    host: HostFacts | None = None,
    start_observations: Sequence[StartObservation] = (),
    parsed: ParsedParameters | None = None,
) -> list[Finding]:
    """Run the model directory, parameter and memory checks of one deployment.

    ``engine`` is the engine family (``vllm``, ``sglang``, ``transformers``, ``custom``);
    ``backend_parameters`` and ``env`` are the raw text the user typed (lines, or one text), so
    that stray whitespace and broken lines can be seen. ``gpus`` are the GPUs of one replica;
    ``gpu_count`` stands in when only their number is known (planning for other hardware).
    ``host``: the machine the engine starts on (default: this one, as the local runtime starts it).
    ``start_observations``: this installation's starts of the engine version, which correct the
    memory estimate (``estimate/correction.py``).
    ``parsed``: ``backend_parameters`` already parsed on the version's flag table (not parsed again).
    """
    directory = Path(model_dir)
    version_text = version.version if isinstance(version, BackendVersion) else version
    count = gpu_count if gpu_count is not None else (len(gpus) if gpus else None)
    findings = _model_directory_findings(directory)
    plan = DeploymentPlan(
        engine=engine,
        version=version_text,
        backend_parameters=backend_parameters,
        env=env,
        model=_model_facts(directory),
        # CUDA's view of each GPU (estimate.gpus.engine_view): the total the engine's knob divides.
        gpus=[engine_view(gpu.name, gpu.memory_total_bytes, gpu.memory_free_bytes) for gpu in gpus or []],
        gpu_count=count,
        host=host if host is not None else HostFacts.of_this_host(),
        deployment_name=deployment_name,
        start_observations=tuple(start_observations),
        parsed=parsed,
    )
    if judges_chat_template(engine, plan.model):
        # The plan's check knows --chat-template and the pooling flags: it decides this id.
        findings = [finding for finding in findings if finding.check_id != "model.chat-template-missing"]
    findings.extend(check_plan(plan))
    return findings


def _model_directory_findings(directory: Path) -> list[Finding]:
    try:
        from modelyard.doctor.model_directory import check_model_directory
    except ImportError:  # pragma: no cover - the model directory checks ship with doctor
        return []
    return check_model_directory(directory)


def _model_facts(directory: Path) -> ModelFacts | None:
    """The model's config and template, or None when unreadable (the ``model.*`` checks say why)."""
    if not directory.name:
        return None
    try:
        return read_model_facts(directory)
    except ModelyardError as error:
        logger.debug("no model facts for %s: %s", directory, error)
        return None
    except OSError as error:
        logger.debug("model directory %s unreadable: %s", directory, error)
        return None
