"""What a rule over the log's facts returns: a finding marked as read from facts, and where an
exception was raised, named from the package down (``vllm/v1/worker/gpu_model_runner.py:_dummy_run``)."""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.log_facts import RaisedException


def fact_finding(check_id: str, message: str, fix: str, line: str, **details: object) -> Finding:
    return Finding(
        check_id=check_id,
        severity=Severity.ERROR,
        message=message,
        fix=fix,
        details={"line": line[:400], "read_from": "facts", **details},
    )


def where(exception: RaisedException) -> str:
    frame = exception.raised_in
    if frame is None:
        return exception.name
    path = frame.path.replace("\\", "/")
    for package in ("vllm/", "sglang/", "torch/", "transformers/", "ray/"):
        if package in path:
            path = package + path.rsplit(package, 1)[1]
            break
    return f"{exception.name} raised in {path}:{frame.function}"
