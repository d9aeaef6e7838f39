"""The console's preflight: every check of creating a deployment, run while the user types, with
nothing stored (``deployments.check_deployment``), and the verdict as data instead of an error.

Usage::

    verdict = preflight_deployment_request(session, DeploymentRequest(model="tiny"), inventory)
    verdict.ok, verdict.findings, verdict.error
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from modelyard.control.scheduler import Worker
from modelyard.errors import ModelyardError
from modelyard.hardware.gpus import GpuInventory
from modelyard.services.deployment_checks import PreflightFailed
from modelyard.services.deployment_request import DeploymentRequest
from modelyard.services.deployment_secrets import shown_arguments, shown_env
from modelyard.services.deployments import check_deployment
from modelyard.store.tables import Deployment


@dataclass
class PreflightVerdict:
    """``ok``: creating it now would be accepted. ``findings``: doctor's (errors, warnings)."""

    ok: bool
    findings: list[dict[str, Any]] = field(default_factory=list)
    error: ModelyardError | None = None
    deployment: Deployment | None = None

    def planned(self) -> dict[str, Any] | None:
        """What would be stored: name, backend and version, GPUs, parameters and env as split."""
        if self.deployment is None:
            return None
        deployment = self.deployment
        return {
            "name": deployment.name,
            "backend": deployment.backend,
            "backend_version": deployment.backend_version,
            "replicas": deployment.replicas,
            "gpus_per_replica": deployment.gpus_per_replica,
            "gpu_ids": deployment.gpu_ids,
            "backend_parameters": shown_arguments(deployment.backend_parameters),
            "env": shown_env(deployment.env),
        }


def preflight_deployment_request(
    session: Session, request: DeploymentRequest, inventory: GpuInventory, workers: list[Worker] | None = None
) -> PreflightVerdict:
    """``workers``: as the controller last read them (default: this host alone)."""
    summaries: list[dict[str, Any]] = []
    try:
        deployment = check_deployment(
            session, request, inventory, workers=workers, estimate_summaries=summaries
        )
    except PreflightFailed as error:
        return PreflightVerdict(ok=False, findings=error.details["findings"], error=error)
    except ModelyardError as error:
        return PreflightVerdict(ok=False, error=error)
    finally:
        session.rollback()
    # The warnings it would keep, and the memory estimate (corrected by this installation's starts).
    return PreflightVerdict(ok=True, findings=[*deployment.warnings, *summaries], deployment=deployment)
