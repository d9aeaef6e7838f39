"""CLI: ``modelyard tune``: which engine and which parameters serve a workload best on these GPUs.

    modelyard tune qwen3-8b --gpus 2xH100 --workload chat --slo 'ttft_p95<=500ms,tpot_p50<=40ms'
    modelyard tune qwen3-8b --gpus 1xH200 --backends vllm,sglang --max-num-seqs default,64,256 \\
        --budget 45m --out tune-report
    modelyard tune qwen3-8b --gpus 2xH100 --slo 'ttft_p99<=2s' --plan      # prune only, start nothing
    modelyard tune --resume 3f9c2a1b7d04                                  # go on after Ctrl-C

Candidates run one at a time as deployments of the server (``--url``), measured with the bench
through its gateway. Progress goes to stderr, the report to stdout (``--json`` for JSON), and
``report.json`` / ``report.md`` to the tune's folder (``<data-dir>/tunes/<id>``) and ``--out``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from modelyard.cli.context import cli_context, stderr, stdout
from modelyard.errors import InvalidInput
from modelyard.settings import METRICS_TOKEN_FILE_NAME

if TYPE_CHECKING:
    from modelyard.tune.draft_models import TargetModel
    from modelyard.tune.measurement import Measurement
    from modelyard.tune.pruning import Dropped
    from modelyard.tune.session import TuneRequest
    from modelyard.tune.space import Candidate


class _TerminalProgress:
    """The ``TuneProgress`` of the CLI: one line per step on stderr."""

    def __init__(self) -> None:
        self.runs = 0

    def candidate_starting(self, candidate: Candidate) -> None:
        stderr.print(f"starting {candidate.label} ...", highlight=False)

    def candidate_started(self, candidate: Candidate, seconds: float) -> None:
        stderr.print(f"  running after {seconds:.1f} s", highlight=False)

    def candidate_dropped(self, dropped: Dropped) -> None:
        stderr.print(
            f"  [red]dropped[/red] ({dropped.stage}): {dropped.reason}", highlight=False, markup=True
        )

    def measurement_started(self, candidate: Candidate, rung: int, requests_per_point: int) -> None:
        stderr.print(f"  rung {rung}: bench, {requests_per_point} requests per load", highlight=False)

    def measurement_finished(self, candidate: Candidate, measurement: Measurement) -> None:
        self.runs += 1
        figures = ", ".join(
            f"load {point.load:g}: {point.throughput:,.1f}/s" + ("" if point.valid else " (invalid)")
            for point in measurement.points
        )
        stderr.print(f"  run {self.runs} done in {measurement.duration_s:.1f} s: {figures}", highlight=False)

    def rung_finished(self, rung: int, promoted: list[Candidate]) -> None:
        names = "; ".join(candidate.label for candidate in promoted)
        stderr.print(f"rung {rung} done; on to rung {rung + 1}: {names}", highlight=False)


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def print_report(report: dict[str, Any]) -> None:
    """The report in the terminal: winners, how to deploy, the Pareto front, every candidate."""
    from rich.table import Table

    from modelyard.tune.gains import gain_text
    from modelyard.tune.report import acceptance_text, candidate_row

    slo_keys = [text.split("<=")[0] + "_ms" for text in report["slos"]]
    stdout.print(
        f"[bold]tune {report['tune_id']}[/bold]: {report['model']} on {report['gpus']}, workload "
        f"{report['workload']['name']}, {report['runs']} runs and {report['starts']} starts in "
        f"{report['spent_s']:.0f} s ({report['stopped_reason']})",
        highlight=False,
    )
    winners = Table(title="winners", title_justify="left")
    for column in ("SLOs", "candidate", "load", "throughput", *slo_keys):
        winners.add_column(column)
    for winner in report["winners"]:
        winners.add_row(
            winner["slos"],
            winner["label"],
            f"{winner['load']:g}",
            _figure(winner["throughput"]),
            *(_figure(winner.get(key)) for key in slo_keys),
        )
    if report["winners"]:
        stdout.print(winners)
    else:
        stdout.print("[yellow]no candidate met the SLOs at any load measured[/yellow]")
    gain = report.get("gain_over_defaults") or {}
    gains = report.get("gains_over_each_engines_defaults") or []
    if gain.get("winner_is_defaults"):
        stdout.print("the engine's defaults won: no knob tried did better")
    elif gain.get("ratio") and not gains:
        stdout.print(f"{gain['ratio']:.2f}x the throughput of the engine's defaults ({gain['defaults']})")
    for each in gains:
        if not each["is_winner"]:
            stdout.print(f"against {each['defaults']}: {gain_text(each)}", highlight=False, markup=False)
    if report.get("deploy"):
        stdout.print("deploy it with:", highlight=False)
        stdout.print(f"  {report['deploy']['command']}", highlight=False, markup=False, soft_wrap=True)
    front = Table(title=f"Pareto front: throughput against {slo_keys[0]}", title_justify="left")
    for column in ("candidate", "load", "throughput", slo_keys[0]):
        front.add_column(column)
    for point in report["pareto_front"]:
        front.add_row(
            point["label"], f"{point['load']:g}", _figure(point["throughput"]), _figure(point[slo_keys[0]])
        )
    stdout.print(front)
    rows = Table(title="candidates", title_justify="left")
    for column in ("rank", "candidate", "rung", "throughput within SLOs", "acceptance", "dropped"):
        rows.add_column(column, overflow="fold")
    for row in report["candidates"]:
        rung, best, dropped = candidate_row(row)
        rows.add_row(
            str(row["rank"] or "-"),
            row["label"],
            rung,
            _figure(best),
            acceptance_text(row),
            dropped,
        )
    stdout.print(rows)


def _axis_options(options: dict[str, Any], target: TargetModel) -> dict[str, Any]:
    from modelyard.tune.options import parse_axis, parse_kv_dtypes, parse_layouts, parse_prefix_caching
    from modelyard.tune.speculation import parse_speculation

    return {
        "tensor_parallel": parse_layouts(options["tp"], option="--tp"),
        "pipeline_parallel": parse_layouts(options["pp"], option="--pp"),
        "memory_fraction": parse_axis(
            options["memory"], float, option="--memory", example="default,0.85,0.92", low=0.05, high=0.99
        ),
        "max_sequences": parse_axis(
            options["max_num_seqs"], int, option="--max-num-seqs", example="default,64,256", low=1, high=65536
        ),
        "batched_tokens": parse_axis(
            options["batched_tokens"],
            int,
            option="--batched-tokens",
            example="default,8192",
            low=16,
            high=10_000_000,
        ),
        "kv_cache_dtype": parse_kv_dtypes(options["kv_cache_dtype"]),
        "prefix_caching": parse_prefix_caching(options["prefix_caching"]),
        "speculation": parse_speculation(
            options["speculative"],
            draft_model=options["draft_model"],
            target=target,
        ),
    }


def _engines(api: Any, backends: str, versions: list[str]) -> tuple[Any, ...]:
    from modelyard.errors import NotFound
    from modelyard.tune.options import parse_versions
    from modelyard.tune.space import EngineChoice

    wanted = parse_versions(versions)
    names = [name.strip() for name in backends.split(",") if name.strip()]
    if not names:
        raise InvalidInput("--backends is empty", hint="--backends vllm,sglang")
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise InvalidInput(f"--version names {', '.join(unknown)}, which --backends does not list")
    engines = []
    for name in names:
        status, spec = api.request("GET", f"/backends/{name}")
        if status == 404:
            raise NotFound(f"the server has no backend {name!r}", hint="see `modelyard backends`")
        if status >= 400 or not isinstance(spec, dict):
            raise InvalidInput(f"could not read backend {name!r} from the server (status {status})")
        known = [version["version"] for version in spec.get("versions", [])]
        for version in wanted.get(name, [spec["default_version"]]):
            if version not in known:
                raise InvalidInput(
                    f"backend {name!r} has no version {version!r}",
                    hint=f"its versions: {', '.join(known)} (see `modelyard backends`)",
                )
            engines.append(EngineChoice(name, str(spec.get("family")), version))
    return tuple(engines)


def _request(api: Any, options: dict[str, Any]) -> TuneRequest:
    from modelyard.estimate import parse_gpu_specs
    from modelyard.modeldir import read_model_facts
    from modelyard.tune.draft_models import TargetModel
    from modelyard.tune.environment import parse_env_options
    from modelyard.tune.options import parse_duration_s, split_engine_arguments
    from modelyard.tune.session import TuneRequest
    from modelyard.tune.slo import parse_slos
    from modelyard.tune.space import SearchSpace
    from modelyard.tune.tuner import TuneSettings
    from modelyard.tune.workloads import load_workload

    slos = parse_slos(options["slo"])
    workload = load_workload(options["workload"])
    try:
        gpus = parse_gpu_specs(options["gpus"])
    except (InvalidInput, ValueError) as error:
        raise InvalidInput(f"--gpus {options['gpus']!r}: {error}", hint="--gpus 2xH100 or 1x80GB") from error
    if not gpus:
        raise InvalidInput("--gpus names no GPU", hint="--gpus 2xH100")
    status, model = api.request("GET", f"/models/{options['model']}")
    if status == 404:
        raise InvalidInput(
            f"the server has no model {options['model']!r}", hint="see `modelyard models` (or add it first)"
        )
    model_dir = Path(options["model_dir"] or (model or {}).get("path") or "")
    facts = read_model_facts(model_dir) if (model_dir / "config.json").is_file() else None
    if facts is None:
        stderr.print(
            f"[yellow]warning:[/yellow] no config.json at {model_dir} on this host: the estimator cannot "
            "prune by memory (pass --model-dir)",
            highlight=False,
        )
    settings = TuneSettings(
        rungs=options["rungs"],
        requests_per_point=options["requests"],
        growth=options["growth"],
        keep_ratio=options["keep"],
        max_measurements=options["max_runs"],
        time_budget_s=parse_duration_s(options["budget"]) if options["budget"] else None,
    )
    engines = _engines(api, options["backends"], options["version"])
    scopes = {engine.backend for engine in engines} | {engine.family for engine in engines}
    common, scoped = split_engine_arguments(list(options["args"]), scopes)
    space = SearchSpace(
        engines=engines,
        **_axis_options(options, TargetModel.of(facts)),
        extra_arguments=common,
        engine_arguments=scoped,
        environment=parse_env_options(options["env"] or [], engines),
    )
    return TuneRequest(
        model=options["model"],
        model_facts=facts,
        gpus_text=options["gpus"],
        gpus=gpus,
        workload=workload,
        slos=slos,
        space=space,
        settings=settings,
        warmup_requests=options["warmup_requests"],
        knee_search=options["knee_search"],
    )


def _print_plan(request: TuneRequest) -> None:
    from modelyard.tune.session import plan_tune

    candidates, pruned = plan_tune(request)
    stdout.print(f"{len(candidates)} candidates, {len(pruned.kept)} to measure:", highlight=False)
    for candidate in pruned.kept:
        text = f"  {candidate.label}: {' '.join(candidate.arguments) or '(no flags)'}"
        if candidate.env:
            text += (
                " (env " + " ".join(f"{name}={value}" for name, value in candidate.shown_env.items()) + ")"
            )
        stdout.print(text, highlight=False, markup=False)
    for dropped in pruned.dropped:
        stdout.print(f"  [red]dropped[/red] {dropped.candidate.label} ({dropped.stage}): {dropped.reason}")


# The options that define a tune, kept in its tune.json for --resume (budgets may be given anew).
_RESUMED: tuple[str, ...] = (
    *("model", "gpus", "workload", "slo", "backends", "version", "tp", "pp", "memory"),
    *("max_num_seqs", "batched_tokens", "kv_cache_dtype", "prefix_caching", "args", "rungs"),
    *("speculative", "draft_model", "env"),
    *("requests", "growth", "keep", "warmup_requests", "model_dir", "gpu_ids", "knee_search"),
)


def tune_command(
    ctx: typer.Context,
    model: str | None = typer.Argument(None, help="A model registered on the server (`modelyard models`)."),
    gpus: str | None = typer.Option(
        None, "--gpus", help="The GPUs to plan for, as `modelyard estimate` takes them: 2xH100, 1x80GB."
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="Per-request objectives, e.g. 'ttft_p95<=500ms,tpot_p50<=40ms' (docs/tune.md)."
    ),
    workload: str = typer.Option(
        "chat", "--workload", help="chat, rag, code, batch, reasoning, bursts, or a YAML file (docs/tune.md)."
    ),
    backends: str = typer.Option("vllm", "--backends", help="Server backends to try, e.g. vllm,sglang."),
    version: list[str] = typer.Option(
        [], "--version", help="BACKEND=VERSION to try (repeatable; default: each backend's default)."
    ),
    tp: str = typer.Option("1", "--tp", help="Tensor-parallel sizes, e.g. 1,2."),
    pp: str = typer.Option("1", "--pp", help="Pipeline-parallel sizes, e.g. 1,2."),
    memory: str = typer.Option("default", "--memory", help="Memory knob values, e.g. default,0.85,0.92."),
    max_num_seqs: str = typer.Option(
        "default,64,256", "--max-num-seqs", help="Sequences at once (SGLang: --max-running-requests)."
    ),
    batched_tokens: str = typer.Option(
        "default,8192", "--batched-tokens", help="Batched / chunked-prefill tokens per step."
    ),
    kv_cache_dtype: str = typer.Option(
        "default", "--kv-cache-dtype", help="KV cache dtypes, e.g. default,fp8."
    ),
    prefix_caching: str = typer.Option("default", "--prefix-caching", help="default, on, off (any of them)."),
    speculative: str = typer.Option(
        "off",
        "--speculative",
        help="Speculative decoding to try: off, auto, ngram[:TOKENS], draft, eagle, eagle3, mtp "
        "(e.g. off,ngram:4; auto: what the model and --draft-model allow).",
    ),
    draft_model: str | None = typer.Option(
        None,
        "--draft-model",
        help="The draft's directory on this host: a small model (draft) or an EAGLE / EAGLE-3 head.",
    ),
    args: list[str] = typer.Option(
        [],
        "--args",
        help="More backend parameters for every candidate, or BACKEND:PARAMETERS for one backend's "
        "(repeatable).",
    ),
    env: list[str] = typer.Option(
        [],
        "--env",
        help="KEY=VALUE for every candidate's engine, or BACKEND:KEY=VALUE for one backend's "
        "(repeatable; secret values are never written down).",
    ),
    rungs: int = typer.Option(3, "--rungs", help="Rounds of successive halving."),
    requests: int = typer.Option(32, "--requests", help="Requests per load in the first round."),
    growth: int = typer.Option(2, "--growth", help="Each round runs this many times more requests."),
    keep: int = typer.Option(2, "--keep", help="Each round keeps the best 1/KEEP."),
    warmup_requests: int = typer.Option(
        0, "--warmup-requests", help="Excluded requests at each load's start."
    ),
    knee_search: bool = typer.Option(
        True,
        "--knee-search/--no-knee-search",
        help="In the last round, search each finalist's saturation knee (bench search) for its best load.",
    ),
    max_runs: int | None = typer.Option(None, "--max-runs", help="Stop after this many bench runs in all."),
    budget: str | None = typer.Option(
        None, "--budget", help="Stop before this much time is spent: 90s, 45m, 2h."
    ),
    model_dir: str | None = typer.Option(
        None,
        "--model-dir",
        help="The model's directory here, for the estimator (default: the server's path).",
    ),
    gpu_ids: str | None = typer.Option(None, "--gpu-ids", help="Run the candidates on these GPUs, e.g. 0,1."),
    verify: bool = typer.Option(False, "--verify", help="Run the verification suite on each candidate."),
    start_timeout_s: float = typer.Option(
        1800.0, "--start-timeout", help="Seconds a candidate may take to run."
    ),
    plan: bool = typer.Option(
        False, "--plan", help="Show the candidates and what pruning drops; start nothing."
    ),
    resume: str | None = typer.Option(
        None, "--resume", help="Go on with the tune of this id (its arguments)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Also copy report.json and report.md here."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Find the engine and parameters that serve a workload best within SLOs (successive halving)."""
    from modelyard.cli.client import ENV_PASSWORD, read_admin_password, read_cli_token
    from modelyard.tune.environment import restore_secrets
    from modelyard.tune.journal import Journal
    from modelyard.tune.options import parse_gpu_ids
    from modelyard.tune.server_deployer import HttpServerApi, ServerDeployer
    from modelyard.tune.session import run_tune

    context = cli_context(ctx)
    options: dict[str, Any] = dict(locals())
    if resume is not None:
        stored = Journal.arguments_of(context.resolved_data_dir, resume).get("cli") or {}
        options.update({name: stored[name] for name in _RESUMED if name in stored})
        # tune.json keeps secret values masked: they are given again with --env.
        options["env"] = restore_secrets(stored.get("env") or [], env)
    for name, flag in (("model", "MODEL"), ("gpus", "--gpus"), ("slo", "--slo")):
        if not options[name]:
            raise InvalidInput(
                f"{flag} is missing", hint="modelyard tune MODEL --gpus 2xH100 --slo 'ttft_p95<=500ms'"
            )
    import os

    password = os.environ.get(ENV_PASSWORD)
    token = None if password else read_cli_token(context.resolved_data_dir)
    if password is None and token is None:
        password, _source = read_admin_password(context.resolved_data_dir)
    api = HttpServerApi(context.url, password=password, token=token)
    try:
        request = _request(api, options)
        if plan:
            _print_plan(request)
            return
        arguments = request.arguments()
        cli_options = {name: options[name] for name in _RESUMED}
        cli_options["env"] = [setting.option_text for setting in request.space.environment]
        journal = Journal.open(context.resolved_data_dir, arguments, cli=cli_options)
        stderr.print(
            f"tune {journal.tune_id} (state in {journal.folder}; rerun the same command, or "
            f"`modelyard tune --resume {journal.tune_id}`, to go on after an interruption)",
            highlight=False,
        )
        ids = parse_gpu_ids(options["gpu_ids"]) if options["gpu_ids"] else None
        # The server's scrape token, there when it runs on this host.
        token_file = context.resolved_data_dir / METRICS_TOKEN_FILE_NAME
        deployer = ServerDeployer(
            api,
            journal.tune_id,
            options["model"],
            metrics_token_file=token_file,
            skip_verification=not verify,
            start_timeout_s=start_timeout_s,
            gpu_ids=ids,
            on_leftovers=lambda names: stderr.print(
                f"removed {len(names)} deployment(s) an interrupted session left: {', '.join(names)}",
                highlight=False,
            ),
        )
        try:
            result = run_tune(
                request,
                context.resolved_data_dir,
                deployer_for=lambda _tune_id: deployer,
                progress=_TerminalProgress(),
            )
        except KeyboardInterrupt:
            stderr.print(
                f"\ninterrupted; every finished run is kept: `modelyard tune --resume {journal.tune_id}`"
                " goes on",
                highlight=False,
            )
            raise typer.Exit(130) from None
        finally:
            deployer.close()
    finally:
        api.close()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(result.report_json, out / result.report_json.name)
        shutil.copy(result.report_markdown, out / result.report_markdown.name)
    if as_json:
        sys.stdout.write(json.dumps(result.report, indent=2) + "\n")
    else:
        print_report(result.report)
    stderr.print(f"wrote {result.report_json} and {result.report_markdown.name}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_command)
