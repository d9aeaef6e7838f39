"""CLI: ``modelyard doctor``: find what would break a deployment, with the fix named.

    modelyard doctor                                   # this host
    modelyard doctor --deployment qwen                 # a deployment of the server at --url
    modelyard doctor --model-dir /models/Qwen3.6-27B --backend vllm --version 0.25.0 \\
        --args "--tensor-parallel-size 2 --max-model-len 32768" --env VLLM_LOGGING_LEVEL=DEBUG [--gpus 2x48GB]
    modelyard doctor --log engine.log --backend vllm   # explain an engine log
    modelyard doctor --log engine.log --stalled-for 900 # a start silent for 15 minutes: which stage

Each form prints a table (severity, check, message and fix, a numbered link listed under the
table) or, with ``--json``, the findings as JSON. The exit status is 1 when any error is found, 0
otherwise.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import typer

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.backends.flag_tables import FlagTable, load_flag_table
from modelyard.backends.spec import BackendSpec
from modelyard.cli.context import CliContext, cli_context, stderr, stdout
from modelyard.cli.output import print_json
from modelyard.doctor.findings import Finding, Severity, has_errors
from modelyard.errors import InvalidInput, ModelyardError

_SEVERITY_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_LOG_TAIL_LINES = 400


def print_findings(
    findings: list[Finding], *, as_json: bool, title: str, flag_table: FlagTable | None = None
) -> None:
    """The findings as a table (or JSON), their documentation links under it; a summary on stderr.

    JSON: ``{"flag_table": ..., "findings": [...]}``; ``flag_table`` names the engine release
    whose flag table the flags were checked against (null when no flags were checked).
    """
    if as_json:
        print_json(
            {
                "flag_table": _flag_table_json(flag_table),
                "findings": [finding.to_json() for finding in findings],
            }
        )
        return
    from rich.text import Text

    from modelyard.cli.output import Column, print_table

    if not findings:
        stdout.print(f"{title}: nothing found", highlight=False)
        return
    links: list[str] = []
    rows = []
    for finding in findings:
        if finding.doc_url and finding.doc_url not in links:
            links.append(finding.doc_url)
        reference = f"[{links.index(finding.doc_url) + 1}]" if finding.doc_url else None
        text = finding.message + (f"\nfix: {finding.fix}" if finding.fix else "")
        severity = Text(str(finding.severity), style=_SEVERITY_STYLE[finding.severity])
        rows.append([severity, finding.check_id, text, reference])
    columns = [
        Column("SEVERITY"),
        Column("CHECK", max_width=36),
        Column("FINDING", wraps=True),
        Column("DOC"),
    ]
    print_table(columns, rows, title=title, links=links)
    counts = {severity: sum(1 for f in findings if f.severity is severity) for severity in Severity}
    stderr.print(
        f"{counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), "
        f"{counts[Severity.INFO]} note(s)",
        highlight=False,
    )


def _flag_table_json(table: FlagTable | None) -> dict[str, Any] | None:
    if table is None:
        return None
    return {
        "engine": table.engine,
        "requested_version": table.requested_version,
        "version": table.version,
        "exact": table.exact,
        "match": table.match,
    }


def _finish(
    findings: list[Finding], *, as_json: bool, title: str, flag_table: FlagTable | None = None
) -> None:
    print_findings(findings, as_json=as_json, title=title, flag_table=flag_table)
    if has_errors(findings):
        raise typer.Exit(1)


def _is_local(url: str) -> bool:
    host = urlparse(url).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def _spec_from_json(data: dict[str, Any]) -> BackendSpec:
    """A backend as ``GET /api/v1/backends/{name}`` returns it (versions as a list, each with what
    the server derives from it, ``effective_pull_policy``, which is not part of the spec)."""
    document = {key: value for key, value in data.items() if key != "deployments"}
    versions = document.get("versions")
    if isinstance(versions, list):
        derived = {"effective_pull_policy"}
        document["versions"] = {
            version["version"]: {key: value for key, value in version.items() if key not in derived}
            for version in versions
        }
    return BackendSpec.model_validate(document)


def _doctor_model_dir(
    context: CliContext,
    *,
    model_dir: Path,
    backend: str,
    version: str | None,
    arguments: str,
    env: list[str],
    gpus: str | None,
) -> tuple[list[Finding], FlagTable | None]:
    """The checkup's findings, and the flag table they were checked against."""
    from modelyard.doctor.checkup import deployment_checkup, preflight_available

    catalog = BackendCatalog(builtin=load_builtin_backends())
    spec = catalog.get(backend)
    # Any vLLM or SGLang release, listed in the catalog or not: its flag table answers.
    backend_version = catalog.version_for_checks(backend, version)
    gpu_specs = None
    if gpus is not None:
        from modelyard.estimate.gpus import parse_gpu_specs

        gpu_specs = parse_gpu_specs(gpus)
    if not preflight_available():
        stderr.print(
            "[yellow]note:[/yellow] this build has no parameter checks (modelyard.doctor.preflight): "
            "engine flags were not checked",
            highlight=False,
        )
    findings = deployment_checkup(
        model_dir=model_dir.expanduser(),
        spec=spec,
        version=backend_version,
        backend_parameters=arguments,
        env=env,
        gpu_specs=gpu_specs,
        data_dir=context.resolved_data_dir,
    )
    return findings, load_flag_table(spec.family, backend_version.version)


