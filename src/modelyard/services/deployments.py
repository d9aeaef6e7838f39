"""Deployments: desired state written by the API, made real by the controller.

Every use case validates everything first and writes in one transaction; the caller then pokes
the controller (``context.controller.poke()``). Stopping sets ``desired_state="stopped"``;
removing sets ``desired_state="deleted"`` and the controller stops the instances, then deletes
the rows.

Usage::

    request = DeploymentRequest(model="qwen3-8b", backend="vllm", gpus_per_replica=2)
    deployment = create_deployment(session, request, inventory)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from modelyard.backends.arguments import parse_env
from modelyard.backends.flag_tables import load_flag_table
from modelyard.backends.parameters import ParsedParameters, parse_backend_parameters
from modelyard.backends.render import check_launch
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.control.endpoints import ROUTING_POLICIES
from modelyard.control.memory_demand import KNOB_FLAGS
from modelyard.control.scheduler import LOCAL_WORKER, Worker, check_request_fits, local_worker
from modelyard.control.start_observations import read_observations
from modelyard.errors import AlreadyExists, Conflict, InvalidInput, InvalidModelDirectory, NotFound
from modelyard.estimate.correction import StartObservation
from modelyard.hardware.gpus import GpuInventory
from modelyard.runtimes.selection import RuntimeSet
from modelyard.services import backends as backend_service
from modelyard.services.deployment_autoscale import apply_autoscale, autoscale_to_json, refuse_manual_replicas
from modelyard.services.deployment_checks import WorkerModelCheck, gpus_of_one_replica, run_preflight
from modelyard.services.deployment_gpus import ReplicaGpus, estimate_reference, replica_gpus
from modelyard.services.deployment_limits import apply_limits, checked_limits, limits_to_json
from modelyard.services.deployment_memory import bytes_per_gpu, memory_placement, preflight_parameters
from modelyard.services.deployment_placement import placement_selectors
from modelyard.services.deployment_request import MAXIMUM_REPLICAS, DeploymentRequest
from modelyard.services.deployment_secrets import (
    check_chosen,
    seal_deployment_secrets,
    secret_env_names,
    shown_arguments,
    shown_env,
)
from modelyard.services.instances import instance_to_json
from modelyard.services.model_files import DEPLOYABLE_MODEL_STATES, file_problems, get_model
from modelyard.services.names import check_name, commit_new
from modelyard.store.secret_box import SecretBox
from modelyard.store.tables import Deployment, ModelFile, utc_now

logger = logging.getLogger(__name__)

DESIRED_STATES = ("running", "stopped", "deleted")


def backend_supports_cpu(spec: BackendSpec, version: BackendVersion) -> bool:
    """CPU engines: transformers serve, custom servers, and any version that declares no GPU use."""
    return spec.family in ("transformers", "custom") or not version.supports_gpu


def check_fits(
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    replicas: int,
    inventory: GpuInventory,
    supports_cpu: bool,
    by_memory: bool = False,
) -> None:
    """Refuse (``Unschedulable``) a GPU request this host can never satisfy (``by_memory``:
    replicas may share GPUs, so only the GPUs of one replica must exist)."""
    check_request_fits(gpus_per_replica, gpu_ids, replicas, inventory, supports_cpu, by_memory=by_memory)


def _check_replicas(replicas: int) -> None:
    if not 0 <= replicas <= MAXIMUM_REPLICAS:
        raise InvalidInput(
            f"replicas must be between 0 and {MAXIMUM_REPLICAS}, got {replicas}",
            hint="scale to 0 to keep the deployment without running it",
        )


def _gpu_request(
    request: DeploymentRequest, inventory: GpuInventory, version: BackendVersion
) -> tuple[int, list[int] | None]:
    if request.gpu_ids is not None:
        ids = request.gpu_ids
        if not ids:
            raise InvalidInput("gpu_ids is empty", hint="leave it out, or list GPU indices such as [0, 1]")
        if len(set(ids)) != len(ids) or any(index < 0 for index in ids):
            raise InvalidInput(f"gpu_ids {ids} must be distinct indices >= 0")
        if request.gpus_per_replica is not None and request.gpus_per_replica != len(ids):
            raise InvalidInput(
                f"gpus_per_replica {request.gpus_per_replica} disagrees with gpu_ids {ids}",
                hint="give either a GPU count (--gpus) or GPU ids (--gpu-ids), not both",
            )
        return len(ids), sorted(ids)
    if request.gpus_per_replica is None:
        return (1 if inventory.available and version.supports_gpu else 0), None
    if request.gpus_per_replica < 0:
        raise InvalidInput(f"gpus_per_replica must be 0 or more, got {request.gpus_per_replica}")
    return request.gpus_per_replica, None


def _usable_model(session: Session, name: str) -> ModelFile:
    model = get_model(session, name)
    if model.state == "downloading":
        done = model.downloaded_bytes or 0
        share = f"{100 * done / model.size_bytes:.0f}% of " if model.size_bytes else ""
        raise InvalidModelDirectory(
            f"model {name!r} is still downloading ({share}{model.size_bytes or 0} bytes): "
            "it cannot be deployed until every file is downloaded and verified",
            hint=f"wait for it: modelyard models show {name}; modelyard tasks list",
        )
    if model.state not in DEPLOYABLE_MODEL_STATES:
        reasons = "; ".join(model.reasons) or model.state
        raise InvalidModelDirectory(
            f"model {name!r} is {model.state}: {reasons}",
            hint=f"see `modelyard models show {name}`"
            if model.state == "incomplete"
            else "fix the directory, then remove and add the model again",
        )
    if model.on_server is not False and not Path(model.path).is_dir():
        raise InvalidModelDirectory(
            f"model {name!r}: its directory {model.path} no longer exists",
            hint="restore the files, or remove the model (modelyard models rm) and add it again",
        )
    problems = file_problems(model)
    if problems:
        shown = "; ".join(str(problem) for problem in problems[:5])
        raise InvalidModelDirectory(
            f"model {name!r} has {len(problems)} missing or damaged file(s) in {model.path}: {shown}",
            hint="pull or import it again (its manifest lists every file); see `modelyard models show "
            f"{name}`",
        )
    return model


def find_deployment(session: Session, name: str) -> Deployment | None:
    return session.scalar(
        select(Deployment).where(Deployment.name == name).options(selectinload(Deployment.instances))
    )


def get_deployment(session: Session, name: str) -> Deployment:
    deployment = find_deployment(session, name)
    if deployment is None:
        known = session.scalars(select(Deployment.name).order_by(Deployment.name)).all()
        raise NotFound(
            f"no deployment named {name!r}",
            hint=f"deployments: {', '.join(known)}" if known else "create one with `modelyard deploy MODEL`",
        )
    return deployment


def list_deployments(session: Session) -> list[Deployment]:
    return list(
        session.scalars(
            select(Deployment).options(selectinload(Deployment.instances)).order_by(Deployment.name)
        )
    )


def create_deployment(
    session: Session,
    request: DeploymentRequest,
    inventory: GpuInventory,
    secrets: SecretBox | None = None,
    runtimes: RuntimeSet | None = None,
    worker_model_check: WorkerModelCheck | None = None,
    workers: list[Worker] | None = None,
) -> Deployment:
    """Validate the whole request, run doctor's preflight, then store the deployment with its
    secrets sealed by ``secrets`` (required when the request carries any). ``runtimes`` says what
    each runtime will mount for the engine (the doctor checks that the model directory is among
    it); the server passes its own. ``worker_model_check``: on a cluster, the model directory is
    checked on every GPU worker (the server's cluster passes it). ``workers``: the workers as the
    controller last read them, where one replica must be placeable (default: this host alone, with
    ``inventory``'s GPUs)."""
    deployment = check_deployment(session, request, inventory, runtimes, worker_model_check, workers)
    if secrets is not None:
        seal_deployment_secrets(deployment, secrets, request.secret_env)
    elif (
        secret_env_names(deployment.env)
        or request.secret_env
        or shown_arguments(deployment.backend_parameters) != list(deployment.backend_parameters)
    ):
        raise ValueError("create_deployment needs a SecretBox to store this request's secrets")
    session.add(deployment)
    commit_new(session, "deployment", deployment.name)
    logger.info(
        "deployment %s created (%s %s, %d replica(s))",
        deployment.name,
        deployment.backend,
        deployment.backend_version,
        deployment.replicas,
    )
    return get_deployment(session, deployment.name)


def check_deployment(
    session: Session,
    request: DeploymentRequest,
    inventory: GpuInventory,
    runtimes: RuntimeSet | None = None,
    worker_model_check: WorkerModelCheck | None = None,
    workers: list[Worker] | None = None,
    estimate_summaries: list[dict[str, Any]] | None = None,
) -> Deployment:
    """Every check of ``create_deployment``, storing nothing: the deployment it would create, not
    added to the session (the console's preflight, ``services/deployment_preflight.py``, which
    passes ``estimate_summaries`` for the memory estimate it shows)."""
    model = _usable_model(session, request.model)
    name = check_name(request.name if request.name is not None else model.name, "deployment")
    existing = find_deployment(session, name)
    if existing is not None:
        if existing.desired_state == "deleted":
            raise Conflict(
                f"deployment {name!r} is being removed",
                hint="wait until `modelyard ps` no longer lists it, then deploy again",
            )
        raise AlreadyExists(
            f"a deployment named {name!r} already exists",
            hint="pick another name with --name, or scale the existing one (modelyard scale)",
        )
    _check_replicas(request.replicas)
    spec = backend_service.get_backend(session, request.backend)
    version = backend_service.resolve_version(spec, request.backend_version)
    # Parsed once, on the version's flag table: the stored argv, the estimate, doctor and the host
    # check all read this one form.
    parsed = parse_parameters(request.backend_parameters, spec.family, version.version)
    parameters = parsed.argv
    env = parse_env(request.env)
    check_chosen(env, request.secret_env)
    gpus_per_replica, gpu_ids = _gpu_request(request, inventory, version)
    runtime = (runtimes or RuntimeSet()).engine_view(version)
    check_launch(
        version,
        backend_parameters=parameters,
        env=env,
        gpu_count=gpus_per_replica,
        model_path=runtime.engine_model_path(model.path),
    )
    placement = memory_placement(request.gpu_memory, gpus_per_replica)
    placement |= placement_selectors(
        workers=request.workers,
        worker_labels=request.worker_labels,
        gpu_model=request.gpu_model,
        nodes=request.nodes,
        gpus_per_replica=gpus_per_replica,
        version=version,
    )
    check_fits(
        gpus_per_replica,
        gpu_ids,
        request.replicas,
        inventory,
        backend_supports_cpu(spec, version),
        by_memory=bool(placement.get("gpu_memory")),
    )
    observations = (
        read_observations(session, engine=spec.family, engine_version=version.version, now=utc_now())
        if spec.family in KNOB_FLAGS
        else []
    )
    if placement.get("gpu_memory") and model.on_server is False:
        raise InvalidInput(
            f"--gpu-memory {placement['gpu_memory']} needs the estimate, which reads the model's config "
            f"and weight headers on the server's host, and model {model.name!r} has its files on the "
            "workers only",
            hint="give whole GPUs (leave --gpu-memory out), or register a copy on the server's host",
        )
    replica = _replica_gpus(
        workers if workers is not None else [local_worker(inventory, LOCAL_WORKER)],
        placement,
        gpus_per_replica=gpus_per_replica,
        gpu_ids=gpu_ids,
        engine=spec.family,
        engine_version=version.version,
        model_path=model.path,
        parameters=parsed,
        env=env,
        in_container=version.runs_in_container,
        observations=observations,
    )
    replica_inventory = inventory if replica is None else replace(inventory, gpus=list(replica.worker.gpus))
    chosen = gpus_of_one_replica(inventory, gpus_per_replica, gpu_ids) if replica is None else replica.gpus
    raw_parameters = request.backend_parameters
    judged = parsed
    if placement.get("gpu_memory"):
        raw_parameters = preflight_parameters(
            raw_parameters,
            parameters=parsed,
            engine=spec.family,
            engine_version=version.version,
            model_path=model.path,
            env=env,
            gpu_memory=placement["gpu_memory"],
            gpus=chosen,
            observations=observations,
        )
        if raw_parameters != request.backend_parameters:
            # The knob the placement will set, added: doctor judges the flags with it.
            judged = parse_parameters(raw_parameters, spec.family, version.version)
    limits = checked_limits(request.limits.model_dump() if request.limits is not None else None)
    warnings = run_preflight(
        deployment_name=name,
        model=model,
        spec=spec,
        version=version,
        raw_backend_parameters=raw_parameters,
        parameters=judged,
        raw_env=request.env,
        gpus_per_replica=gpus_per_replica,
        gpu_ids=gpu_ids,
        inventory=replica_inventory,
        replica_gpus=chosen,
        mounts=runtime.mounts(model.path),
        worker_model_check=worker_model_check,
        start_observations=observations,
        estimate_summaries=estimate_summaries,
    )
    deployment = Deployment(
        name=name,
        model_file_id=model.id,
        backend=spec.name,
        backend_version=version.version,
        replicas=request.replicas,
        gpus_per_replica=gpus_per_replica,
        gpu_ids=gpu_ids,
        backend_parameters=parameters,
        env=env,
        desired_state="running",
        skip_verification=request.skip_verification,
        routing=_checked_routing(request.routing),
        warnings=warnings,
        placement=placement or None,
    )
    apply_limits(deployment, limits)
    apply_autoscale(deployment, request.autoscale)
    return deployment


def parse_parameters(raw: str | list[str], family: str, version: str) -> ParsedParameters:
    """``raw`` (the parameters as typed) parsed on the flag table of ``family`` ``version`` (vLLM and
    SGLang; the others have none); ``InvalidInput`` naming the line where a quote is left open."""
    table = load_flag_table(family, version) if family in ("vllm", "sglang") else None
    return parse_backend_parameters(raw, table).require_split()


def _replica_gpus(
    workers: list[Worker],
    placement: dict[str, Any],
    *,
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    engine: str,
    engine_version: str,
    model_path: str,
    parameters: ParsedParameters,
    env: dict[str, str],
    in_container: bool,
    observations: Sequence[StartObservation] = (),
) -> ReplicaGpus | None:
    """Where the scheduler would put one replica now (``services/deployment_gpus.py``);
    ``Unschedulable`` with its reason when no worker can take it. None: nothing to place (no GPUs
    asked for, or no workers known: no controller runs)."""
    if gpus_per_replica == 0 or not workers:
        return None
    memory: int | None = None
    if placement.get("gpu_memory"):
        memory = bytes_per_gpu(
            parameters=parameters,
            engine=engine,
            engine_version=engine_version,
            model_path=model_path,
            env=env,
            gpu_memory=placement["gpu_memory"],
            gpu_count=gpus_per_replica,
            reference=estimate_reference(workers),
            observations=observations,
        )
    return replica_gpus(
        workers,
        placement,
        gpus_per_replica=gpus_per_replica,
        gpu_ids=gpu_ids,
        memory_bytes_per_gpu=memory,
        in_container=in_container,
    )


def _checked_routing(routing: str) -> str:
    if routing not in ROUTING_POLICIES:
        raise InvalidInput(
            f"routing {routing!r} is not one of {', '.join(ROUTING_POLICIES)}",
            hint="prefix sends prompts that begin alike to the same replica (its prefix cache); "
            "least-outstanding balances by requests in flight",
        )
    return routing


def set_routing(session: Session, name: str, routing: str) -> Deployment:
    """Change how the gateway picks a replica of deployment ``name``."""
    deployment = _live_deployment(session, name, "changed")
    deployment.routing = _checked_routing(routing)
    session.commit()
    return get_deployment(session, name)


def set_limits(session: Session, name: str, values: dict[str, int | None]) -> Deployment:
    """Replace deployment ``name``'s limits (a field left out or null: no limit of that kind)."""
    limits = checked_limits(values)
    deployment = _live_deployment(session, name, "changed")
    apply_limits(deployment, limits)
    session.commit()
    return get_deployment(session, name)


def routing_policies(session: Session) -> dict[str, str]:
    """Every live deployment's routing policy, by name."""
    rows = session.execute(
        select(Deployment.name, Deployment.routing).where(Deployment.desired_state != "deleted")
    )
    return {name: routing for name, routing in rows}


def _live_deployment(session: Session, name: str, action: str) -> Deployment:
    deployment = get_deployment(session, name)
    if deployment.desired_state == "deleted":
        raise Conflict(f"deployment {name!r} is being removed; it cannot be {action}")
    return deployment


def scale_deployment(session: Session, name: str, replicas: int, inventory: GpuInventory) -> Deployment:
    """Set the number of replicas (0 keeps the deployment without running anything)."""
    _check_replicas(replicas)
    deployment = _live_deployment(session, name, "scaled")
    refuse_manual_replicas(deployment)
    if replicas > deployment.replicas:
        spec = backend_service.get_backend(session, deployment.backend)
        version = backend_service.resolve_version(spec, deployment.backend_version)
        check_fits(
            deployment.gpus_per_replica,
            deployment.gpu_ids,
            replicas,
            inventory,
            backend_supports_cpu(spec, version),
            by_memory=bool((deployment.placement or {}).get("gpu_memory")),
        )
    deployment.replicas = replicas
    session.commit()
    return get_deployment(session, name)


def set_desired_state(session: Session, name: str, desired_state: str) -> Deployment:
    """``running`` (start), ``stopped`` (stop) or ``deleted`` (remove)."""
    if desired_state not in DESIRED_STATES:
        raise InvalidInput(f"desired state {desired_state!r} is not one of {', '.join(DESIRED_STATES)}")
    action = {"running": "started", "stopped": "stopped", "deleted": "removed"}[desired_state]
    deployment = get_deployment(session, name)
    if deployment.desired_state == "deleted" and desired_state != "deleted":
        raise Conflict(f"deployment {name!r} is being removed; it cannot be {action}")
    deployment.desired_state = desired_state
    session.commit()
    return get_deployment(session, name)


def deployment_summary_state(deployment: Deployment) -> str:
    """One word for listings: running, starting, degraded, error, stopping, stopped, removing, idle,
    scaled to zero."""
    states = [instance.state for instance in deployment.instances]
    if deployment.desired_state == "deleted":
        return "removing"
    if deployment.desired_state == "stopped":
        return "stopping" if any(state not in ("stopped", "error") for state in states) else "stopped"
    if deployment.replicas == 0:
        # Scale to zero (autoscale.min 0): the autoscaler took the last replica away, and the
        # gateway holds the next request while one starts.
        return "scaled to zero" if deployment.autoscale is not None else "idle"
    running = states.count("running")
    if running >= deployment.replicas:
        return "running"
    if "error" in states:
        return "degraded" if running else "error"
    return "starting"


def request_verification(session: Session, name: str) -> Deployment:
    """Ask the controller to run the verification suite again on every instance with an engine
    (running, kept out of rotation by a failed check, or waiting for a retry of one); a pass puts
    it back into rotation."""
    deployment = _live_deployment(session, name, "verified")
    eligible = [
        instance
        for instance in deployment.instances
        if instance.handle is not None
        and (
            instance.state in ("running", "error")
            or (instance.state == "starting" and instance.verified_at is not None)
        )
    ]
    if not eligible:
        states = ", ".join(f"replica {i.replica_index}: {i.state}" for i in deployment.instances) or "none"
        raise Conflict(
            f"deployment {name!r} has no engine to verify (instances: {states})",
            hint="verification runs on a started engine: start the deployment first (modelyard start)",
        )
    now = utc_now()
    for instance in eligible:
        instance.verification_requested_at = now
    session.commit()
    return get_deployment(session, name)


def deployment_to_json(deployment: Deployment, now_seconds: float) -> dict[str, Any]:
    return {
        "name": deployment.name,
        "uid": deployment.uid,
        "model": deployment.model_file.name,
        "model_path": deployment.model_file.path,
        "backend": deployment.backend,
        "backend_version": deployment.backend_version,
        "replicas": deployment.replicas,
        "gpus_per_replica": deployment.gpus_per_replica,
        "gpu_ids": deployment.gpu_ids,
        "backend_parameters": shown_arguments(deployment.backend_parameters),
        "env": shown_env(deployment.env),
        "secret_env": secret_env_names(deployment.env),
        "desired_state": deployment.desired_state,
        "state": deployment_summary_state(deployment),
        "skip_verification": deployment.skip_verification,
        "routing": deployment.routing,
        "placement": deployment.placement or {},
        "limits": limits_to_json(deployment),
        "autoscale": autoscale_to_json(deployment),
        "warnings": deployment.warnings,
        "created_at": deployment.created_at.isoformat(),
        "updated_at": deployment.updated_at.isoformat(),
        "instances": [instance_to_json(instance, now_seconds) for instance in deployment.instances],
    }
