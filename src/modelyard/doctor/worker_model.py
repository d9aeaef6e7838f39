"""The model directory on the cluster's workers: an engine reads its weights on the host it runs
on, so on a cluster the directory must be at the same path on every worker a replica may land on.

The server runs the model directory's inspection as a Ray task on each ready GPU worker (before
a deployment is stored: ``cluster/workers.py``; and on the chosen worker before each start: the
Ray runtime) and gives the answers here.

Usage::

    findings = worker_model_findings("/models/qwen", ["gpu-1", "gpu-2"], {"gpu-2": "... does not exist"})
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity

NAMES_SHOWN = 5


def _where(problems: dict[str, str]) -> str:
    shown = [f"{name}: {problem}" for name, problem in sorted(problems.items())[:NAMES_SHOWN]]
    more = len(problems) - NAMES_SHOWN
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def worker_model_findings(
    model_path: str, workers: list[str], problems: dict[str, str], *, model_name: str | None = None
) -> list[Finding]:
    """An error when no GPU worker can read the model, a warning naming the ones that cannot;
    with ``model_name``, the fix is the command that copies it there (``models push``)."""
    lacking = {name: problem for name, problem in problems.items() if name in workers}
    if not workers or not lacking:
        return []
    names = sorted(lacking)[:NAMES_SHOWN]
    push = (
        f"modelyard models push {model_name} " + " ".join(f"--worker {name}" for name in names)
        if model_name
        else None
    )
    details = {"model_path": model_path, "workers": workers, "problems": lacking}
    if len(lacking) == len(workers):
        return [
            Finding(
                check_id="model.missing-on-workers",
                severity=Severity.ERROR,
                message=f"the model directory {model_path} is not usable on any GPU worker "
                f"({_where(lacking)})",
                fix=(
                    f"copy it there: {push} (or put it at {model_path} on the workers yourself, or mount a "
                    "shared file system there)"
                    if push
                    else f"copy the model to {model_path} on the workers (the same path as on the "
                    "server), or mount a shared file system there"
                ),
                details=details,
            )
        ]
    return [
        Finding(
            check_id="model.missing-on-some-workers",
            severity=Severity.WARNING,
            message=f"the model directory {model_path} is not usable on {len(lacking)} of {len(workers)} GPU "
            f"workers ({_where(lacking)}): replicas are placed only on the workers that have it",
            fix=(
                f"copy it there: {push}"
                if push
                else f"copy the model to {model_path} on those workers, or keep the deployment off them "
                "with a placement selector (--worker, --worker-label)"
            ),
            details=details,
        )
    ]