def _read_tail(path: Path, size_bytes: int = 64 * 1024) -> str:
    with path.open("rb") as log_file:
        log_file.seek(0, 2)
        log_file.seek(max(0, log_file.tell() - size_bytes))
        return log_file.read().decode(errors="replace")


def _instance_findings(
    client: Any, name: str, deployment: dict[str, Any], family: str, parameters: list[str], *, local: bool
) -> list[Finding]:
    from modelyard.doctor.log_signatures import diagnose_log

    findings: list[Finding] = []
    for instance in deployment.get("instances") or []:
        label = f"replica {instance.get('replica_index')} (instance {instance.get('id')})"
        log_path = instance.get("log_path")
        if log_path and (instance.get("state") != "running" or instance.get("restart_count")):
            if local and Path(log_path).is_file():
                text = _read_tail(Path(log_path))
            else:
                text = client.get_text(
                    f"/deployments/{name}/logs",
                    params={"instance": instance.get("id"), "tail": _LOG_TAIL_LINES},
                )
            for finding in diagnose_log(text, engine=family, engine_args=parameters):
                findings.append(
                    Finding(
                        finding.check_id,
                        finding.severity,
                        f"{label}: {finding.message}",
                        finding.fix,
                        {**finding.details, "instance_id": instance.get("id")},
                    )
                )
        for result in instance.get("verification") or []:
            if isinstance(result, dict) and result.get("status") == "failed":
                findings.append(
                    Finding(
                        str(result.get("check_id", "verify.unknown")),
                        Severity.ERROR,
                        f"{label}: {result.get('message', '')}",
                        "the instance stays out of rotation until this passes; see the link",
                        {"instance_id": instance.get("id")},
                    )
                )
    return findings


def _log_findings(log: Path, backend: str | None, stalled_for: float | None) -> list[Finding]:
    """The log's findings; a start with no progress for ``stalled_for`` seconds (given, or read from
    the file: ``doctor.log_quiet``) is ``log.stalled`` with the stage it stopped in."""
    import time

    from modelyard.doctor.log_quiet import log_ended, log_quiet, log_says_serving
    from modelyard.doctor.log_signatures import STALL_SECONDS, diagnose_log

    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise InvalidInput(f"cannot read {log}: {error.strerror}") from error
    if stalled_for is not None:
        # The user says the start is silent: any length counts.
        return diagnose_log(text, engine=backend, stalled_seconds=stalled_for, stall_after_seconds=0.0)
    if log_ended(text) or log_says_serving(text):
        return diagnose_log(text, engine=backend)
    quiet = log_quiet(log, text, now=time.time())
    return diagnose_log(
        text, engine=backend, stalled_seconds=quiet.seconds, stall_after_seconds=STALL_SECONDS
    )


