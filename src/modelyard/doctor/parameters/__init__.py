"""Checks of a planned start (``param.*`` and some ``model.*`` / ``host.*``), before the engine starts.

vLLM and SGLang flags are checked against the tables of their version
(``modelyard.backends.flag_tables``); transformers serve and custom engines get the checks that
need no table (stray characters, broken lines, env in the args, JSON values, env syntax). With the
model's config, the GPUs and the machine (``ParameterContext.host``) they also check the parallel
layout, what the config allows, the environment the engine calls through, and what the machine
gives a multi-GPU start. Every check id has an entry in ``docs/doctor/<area>.md``.

Usage::

    findings = check_parameters(
        engine="sglang", version="0.5.23",
        backend_parameters=["--tp-size 2", "SGLANG_ENABLE_SPEC_V2=1"],
        env=["SGLANG_ENABLE_SPEC_V2=1"],
        deployment_name="qwen", model=facts, gpus=gpus,
    )
"""

from __future__ import annotations

from collections.abc import Callable

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.chat_template import check_chat_template
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.doctor.parameters.environment import check_env_read, check_env_syntax
from modelyard.doctor.parameters.flags import check_auto_tool_choice, check_flags
from modelyard.doctor.parameters.flags_any_release import check_flags_any_release
from modelyard.doctor.parameters.joined_arguments import check_joined_arguments
from modelyard.doctor.parameters.kv_cache_dtype import check_kv_cache_dtype
from modelyard.doctor.parameters.launcher import check_launcher_options
from modelyard.doctor.parameters.layout import check_layout
from modelyard.doctor.parameters.machine import check_machine
from modelyard.doctor.parameters.model_config import check_model_config
from modelyard.doctor.parameters.model_family import check_mtp, check_parsers, check_served_model_name
from modelyard.doctor.parameters.model_path import check_model_path
from modelyard.doctor.parameters.network import check_hub_ids, check_proxy, check_visible_devices
from modelyard.doctor.parameters.nodes import check_nodes
from modelyard.doctor.parameters.ports import check_ports
from modelyard.doctor.parameters.scheduler_limits import check_scheduler_limits
from modelyard.doctor.parameters.text import (
    check_broken_lines,
    check_characters,
    check_command_in_arguments,
    check_env_in_arguments,
    check_json_values,
)
from modelyard.hardware.gpus import GpuInfo
from modelyard.modeldir import ModelFacts

Check = Callable[[ParameterContext], list[Finding]]
# Findings of one id shown one by one; more are counted in one finding (a pasted wall of text
# would otherwise give one finding per word).
MAX_FINDINGS_PER_ID = 10

CHECKS: tuple[Check, ...] = (
    check_command_in_arguments,
    check_characters,
    check_broken_lines,
    check_env_in_arguments,
    check_json_values,
    check_env_syntax,
    check_env_read,
    check_flags,
    check_flags_any_release,
    check_joined_arguments,
    check_launcher_options,
    check_auto_tool_choice,
    check_layout,
    check_nodes,
    check_model_config,
    check_model_path,
    check_kv_cache_dtype,
    check_scheduler_limits,
    check_proxy,
    check_hub_ids,
    check_visible_devices,
    check_machine,
    check_ports,
    check_parsers,
    check_mtp,
    check_served_model_name,
    check_chat_template,
)


def run_parameter_checks(context: ParameterContext) -> list[Finding]:
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(context))
    return bounded(findings)


def bounded(findings: list[Finding]) -> list[Finding]:
    """At most ``MAX_FINDINGS_PER_ID`` findings of each id, then one that counts the rest."""
    kept: list[Finding] = []
    extra: dict[str, list[Finding]] = {}
    counts: dict[str, int] = {}
    for finding in findings:
        counts[finding.check_id] = counts.get(finding.check_id, 0) + 1
        if counts[finding.check_id] <= MAX_FINDINGS_PER_ID:
            kept.append(finding)
        else:
            extra.setdefault(finding.check_id, []).append(finding)
    for check_id, rest in extra.items():
        first = rest[0]
        count = sum(int(finding.details.get("count", 1)) for finding in rest)
        kept.append(
            Finding(
                check_id,
                max((finding.severity for finding in rest), key=_SEVERITY_RANK.__getitem__),
                f"{count:,} more findings like: {first.message[:200]}",
                fix=first.fix,
                details={"count": count},
            )
        )
    return kept


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


def check_parameters(
    *,
    engine: str,
    version: str | None,
    backend_parameters: list[str] | str,
    env: dict[str, str] | list[str] | str,
    deployment_name: str | None = None,
    model: ModelFacts | None = None,
    gpus: list[GpuInfo] | None = None,
    gpu_count: int | None = None,
) -> list[Finding]:
    """Run every parameter check on one deployment's raw parameters and env; see the module doc."""
    context = ParameterContext.build(
        engine=engine,
        version=version,
        backend_parameters=backend_parameters,
        env=env,
        deployment_name=deployment_name,
        model=model,
        gpus=gpus,
        gpu_count=gpu_count,
    )
    return run_parameter_checks(context)


__all__ = ["CHECKS", "ParameterContext", "check_parameters", "run_parameter_checks"]
