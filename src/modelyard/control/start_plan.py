"""What one start of an instance will be, decided from its inputs alone: ``plan_start``.

``launch.start_instance`` gathers the inputs (the backend version, the scheduler's decision, the
addresses the runtime allocated, the opened secrets, the cores CPU engines share, a new launch
token) and carries the plan out (``launch.execute_start``: intent, booking, the runtime's start).
``plan_start`` itself stores nothing, starts nothing and reads no clock: the same inputs give
the same ``StartPlan``, so every decision in it (the command line with the memory knob and a
gang's rank flags, the GPUs and nodes of each rank, the engine's environment and thread
variables, what is masked, where its log goes, the reason a user reads) is unit-tested without a
database, a runtime or a process (``tests/control/test_start_plan.py``).

A plan that cannot be made raises ``InvalidInput`` (a bad template, a parameter that repeats a
flag the platform sets, a gang without its rendezvous address) or ``EngineStartFailed`` (the
program is not found); the start is then this instance's ``error``, with the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from modelyard.backends.multi_node import rank_arguments
from modelyard.backends.render import GPU_VARIABLE, render_launch
from modelyard.backends.spec import BackendVersion
from modelyard.control.cpu_threads import ThreadSizing, size_threads
from modelyard.control.engine_key import engine_api_key
from modelyard.control.instance_store import DeploymentView, InstanceView
from modelyard.control.live import GpuKey
from modelyard.control.placement import Decision, placement_to_json
from modelyard.control.scheduler import Placement
from modelyard.control.transitions import Launching
from modelyard.errors import InvalidInput
from modelyard.runtimes.base import EngineAddress, EngineIdentity, LaunchSpec, RankLaunch
from modelyard.secret_names import MASK, is_secret_env_name, mask_arguments, secret_argument_indexes


@dataclass(frozen=True)
class StartInputs:
    """Everything one start depends on, gathered by ``launch.start_instance``."""

    deployment: DeploymentView
    instance: InstanceView
    version: BackendVersion
    decision: Decision
    # The kind of the runtime that starts it ("process", "docker", "ray"), chosen by
    # ``launch._runtime_for``; "ray" puts each rank on its worker's node.
    runtime_kind: str
    # What the engine sees of the model (a container: /models/<folder>) and of the host.
    engine_model_path: str
    mounts: list[dict[str, Any]]
    # Where rank 0 listens and is reached, allocated by the runtime.
    address: EngineAddress
    # A gang's rendezvous port (several ranks); None for a replica of one rank.
    master_address: EngineAddress | None
    # The deployment's parameters and env with their sealed values opened.
    parameters: list[str]
    env: dict[str, str]
    owner: str
    launch_token: str
    instances_dir: Path
    # The server's environment (a thread variable set there is kept), its usable cores and the
    # CPU engines already running on them.
    server_environment: Mapping[str, str] = field(default_factory=dict)
    usable_cores: int = 1
    other_cpu_engines: int = 0
    # $PATH for finding the program (None: this process's).
    search_path: str | None = None


@dataclass(frozen=True)
class StartPlan:
    """One start, decided: what the runtime is given and what the store records. Its repr
    leaves out the spec, whose arguments and env hold the opened secrets."""

    spec: LaunchSpec = field(repr=False)
    runtime_kind: str
    # Where it goes, for its reasons: "GPUs 0,1", "node-a GPU 0 + node-b GPU 0", "CPU; ...".
    where: str
    placement: Placement
    # What the instance records of it (``placement_to_json``) and of the engine's mounts.
    placement_json: dict[str, Any]
    mounts: list[dict[str, Any]]
    # GPUs shared by memory it starts on (one start at a time on each); empty: whole GPUs or CPU.
    starting_on: tuple[GpuKey, ...]
    on_cpu: bool
    # Values never shown (sealed ones, secret env values, secret flags' values).
    secrets: frozenset[str] = field(repr=False)
    # The key the engine asks for (--api-key), for readiness and the gateway.
    api_key: str | None = field(repr=False)

    def launching(self, started_at: datetime) -> Launching:
        """The intent the store records before the runtime is asked (``transitions.Launching``)."""
        spec = self.spec
        return Launching(
            reason=f"launching on the {self.runtime_kind} runtime ({self.where})",
            runtime=self.runtime_kind,
            launch_token=spec.identity.launch_token,
            host=spec.address.reach_host,
            port=spec.address.reach_port,
            engine_port=spec.address.port,
            gpu_ids=list(spec.gpu_ids),
            placement=self.placement_json,
            mounts=self.mounts,
            command=masked_command([*spec.program, *spec.arguments], self.secrets),
            log_path=str(spec.log_path),
            start_count=spec.identity.start_number,
            started_at=started_at,
        )


def plan_start(inputs: StartInputs) -> StartPlan:
    """The start ``inputs`` describe, or ``InvalidInput`` / ``EngineStartFailed`` saying why not."""
    deployment, instance, version, decision = (
        inputs.deployment,
        inputs.instance,
        inputs.version,
        inputs.decision,
    )
    ranks = decision.placement.ranks
    if not ranks:
        raise InvalidInput(f"instance {instance.id}: the placement has no rank to start")
    if len(ranks) > 1 and inputs.master_address is None:
        raise InvalidInput(
            f"{deployment.name}: a replica of {len(ranks)} ranks needs a rendezvous address for its "
            "gang (master_address), and none was allocated"
        )
    on_cluster = inputs.runtime_kind == "ray"
    address = inputs.address
    gpu_ids = list(ranks[0].gpu_ids)
    launch = render_launch(
        version,
        model_path=inputs.engine_model_path,
        port=address.port,
        worker_ip=address.bind_host,
        model_name=deployment.name,
        gpu_ids=gpu_ids,
        backend_parameters=[*inputs.parameters, *decision.knob_arguments(inputs.parameters)],
        env=inputs.env,
        search_path=inputs.search_path,
    )
    arguments = launch.arguments
    worker_ranks: tuple[RankLaunch, ...] = ()
    if len(ranks) > 1 and inputs.master_address is not None:
        master_port = inputs.master_address.port

        def extra(rank: int) -> list[str]:
            return rank_arguments(
                version, rank=rank, nnodes=len(ranks), master_addr=address.reach_host, master_port=master_port
            )

        arguments = [*launch.arguments, *extra(0)]
        worker_ranks = tuple(
            RankLaunch(
                rank=number,
                node_id=rank.worker_id,
                gpu_ids=list(rank.gpu_ids),
                program=launch.program,
                arguments=[*launch.arguments, *extra(number)],
                env={GPU_VARIABLE: ",".join(str(gpu) for gpu in rank.gpu_ids)},
            )
            for number, rank in enumerate(ranks[1:], start=1)
        )
    on_cpu = not gpu_ids and not on_cluster
    launch_env = dict(launch.env)
    sizing = _thread_sizing(inputs, launch_env) if on_cpu else None
    if sizing is not None:
        launch_env.update(sizing.env)
    start_number = instance.start_count + 1
    folder = inputs.instances_dir / instance.uid
    secrets = secret_values(deployment, inputs.parameters, inputs.env)
    spec = LaunchSpec(
        identity=EngineIdentity(
            owner=inputs.owner,
            launch_token=inputs.launch_token,
            deployment=deployment.name,
            instance_uid=instance.uid,
            replica_index=instance.replica_index,
            start_number=start_number,
        ),
        program=launch.program,
        arguments=arguments,
        env=launch_env,
        gpu_ids=gpu_ids,
        model_path=deployment.model_path,
        address=address,
        log_path=folder / f"start-{start_number}.log",
        working_directory=folder / "work",
        image=launch.image,
        secrets=secrets,
        node_id=ranks[0].worker_id if on_cluster else None,
        worker_ranks=worker_ranks,
        stop_signal_target=version.stop_signal_target,
    )
    where = describe_where(decision, on_cluster)
    if sizing is not None:
        where += f"; {sizing.describe()}"
    return StartPlan(
        spec=spec,
        runtime_kind=inputs.runtime_kind,
        where=where,
        placement=decision.placement,
        placement_json=placement_to_json(decision),
        mounts=list(inputs.mounts),
        starting_on=tuple(gpu_keys(decision)) if decision.demand is not None else (),
        on_cpu=on_cpu,
        secrets=secrets,
        api_key=engine_api_key(inputs.parameters, inputs.env),
    )


def _thread_sizing(inputs: StartInputs, launch_env: dict[str, str]) -> ThreadSizing | None:
    """The thread variables of a CPU engine on this host: its share of the usable cores."""
    if not inputs.version.cpu_threads_env:
        return None
    return size_threads(
        inputs.version.cpu_threads_env,
        launch_env=launch_env,
        server_env=inputs.server_environment,
        usable_cores=inputs.usable_cores,
        cpu_engines=inputs.other_cpu_engines + 1,
    )


def gpu_keys(decision: Decision) -> list[GpuKey]:
    return [(rank.worker_id, gpu) for rank in decision.placement.ranks for gpu in rank.gpu_ids]


def describe_where(decision: Decision, on_cluster: bool) -> str:
    """Where a start goes, for its reason: "GPUs 0,1", "node-a GPU 0 + node-b GPU 0", "CPU",
    with the memory knob set from the estimate."""
    parts = []
    for rank in decision.placement.ranks:
        gpus = (
            f"GPU{'s' if len(rank.gpu_ids) > 1 else ''} {','.join(map(str, rank.gpu_ids))}"
            if rank.gpu_ids
            else "CPU"
        )
        parts.append(f"{rank.worker_name} {gpus}" if on_cluster else gpus)
    text = " + ".join(parts)
    if decision.demand is not None and decision.memory_fraction is not None:
        text += f"; {decision.demand.knob} {decision.memory_fraction:g} for {decision.demand.summary()}"
    return text


def secret_values(deployment: DeploymentView, parameters: list[str], env: dict[str, str]) -> frozenset[str]:
    """The clear values that must never be shown: sealed ones, secret env values, secret flags'."""
    values = {value for name, value in env.items() if value != deployment.env.get(name)}
    values |= {value for name, value in env.items() if is_secret_env_name(name)}
    for index in secret_argument_indexes(parameters):
        argument = parameters[index]
        values.add(argument.split("=", 1)[1] if argument.startswith("-") else argument)
    stored = deployment.backend_parameters
    values |= {value for value, kept in zip(parameters, stored, strict=False) if value != kept}
    return frozenset(value for value in values if value)


def masked_command(argv: list[str], secrets: frozenset[str]) -> list[str]:
    """The command as ``ps`` and the API show it: secret flags' values and every secret masked."""
    shown = []
    for argument in mask_arguments(argv):
        for secret in secrets:
            argument = argument.replace(secret, MASK)
        shown.append(argument)
    return shown