def _doctor_deployment(context: CliContext, name: str) -> tuple[list[Finding], FlagTable | None]:
    from modelyard.cli.client import ApiClient
    from modelyard.doctor.checkup import deployment_checkup, sort_findings

    client = ApiClient.from_cli(context)
    try:
        deployment = client.get(f"/deployments/{name}")
        if not isinstance(deployment, dict) or "backend" not in deployment:
            raise InvalidInput(
                f"the server at {context.url} did not return deployment {name!r} in the expected shape",
                hint="is --url a modelyard server of this version?",
            )
        spec = _spec_from_json(client.get(f"/backends/{deployment['backend']}"))
        version = spec.versions.get(str(deployment.get("backend_version")))
        if version is None:
            raise InvalidInput(
                f"deployment {name!r} uses {spec.name} version {deployment.get('backend_version')!r}, "
                "which the server no longer lists",
                hint="change the deployment's backend version",
            )
        parameters = [str(item) for item in deployment.get("backend_parameters") or []]
        findings: list[Finding] = []
        if _is_local(context.url):
            findings.extend(
                deployment_checkup(
                    model_dir=Path(deployment["model_path"]),
                    spec=spec,
                    version=version,
                    # Stored arguments are already split: one quoted line keeps them whole.
                    backend_parameters=shlex.join(parameters),
                    env={str(k): str(v) for k, v in (deployment.get("env") or {}).items()},
                    deployment_name=name,
                    gpu_ids=deployment.get("gpu_ids") or None,
                    data_dir=context.resolved_data_dir,
                )
            )
        else:
            stderr.print(
                f"[yellow]note:[/yellow] the server at {context.url} is not on this host: model directory "
                "and host checks were skipped (run `modelyard doctor` there)",
                highlight=False,
            )
        findings.extend(
            _instance_findings(
                client, name, deployment, spec.family, parameters, local=_is_local(context.url)
            )
        )
    finally:
        client.close()
    return sort_findings(findings), load_flag_table(spec.family, version.version)


def register(app: typer.Typer) -> None:
    """Add ``modelyard doctor`` to the root app."""

    @app.command("doctor")
    def doctor(
        ctx: typer.Context,
        deployment: str | None = typer.Option(
            None,
            "--deployment",
            "-d",
            help="Check a deployment of the server at --url (its model, host, logs).",
        ),
        model_dir: Path | None = typer.Option(
            None, "--model-dir", help="Check serving this model directory with --backend and --args."
        ),
        backend: str | None = typer.Option(
            None, "--backend", "-b", help="Backend name: vllm, sglang, transformers."
        ),
        version: str | None = typer.Option(
            None, "--version", help="Backend version (default: the backend's default)."
        ),
        arguments: str = typer.Option(
            "", "--args", help="The engine arguments, as typed for the deployment."
        ),
        env: list[str] = typer.Option(
            [], "--env", "-e", help="KEY=VALUE environment for the engine (repeatable)."
        ),
        gpus: str | None = typer.Option(
            None, "--gpus", help="Plan for other GPUs, e.g. 2x48GB or 4xH100 (skips this host's checks)."
        ),
        log: Path | None = typer.Option(None, "--log", help="Explain an engine log file."),
        stalled_for: float | None = typer.Option(
            None,
            "--stalled-for",
            min=1,
            help="With --log: the start has printed nothing for this many seconds (default: read from "
            "the file's last write and its lines' timestamps).",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    ) -> None:
        """Find what would break a deployment before it starts, and explain failures after."""
        context = cli_context(ctx)
        try:
            if log is not None:
                _finish(_log_findings(log, backend, stalled_for), as_json=as_json, title=f"doctor: {log}")
                return
            if stalled_for is not None:
                raise InvalidInput(
                    "--stalled-for goes with --log", hint="modelyard doctor --log FILE --stalled-for 900"
                )
            if deployment is not None:
                if model_dir is not None:
                    raise InvalidInput("give --deployment or --model-dir, not both")
                findings, checked = _doctor_deployment(context, deployment)
                _finish(findings, as_json=as_json, title=f"doctor: {deployment}", flag_table=checked)
                return
            if model_dir is not None:
                if backend is None:
                    raise InvalidInput(
                        "--model-dir needs --backend", hint="e.g. --backend vllm --version 0.25.0"
                    )
                findings, checked = _doctor_model_dir(
                    context,
                    model_dir=model_dir,
                    backend=backend,
                    version=version,
                    arguments=arguments,
                    env=env,
                    gpus=gpus,
                )
                _finish(
                    findings, as_json=as_json, title=f"doctor: {model_dir} on {backend}", flag_table=checked
                )
                return
            from modelyard.doctor.checkup import host_overview

            _finish(
                host_overview(data_dir=context.resolved_data_dir), as_json=as_json, title="doctor: this host"
            )
        except ModelyardError as error:
            stderr.print(f"[red]error:[/red] {error}", highlight=False)
            raise typer.Exit(1) from error
