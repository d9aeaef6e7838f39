"""The controller's bridge to the doctor: diagnose a dead engine's log, verify a new instance.

The doctor is a library (``modelyard.doctor``); this file adapts its results to what the
controller stores on an instance (plain JSON).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from modelyard.backends.spec import BackendVersion
from modelyard.control.context import ControllerOptions

logger = logging.getLogger(__name__)

LOG_TAIL_BYTES = 64 * 1024


def read_log_tail(log_path: Path, size_bytes: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(log_path, "rb") as log_file:
            log_file.seek(0, 2)
            length = log_file.tell()
            log_file.seek(max(0, length - size_bytes))
            return log_file.read().decode(errors="replace")
    except OSError:
        return ""


def diagnose_engine_log(
    log_path: Path,
    *,
    exit_code: int | None = None,
    engine: str | None = None,
    engine_args: Sequence[str] = (),
    stalled_seconds: float | None = None,
    stall_after_seconds: float | None = None,
) -> str | None:
    """One line naming the problem and the fix, from the engine's log; None when nothing matched.

    ``exit_code`` (negative: killed by that signal) lets the doctor point at the host's OOM
    killer; ``engine`` and ``engine_args`` make the fix name the current values;
    ``stalled_seconds``: the engine is still starting and has printed nothing for that long, which
    is a stall from ``stall_after_seconds`` on (the doctor's ``STALL_SECONDS`` when None).
    """
    from modelyard.doctor.log_signatures import STALL_SECONDS, diagnose_log

    findings = diagnose_log(
        read_log_tail(log_path),
        exit_code=exit_code,
        engine=engine,
        engine_args=engine_args,
        stalled_seconds=stalled_seconds,
        stall_after_seconds=STALL_SECONDS if stall_after_seconds is None else stall_after_seconds,
    )
    if not findings:
        return None
    first = findings[0]
    return f"{first.message} (fix: {first.fix})" if first.fix else first.message


async def run_verification(
    *,
    client: httpx.AsyncClient,
    base_url: str,
    served_model_name: str,
    deployment_name: str,
    version: BackendVersion,
    model_details: dict[str, Any],
    options: ControllerOptions,
) -> list[dict[str, Any]]:
    """Run the doctor's verification suite, its time limits measured from the engine's speed
    (``options``: factor, floor, ceiling); each result as a JSON-able dict with ``status``."""
    from modelyard.doctor.verify import VerificationBudget, verify_instance

    budget = VerificationBudget(
        factor=options.verification_factor,
        floor_seconds=options.verification_floor_seconds,
        ceiling_seconds=options.verification_ceiling_seconds,
    )
    results = await verify_instance(
        budget=budget,
        base_url=base_url,
        served_model_name=served_model_name,
        expected_model_id=served_model_name,
        reasoning_field=version.reasoning_field,
        metrics_path=version.metrics_path,
        model_supports_tools=bool(model_details.get("chat_template_supports_tools", False)),
        model_supports_thinking=bool(model_details.get("chat_template_supports_thinking", False)),
        client=client,
        # Engines pinned to the model path (transformers serve) list their cache in /v1/models.
        listing_names_the_model=version.served_model_name == "model_name",
    )
    return [result.to_json() for result in results]


def failed_summary(results: list[dict[str, Any]]) -> str | None:
    """The failed checks in one line ("verify.chat-answer: no answer in time ..."); None: passed."""
    failed = [result for result in results if result.get("status") == "failed"]
    if not failed:
        return None
    return "; ".join(f"{result['check_id']}: {result.get('message', '')}" for result in failed)


def worth_retrying(results: list[dict[str, Any]]) -> bool:
    """True when every failed check failed for want of an answer (a time limit, a refused
    connection, HTTP 503): a busy engine, which a later run may find free. A wrong answer is a
    verdict on the deployment, and a retry would only repeat it."""
    failed = [result for result in results if result.get("status") == "failed"]
    return bool(failed) and all((result.get("details") or {}).get("retryable") for result in failed)
