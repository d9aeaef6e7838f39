"""Checks of the environment the engine talks through: proxies, the model hub, the visible GPUs.

Ids: ``param.proxy-intercepts-engine`` (SGLang's requests to itself go to an HTTP proxy),
``param.offline-hub-id`` (a hub id to load while the hub is switched off), ``param.hub-id-argument``
(a hub id the engine downloads at start), ``param.visible-devices-mismatch`` (CUDA_VISIBLE_DEVICES
set for the engine).
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.host_facts import hub_cache_dir
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.doctor.parameters.layout import context_layout

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# Flags whose value names a model or tokenizer the engine loads (a path, or a hub id to download).
MODEL_FLAGS = (
    "--model",
    "--tokenizer",
    "--speculative-model",
    "--speculative-draft-model-path",
    "--tokenizer-path",
    "--model-path",
)
# SGLang sends its warmup and model-info requests over HTTP to the address it listens on.
SGLANG_DEFAULT_HOST = "127.0.0.1"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether ``host`` is in a NO_PROXY list the way Python's requests and httpx read it."""
    entries = [entry.strip().lower() for entry in no_proxy.replace(" ", ",").split(",") if entry.strip()]
    target = host.strip("[]").lower()
    for entry in entries:
        if entry == "*":
            return True
        bare = entry.split(":")[0] if entry.count(":") == 1 else entry
        if bare == target or (bare.startswith(".") and target.endswith(bare)) or target.endswith("." + bare):
            return True
        try:
            if "/" in bare and ipaddress.ip_address(target) in ipaddress.ip_network(bare, strict=False):
                return True
        except ValueError:
            continue
    return False


def check_proxy(context: ParameterContext) -> list[Finding]:
    if context.engine != "sglang":
        return []
    environment = context.engine_environment
    proxies = [name for name in PROXY_VARIABLES if environment.get(name, "").strip()]
    if not proxies:
        return []
    host = (context.parameters.value_of("--host") or SGLANG_DEFAULT_HOST).strip() or SGLANG_DEFAULT_HOST
    no_proxy = environment.get("no_proxy") or environment.get("NO_PROXY") or ""
    if _bypassed(host, no_proxy):
        return []
    listed = f"NO_PROXY={no_proxy!r}" if no_proxy else "no NO_PROXY"
    return [
        Finding(
            "param.proxy-intercepts-engine",
            Severity.ERROR,
            f"{proxies[0]} is set and {listed} does not cover {host}: SGLang's warmup requests to itself "
            f"(http://{host}:PORT/get_model_info, /generate) would go to the proxy, which answers 403/502, "
            'and SGLang stops with "Initialization failed. warmup error"',
            fix=f"add {host},127.0.0.1,localhost to NO_PROXY (and no_proxy) in the deployment env, or unset "
            f"{proxies[0]} for the engine",
            details={"proxy_variable": proxies[0], "host": host, "no_proxy": no_proxy},
        )
    ]


def _named_models(context: ParameterContext) -> list[tuple[str, str]]:
    """(where, value) of each model or tokenizer the engine will load."""
    named: list[tuple[str, str]] = []
    if context.model_argument:
        named.append(("the model", context.model_argument))
    for flag in MODEL_FLAGS:
        value = context.parameters.value_of(flag)
        if value:
            named.append((flag, value))
    speculative = context.parameters.value_of("--speculative-config")
    if speculative:
        try:
            loaded = json.loads(speculative)
        except json.JSONDecodeError:
            loaded = None
        if isinstance(loaded, dict) and isinstance(loaded.get("model"), str):
            named.append(("--speculative-config model", loaded["model"]))
    return named


def _hub_id(value: str) -> bool:
    if not HUB_ID.match(value) or value.startswith((".", "~")):
        return False
    return not Path(value).exists()


def _cached(value: str, context: ParameterContext) -> bool:
    cache = context.host.hub_cache_dir if context.host and context.host.hub_cache_dir else None
    cache = cache or hub_cache_dir(context.engine_environment)
    owner, name = value.split("/", 1)
    return (cache / f"models--{owner}--{name}" / "snapshots").is_dir()


def check_hub_ids(context: ParameterContext) -> list[Finding]:
    if context.engine not in {"vllm", "sglang"}:
        return []
    environment = context.engine_environment
    offline = next((name for name in OFFLINE_VARIABLES if _truthy(environment.get(name))), None)
    findings: list[Finding] = []
    for where, value in _named_models(context):
        if not _hub_id(value):
            continue
        if offline and not _cached(value, context):
            findings.append(
                Finding(
                    "param.offline-hub-id",
                    Severity.ERROR,
                    f"{where} is the hub id {value!r} while {offline}=1 switches the hub off, and it is not "
                    'in the hub cache; the engine cannot resolve it ("OfflineModeIsEnabled: Cannot reach '
                    'https://huggingface.co")',
                    fix=f"give the local directory of {value} instead of its id, or download it first, or "
                    f"unset {offline}",
                    details={"where": where, "hub_id": value, "variable": offline},
                )
            )
        elif not offline and where != "the model":
            findings.append(
                Finding(
                    "param.hub-id-argument",
                    Severity.WARNING,
                    f"{where} {value} is a Hugging Face hub id: the engine downloads it at every start, "
                    "which fails on a host without internet or for a gated repository without HF_TOKEN",
                    fix=f"download {value} once and give its local directory",
                    details={"where": where, "hub_id": value},
                )
            )
    return findings


def check_visible_devices(context: ParameterContext) -> list[Finding]:
    value = context.deployment_environment.get("CUDA_VISIBLE_DEVICES")
    if value is None or context.engine not in {"vllm", "sglang"}:
        return []
    visible = [item for item in value.split(",") if item.strip()]
    needed = context_layout(context).gpus_needed
    if len(visible) < needed:
        problem = (
            f"CUDA_VISIBLE_DEVICES={value} shows the engine {len(visible)} GPU(s) but the layout needs "
            f"{needed}; the ranks past the visible ones find no device"
        )
    elif len(visible) > max(needed, len(context.gpus or ())):
        problem = (
            f"CUDA_VISIBLE_DEVICES={value} shows the engine {len(visible)} GPUs and the layout uses the "
            f"first {needed} ({','.join(visible[:needed])}): replicas given the same list share those GPUs "
            "and run out of memory"
        )
    else:
        # No more GPUs listed than the replica has: the engine starts on the first ones it needs
        # (torch numbers the listed GPUs from 0); only modelyard's own launch
        # (backends/render.py) refuses the variable, with its own message.
        return [
            Finding(
                "param.visible-devices-mismatch",
                Severity.WARNING,
                f"the env sets CUDA_VISIBLE_DEVICES={value}: the engine starts on the first {needed} of "
                "these GPUs, but a modelyard deployment refuses the variable, since it assigns each "
                "replica's GPUs itself",
                fix="for a modelyard deployment remove CUDA_VISIBLE_DEVICES from the env and choose the GPUs "
                "with the deployment's GPU ids or GPUs per replica",
                details={"visible": visible, "needed_gpus": needed},
            )
        ]
    return [
        Finding(
            "param.visible-devices-mismatch",
            Severity.ERROR,
            problem,
            fix="remove CUDA_VISIBLE_DEVICES from the env: modelyard sets it for each replica from the GPUs "
            "it places it on (choose them with the deployment's GPU ids or GPUs per replica)",
            details={"visible": visible, "needed_gpus": needed},
        )
    ]
