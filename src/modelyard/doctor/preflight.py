"""Preflight: every check doctor can run on a deployment before its engine starts.

The server runs it when a deployment is created and refuses the deployment when any finding is
an error; warnings are kept on the deployment and shown. It runs, in order:

1. the model directory checks (``model.*``, ``modelyard.doctor.model_directory``);
2. the parameter checks (``param.*``, ``modelyard.doctor.parameters``) on the raw flags and env;
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
import shlex
from pathlib import Path

from modelyard.backends.arguments import split_backend_parameters
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters import ParameterContext, run_parameter_checks
from modelyard.errors import InvalidInput, ModelyardError
from modelyard.estimate import GpuSpec, estimate_memory, memory_findings
from modelyard.hardware.gpus import GpuInfo, GpuInventory
from modelyard.modeldir import ModelFacts, read_model_facts

logger = logging.getLogger(__name__)


def preflight_deployment(
    *,
    deployment_name: str | None = None,
    model_dir: Path | str | None = None,
    engine: str | None = None,
    version: str | BackendVersion | None = None,
    backend_parameters: list[str] | str = "",
    env: dict[str, str] | list[str] | str | None = None,
    gpus: list[GpuInfo] | None = None,
    gpu_count: int | None = None,
    # The deployment service's form (services/deployment_checks.py) until it passes the above:
    model_path: Path | str | None = None,
    backend: BackendSpec | None = None,
    gpus_per_replica: int | None = None,
    inventory: GpuInventory | None = None,
) -> list[Finding]:
    """Run the model directory, parameter and memory checks of one deployment.

    ``engine`` is the engine family (``vllm``, ``sglang``, ``transformers``, ``custom``);
    ``backend_parameters`` and ``env`` are the raw text the user typed (lines, or one text), so
    that stray whitespace and broken lines can be seen. ``gpus`` are the GPUs of one replica;
    ``gpu_count`` stands in when only their number is known (planning for other hardware).
    """
    directory = Path(model_dir if model_dir is not None else model_path or "")
    family = engine or (backend.family if backend is not None else "custom")
    version_text = version.version if isinstance(version, BackendVersion) else version
    if gpus is None and inventory is not None and gpus_per_replica:
        gpus = inventory.gpus[:gpus_per_replica] if len(inventory.gpus) >= gpus_per_replica else None
    count = gpu_count if gpu_count is not None else (len(gpus) if gpus else gpus_per_replica)

    if backend is not None and isinstance(backend_parameters, list):
        # The service hands over arguments already split; quote each back into a line of its own.
        backend_parameters = [shlex.quote(argument) for argument in backend_parameters]

    findings: list[Finding] = []
    findings.extend(_model_directory_findings(directory))
    model = _model_facts(directory)
    context = ParameterContext.build(
        engine=family,
        version=version_text,
        backend_parameters=backend_parameters,
        env=env if env is not None else {},
        deployment_name=deployment_name,
        model=model,
        gpus=gpus,
        gpu_count=count,
    )
    findings.extend(run_parameter_checks(context))
    if model is not None and family in {"vllm", "sglang"} and gpus:
        findings.extend(_memory_findings(model, family, version_text, backend_parameters, gpus))
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


def _memory_findings(
    model: ModelFacts,
    engine: str,
    version: str | None,
    backend_parameters: list[str] | str,
    gpus: list[GpuInfo],
) -> list[Finding]:
    """The estimator's verdict on these GPUs (``memory.*`` findings, ``modelyard.estimate``)."""
    try:
        arguments = split_backend_parameters(backend_parameters)
    except InvalidInput:
        return []  # param.unbalanced-quote / param.split-flag name the broken line
    specs = [
        GpuSpec(
            name=gpu.name, memory_total_bytes=gpu.memory_total_bytes, memory_free_bytes=gpu.memory_free_bytes
        )
        for gpu in gpus
    ]
    try:
        estimate = estimate_memory(model, engine, specs, arguments, engine_version=version)
    except ModelyardError as error:
        return [_estimate_failed(str(error), error.hint or "")]
    except (ArithmeticError, LookupError, TypeError, ValueError) as error:
        # A config the estimator cannot read must not block a deployment: say so, and go on.
        logger.exception("memory estimate failed for %s", model.directory)
        return [_estimate_failed(f"{type(error).__name__}: {error}", "")]
    return memory_findings(estimate)


def _estimate_failed(reason: str, hint: str) -> Finding:
    return Finding(
        "memory.estimate-failed",
        Severity.INFO,
        f"the memory fit could not be estimated: {reason}",
        fix=hint or "check the model's config.json; run `modelyard estimate` for details",
    )
