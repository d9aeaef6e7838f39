"""Doctor's preflight, as the deployment service runs it before storing a deployment.

Errors refuse the deployment (400, the findings in the body's ``details``); warnings are kept
on the deployment to show in ``ps`` and the console.
"""

from __future__ import annotations

import logging
from typing import Any

from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.errors import InvalidInput
from modelyard.hardware.gpus import GpuInventory
from modelyard.store.tables import ModelFile

logger = logging.getLogger(__name__)


class PreflightFailed(InvalidInput):
    """Doctor found errors: the deployment would not work as asked. ``details`` lists the findings."""

    code = "preflight_failed"

    def __init__(self, message: str, *, findings: list[dict[str, Any]], hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.details = {"findings": findings}


def run_preflight(
    *,
    model: ModelFile,
    spec: BackendSpec,
    version: BackendVersion,
    backend_parameters: list[str],
    env: dict[str, str],
    gpus_per_replica: int,
    inventory: GpuInventory,
) -> list[dict[str, Any]]:
    """Run doctor's checks; raise ``PreflightFailed`` on errors, return the other findings as JSON."""
    try:
        from modelyard.doctor.preflight import preflight_deployment  # type: ignore[import-not-found]
    except ImportError:
        logger.debug("doctor preflight is not available; deploying without it")
        return []
    from modelyard.doctor.findings import Severity

    findings = preflight_deployment(
        model_path=model.path,
        backend=spec,
        version=version,
        backend_parameters=backend_parameters,
        env=env,
        gpus_per_replica=gpus_per_replica,
        inventory=inventory,
    )
    errors = [finding for finding in findings if finding.severity is Severity.ERROR]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise PreflightFailed(
            f"doctor refused the deployment: {first.message}{more}",
            hint=first.fix or None,
            findings=[finding.to_json() for finding in findings],
        )
    return [finding.to_json() for finding in findings]
