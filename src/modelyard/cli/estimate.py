"""``modelyard estimate MODEL_DIR --gpus 2x48GB --backend vllm --args "..."``: will it fit?

Prints weights, KV cache and overheads per GPU, the KV tokens and concurrency at the context, and
the memory knob to use, on an idle GPU and (for this host's GPUs) on the GPUs as they are now.
Exit status 1 when the requested context does not fit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.backends.shell_words import split_words
from modelyard.cli.client import ApiClient
from modelyard.cli.context import stderr, stdout
from modelyard.cli.output import print_fields, print_json, print_table
from modelyard.doctor.memory import memory_findings
from modelyard.errors import InvalidInput, ModelyardError
from modelyard.estimate import MemoryEstimate, estimate_memory, gpu_specs_from_inventory, parse_gpu_specs
from modelyard.estimate.correction import (
    apply_correction,
    correction_for,
    observation_from_json,
    start_key,
)
from modelyard.estimate.estimate_result import correction_summary
from modelyard.hardware.gpus import read_gpu_inventory
from modelyard.modeldir import read_model_facts

GIB = 1 << 30


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / GIB:.2f} GiB"


def _mib(size_bytes: int) -> str:
    return f"{size_bytes / (1 << 20):.1f} MiB" if size_bytes < GIB else _gib(size_bytes)


def estimate_command(
    ctx: typer.Context,
    model: Path = typer.Argument(
        ..., help="A model directory, or a config.json (weights need not be there)."
    ),
    gpus: str | None = typer.Option(
        None,
        "--gpus",
        help="GPUs to plan for, e.g. 2x48GB, 4xH100, 1x80GiB. Default: this host's GPUs (NVML).",
    ),
    backend: str = typer.Option("vllm", "--backend", help="vllm or sglang."),
    args: list[str] = typer.Option(
        [], "--args", help="Backend parameters, as given to the engine (repeat or quote several)."
    ),
    engine_version: str | None = typer.Option(
        None, "--engine-version", help="Engine version (defaults differ)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    correct: bool = typer.Option(
        True,
        "--correct/--no-correct",
        help="Correct by the starts the server (--url) recorded for this engine version and GPU model.",
    ),
) -> None:
    """Estimate weights, KV cache and overheads per GPU, and whether the context fits."""
    if gpus is not None:
        specs = parse_gpu_specs(gpus)
    else:
        inventory = read_gpu_inventory()
        if not inventory.available:
            raise InvalidInput(
                f"no GPU on this host ({inventory.unavailable_reason})",
                hint="plan for other hardware with --gpus, e.g. --gpus 2x48GB",
            )
        specs = gpu_specs_from_inventory(inventory)
    facts = read_model_facts(model)
    estimate = estimate_memory(facts, backend.lower(), specs, list(args), engine_version=engine_version)
    if correct:
        estimate = _corrected(ctx, estimate, facts.architecture, list(args), engine_version)
    findings = memory_findings(estimate)
    if as_json:
        print_json({**estimate.to_json(), "findings": [finding.to_json() for finding in findings]})
    else:
        _print_estimate(facts.architecture, facts.dtype, estimate)
        for finding in findings:
            if finding.check_id != "memory.summary":
                stderr.print(f"{finding.severity}: {finding.message}", highlight=False)
                if finding.fix:
                    stderr.print(f"  fix: {finding.fix}", highlight=False)
    if not estimate.fits:
        raise typer.Exit(1)


def _corrected(
    ctx: typer.Context,
    estimate: MemoryEstimate,
    architecture: str | None,
    arguments: list[str],
    engine_version: str | None,
) -> MemoryEstimate:
    """The estimate corrected by the server's recorded starts of this engine version and GPU model
    (``estimate/correction.py``); unchanged when no server answers or it has none."""
    version = engine_version or _default_version(estimate.engine)
    if version is None:
        return estimate
    answer = ApiClient.from_context(ctx).get_or_none(
        "/start-observations", params={"engine": estimate.engine, "engine_version": version, "limit": 2000}
    )
    if not isinstance(answer, dict) or not answer.get("starts"):
        return estimate
    observations = [observation_from_json(row) for row in answer["starts"]]
    words = [word for argument in arguments for word in split_words(argument)]
    key = start_key(estimate, engine_version=version, architecture=architecture, parameters=words)
    correction = correction_for(key, observations, now=datetime.now(UTC))
    return estimate if correction is None else apply_correction(estimate, correction)


def _default_version(engine: str) -> str | None:
    try:
        return BackendCatalog(builtin=load_builtin_backends()).resolve_version(engine, None).version
    except ModelyardError:
        return None


def _print_estimate(architecture: str | None, dtype: str | None, estimate: MemoryEstimate) -> None:
    cache = estimate.cache
    default = " (default)" if estimate.memory_fraction_is_default else ""
    stdout.print(
        f"[bold]{architecture or 'model'}[/bold] ({dtype or '?'}) on {estimate.engine}: "
        f"{estimate.gpu_count} x {estimate.gpu.name}, "
        f"TP {estimate.tensor_parallel}, PP {estimate.pipeline_parallel}",
        highlight=False,
    )
    state = f", state {_mib(cache.state_bytes_per_sequence)} per sequence ({cache.state_dtype})"
    speculative = estimate.speculative
    print_fields(
        [
            ("weights per GPU", f"{_gib(estimate.weights_bytes)} (from {estimate.weights_source})"),
            (
                "KV cache per token",
                f"{cache.kv_bytes_per_token / 1024:.1f} KiB per GPU ({cache.kv_dtype})"
                + (state if cache.state_bytes_per_sequence else ""),
            ),
            *(
                [("speculative decoding", f"{speculative.describe()} (in the figures above)")]
                if speculative is not None
                else []
            ),
            ("activations", _gib(estimate.activation_bytes)),
            ("CUDA graphs", _gib(estimate.cuda_graph_bytes)),
            ("non-torch memory", _gib(estimate.non_torch_bytes)),
            ("memory knob", f"{estimate.memory_knob} {estimate.memory_fraction}{default}"),
            ("context", f"{estimate.context_tokens:,} tokens"),
        ]
    )
    plans = [estimate.plan_on_total] + ([estimate.plan_on_free] if estimate.plan_on_free else [])
    rows = [
        ["KV cache", *(_gib(plan.kv_cache_bytes) for plan in plans)],
        ["KV tokens", *(f"{plan.kv_cache_tokens:,}" for plan in plans)],
        ["max concurrency", *(f"{plan.max_concurrency}x" for plan in plans)],
        ["fits", *("yes" if plan.fits else "no" for plan in plans)],
    ]
    raw = [estimate.uncorrected_plan_on_total, estimate.uncorrected_plan_on_free][: len(plans)]
    if estimate.uncorrected_plan_on_total is not None:
        # The estimator's own figures, before this cluster's starts corrected them.
        rows[2:2] = [
            ["KV cache, uncorrected", *(_gib(plan.kv_cache_bytes) if plan else "-" for plan in raw)],
            ["KV tokens, uncorrected", *(f"{plan.kv_cache_tokens:,}" if plan else "-" for plan in raw)],
        ]
    print_table(["", *(f"{plan.basis} ({_gib(plan.gpu_memory_bytes)})" for plan in plans)], rows)
    if estimate.recommended_memory_fraction is not None:
        stdout.print(
            f"use: {estimate.memory_knob} {estimate.recommended_memory_fraction:.2f}", highlight=False
        )
    stdout.print(
        f"longest context at the safe maximum: {estimate.max_context_tokens_at_safe_fraction:,} tokens",
        highlight=False,
    )
    summary = correction_summary(estimate)
    if summary is not None:
        stdout.print(f"correction: {summary}", highlight=False)
    _print_stages(estimate)


def _print_stages(estimate: MemoryEstimate) -> None:
    """With pipeline parallelism, each stage on its own GPU (the figures above are the limiting one's)."""
    if len(estimate.stages) < 2:
        return
    print_table(
        ["stage", "layers", "GPU", "weights", "KV cache", "KV tokens", "fits"],
        [
            [
                f"{stage.index + 1}" + (" (limits)" if stage.index == estimate.limiting_stage else ""),
                f"{stage.first_layer}-{stage.last_layer}",
                f"{stage.gpu.name} ({_gib(stage.gpu.memory_total_bytes)})",
                _gib(stage.weights_bytes),
                _gib(stage.kv_cache_bytes),
                f"{stage.kv_cache_tokens:,}",
                "yes" if stage.fits else "no",
            ]
            for stage in estimate.stages
        ],
    )


def register(app: typer.Typer) -> None:
    """Add ``modelyard estimate`` to the root app."""
    app.command("estimate")(estimate_command)
