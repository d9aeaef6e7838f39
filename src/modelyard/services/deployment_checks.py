"""Doctor's preflight, as the deployment service runs it before storing a deployment.

Errors refuse the deployment (400, the findings in the body's ``details``); warnings are kept
on the deployment to show in ``ps`` and the console.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelyard.backends.arguments import parse_env
from modelyard.backends.parameters import ParsedParameters
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.errors import InvalidInput
from modelyard.estimate.correction import StartObservation
from modelyard.hardware.gpus import GpuInfo, GpuInventory
from modelyard.hub.verification import UNVERIFIED, shown_paths
from modelyard.runtimes.base import Mount
from modelyard.store.tables import ModelFile

if TYPE_CHECKING:
    from modelyard.doctor.findings import Finding

logger = logging.getLogger(__name__)

# On a cluster: the ready GPU workers' names, and what is wrong with a model path on each one that
# cannot serve it (``cluster.workers.WorkerDirectory.model_directory_problems``).
WorkerModelCheck = Callable[[str], tuple[list[str], dict[str, str]]]


class PreflightFailed(InvalidInput):
    """Doctor found errors: the deployment would not work as asked. ``details`` lists the findings."""

    code = "preflight_failed"

    def __init__(self, message: str, *, findings: list[dict[str, Any]], hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.details = {"findings": findings}


def gpus_of_one_replica(
    inventory: GpuInventory, gpus_per_replica: int, gpu_ids: list[int] | None
) -> list[GpuInfo]:
    """The GPUs one replica will likely get: the explicit ids, else the first N (same-model hosts)."""
    if gpu_ids:
        return [gpu for gpu in inventory.gpus if gpu.index in gpu_ids]
    return inventory.gpus[:gpus_per_replica] if gpus_per_replica else []


def unverified_model_findings(model: ModelFile) -> list[Finding]:
    """A warning when the model has files no hash was checked for (``hub/verification.py``): the
    deployment goes ahead, and says so."""
    from modelyard.doctor.findings import Finding, Severity

    if model.state != UNVERIFIED:
        return []
    verification = (model.details or {}).get("verification") or {}
    files = [str(path) for path in verification.get("unverified_files") or []]
    return [
        Finding(
            "model.unverified-files",
            Severity.WARNING,
            f"model {model.name!r} is unverified: {len(files)} of its files were checked only by "
            f"size, the hub gave no hash for them ({shown_paths(files)}); a damaged or altered byte "
            "in them would not have been seen",
            fix="pull it again from a hub that lists SHA-256 for every file (the official hub rather "
            "than a mirror), or compare these files with hashes the publisher gives",
            details={"unverified_files": files},
        )
    ]


def _host_findings(
    model: ModelFile,
    spec: BackendSpec,
    version: BackendVersion,
    parameters: ParsedParameters,
    env: dict[str, str],
    replica_gpus: list[GpuInfo],
    inventory: GpuInventory,
    mounts: list[Mount],
) -> list[Finding]:
    """This host against what the engine needs: driver, GPU links, Docker, RAM for the loader.

    TP, PP and speculative decoding are read from the parsed ``parameters`` (as ``modelyard
    doctor`` reads them); an engine without a layout (transformers, custom) is TP over its GPUs.
    ``mounts`` are the folders the runtime will give the engine (asked of the runtime, not guessed).
    """
    from modelyard.doctor.checkup import parallelism
    from modelyard.doctor.host import HostCheckRequest, check_host
    from modelyard.doctor.host_sources import NvmlGpuSource

    layout, speculative = parallelism(spec.family, version.version, parameters, env)
    pipeline_parallel = layout.pipeline_parallel if layout is not None else 1
    tensor_parallel = layout.tensor_parallel if layout is not None else len(replica_gpus)
    request = HostCheckRequest(
        backend_family=spec.family,
        backend_version=version.version,
        needs_gpu=bool(replica_gpus),
        gpu_indices=tuple(gpu.index for gpu in replica_gpus) or None,
        tensor_parallel_size=max(1, tensor_parallel),
        pipeline_parallel_size=pipeline_parallel,
        speculative_decoding=speculative,
        runs_in_container=version.runs_in_container,
        volume_mounts={mount.host_path: mount.engine_path for mount in mounts},
        model_path=Path(model.path),
        model_size_bytes=model.size_bytes,
    )
    # The inventory the server already holds (read by the controller), not a second NVML read.
    return check_host(request, gpus=NvmlGpuSource(read=lambda: inventory))


def run_preflight(
    *,
    deployment_name: str,
    model: ModelFile,
    spec: BackendSpec,
    version: BackendVersion,
    raw_backend_parameters: str | list[str],
    parameters: ParsedParameters,
    raw_env: str | list[str] | dict[str, str],
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    inventory: GpuInventory,
    replica_gpus: list[GpuInfo] | None = None,
    mounts: list[Mount] | None = None,
    worker_model_check: WorkerModelCheck | None = None,
    start_observations: Sequence[StartObservation] = (),
    estimate_summaries: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Run doctor's checks; raise ``PreflightFailed`` on errors, return the warnings as JSON.

    ``replica_gpus``: the GPUs one replica gets (the scheduler's choice, among ``inventory``'s);
    default: the explicit ids, else the first ``gpus_per_replica``.
    ``worker_model_check``: on a cluster, the model directory is checked on every GPU worker.
    ``start_observations``: this installation's starts, which correct the memory estimate;
    ``estimate_summaries``: given, the estimate's ``memory.summary`` finding is added to it.

    The parameters and env go in as the user typed them, so that doctor sees stray whitespace;
    ``parameters`` is ``raw_backend_parameters`` parsed (doctor and the host check read it, and
    do not parse again).
    """
    try:
        from modelyard.doctor.preflight import preflight_deployment
    except ImportError:
        logger.warning("doctor preflight is not available; deploying %s without it", deployment_name)
        return []
    from modelyard.doctor.findings import Severity

    if replica_gpus is None:
        replica_gpus = gpus_of_one_replica(inventory, gpus_per_replica, gpu_ids)
    findings = preflight_deployment(
        deployment_name=deployment_name,
        model_dir=model.path,
        engine=spec.family,
        version=version,
        backend_parameters=raw_backend_parameters,
        env=raw_env,
        gpus=replica_gpus,
        gpu_count=gpus_per_replica,
        start_observations=start_observations,
        parsed=parameters,
    )
    if model.on_server is False:
        # Only the workers have the files: the directory is checked there (below), not here.
        findings = [finding for finding in findings if not finding.check_id.startswith("model.")]
    findings += _host_findings(
        model,
        spec,
        version,
        parameters,
        parse_env(raw_env, strict=False),
        replica_gpus,
        inventory,
        mounts or [],
    )
    if worker_model_check is not None:
        from modelyard.doctor.worker_model import worker_model_findings

        workers, problems = worker_model_check(model.path)
        findings += worker_model_findings(model.path, workers, problems, model_name=model.name)
    findings += unverified_model_findings(model)
    errors = [finding for finding in findings if finding.severity is Severity.ERROR]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise PreflightFailed(
            f"doctor refused the deployment: {first.message}{more}",
            hint=first.fix or None,
            findings=[finding.to_json() for finding in findings],
        )
    if estimate_summaries is not None:  # the console's preflight shows the estimate itself
        estimate_summaries.extend(f.to_json() for f in findings if f.check_id == "memory.summary")
    # Kept on the deployment: warnings only (info findings are for `modelyard doctor`).
    return [finding.to_json() for finding in findings if finding.severity is Severity.WARNING]
