"""``plan_start``: one start decided from its inputs alone (no database, runtime or process).

Each test builds the inputs a gathered start would have (a backend version, the scheduler's
decision, the addresses a runtime allocated) and reads the plan: the engine's command line, its
environment, its GPUs and nodes, what the store records and what it masks, or the error a bad
input gets.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from modelyard.backends.spec import BackendVersion, MultiNodeFlags
from modelyard.control.instance_store import DeploymentView, InstanceView
from modelyard.control.memory_demand import MemoryDemand
from modelyard.control.placement import Decision
from modelyard.control.scheduler import Placement, RankPlacement
from modelyard.control.start_plan import StartInputs, plan_start
from modelyard.control.states import InstanceState
from modelyard.errors import EngineStartFailed, InvalidInput
from modelyard.runtimes.base import EngineAddress
from modelyard.secret_names import MASK

GIB = 2**30
PYTHON_FOLDER = str(Path(sys.executable).parent)
SERVER = BackendVersion(
    version="1.0",
    executable=Path(sys.executable).name,
    run_command="-m server {{model_path}} --host {{worker_ip}} --port {{port}} "
    "--served-model-name {{model_name}}",
)
GANG_FLAGS = MultiNodeFlags(
    all_ranks="--nnodes {{nnodes}} --node-rank {{node_rank}} --master-addr {{master_addr}} "
    "--master-port {{master_port}}",
    worker_ranks="--headless",
)


def instance(**fields: Any) -> InstanceView:
    values: dict[str, Any] = {
        "id": 7,
        "uid": "uid7",
        "replica_index": 0,
        "state": InstanceState.PENDING,
        "reason": "waiting for placement",
        "runtime": "process",
        "handle": None,
        "launch_token": None,
        "pid": None,
        "process_start_time": None,
        "host": "127.0.0.1",
        "port": None,
        "gpu_ids": [],
        "log_path": None,
        "start_count": 2,
        "restart_count": 0,
        "next_start_at": None,
        "started_at": None,
        "verification": [],
        "verified_at": None,
        "verification_requested_at": None,
    }
    values.update(fields)
    return InstanceView(**values)


def deployment(**fields: Any) -> DeploymentView:
    values: dict[str, Any] = {
        "id": 3,
        "uid": "dep3",
        "name": "chat",
        "desired_state": "running",
        "replicas": 1,
        "backend": "server",
        "backend_version": "1.0",
        "gpus_per_replica": 1,
        "gpu_ids": None,
        "backend_parameters": [],
        "env": {},
        "skip_verification": True,
        "model_path": "/models/tiny",
        "model_details": {},
        "instances": [],
    }
    values.update(fields)
    return DeploymentView(**values)


def on_gpus(*gpu_ids: int, worker: str = "local") -> RankPlacement:
    return RankPlacement(worker_id=worker, worker_name=worker, host="127.0.0.1", gpu_ids=tuple(gpu_ids))


def address(port: int = 8101, host: str = "127.0.0.1") -> EngineAddress:
    return EngineAddress(bind_host=host, port=port, reach_host=host, reach_port=port)


def inputs(**fields: Any) -> StartInputs:
    values: dict[str, Any] = {
        "deployment": deployment(),
        "instance": instance(),
        "version": SERVER,
        "decision": Decision(placement=Placement(ranks=(on_gpus(0, 1),))),
        "runtime_kind": "process",
        "engine_model_path": "/models/tiny",
        "mounts": [],
        "address": address(),
        "master_address": None,
        "parameters": [],
        "env": {},
        "owner": "owner-1",
        "launch_token": "token-1",
        "instances_dir": Path("/data/instances"),
        "search_path": PYTHON_FOLDER,
    }
    values.update(fields)
    return StartInputs(**values)


def demand(**fields: Any) -> MemoryDemand:
    values: dict[str, Any] = {
        "engine": "vllm",
        "bytes_per_gpu": 20 * GIB,
        "weights_bytes": 15 * GIB,
        "kv_cache_bytes": 4 * GIB,
        "kv_sequences": 4,
        "context_tokens": 4096,
        "outside_budget_bytes": GIB,
    }
    values.update(fields)
    return MemoryDemand(**values)


def test_a_start_on_whole_gpus_listens_on_the_allocated_port_with_only_its_gpus_visible() -> None:
    plan = plan_start(inputs())
    spec = plan.spec
    assert spec.arguments[-6:] == ["--host", "127.0.0.1", "--port", "8101", "--served-model-name", "chat"]
    assert spec.gpu_ids == [0, 1] and spec.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert not plan.on_cpu and plan.starting_on == ()  # whole GPUs: no start slot to wait for
    # The third start of the instance: its own log beside the earlier ones.
    assert spec.log_path == Path("/data/instances/uid7/start-3.log")
    assert spec.working_directory == Path("/data/instances/uid7/work")
    assert spec.identity.launch_token == "token-1" and spec.identity.start_number == 3
    assert spec.node_id is None and spec.worker_ranks == ()
    assert plan.where == "GPUs 0,1"


def test_the_intent_it_records_says_where_and_how_the_engine_starts() -> None:
    plan = plan_start(inputs(runtime_kind="docker", address=address(8101, "127.0.0.1")))
    intent = plan.launching(datetime(2026, 1, 2, tzinfo=UTC))
    assert intent.state == InstanceState.STARTING
    assert intent.reason == "launching on the docker runtime (GPUs 0,1)"
    assert (intent.runtime, intent.launch_token, intent.port, intent.start_count) == (
        "docker",
        "token-1",
        8101,
        3,
    )
    assert intent.command[-2:] == ["--served-model-name", "chat"]
    assert intent.placement["ranks"][0]["gpu_ids"] == [0, 1]


def test_the_memory_knob_from_the_estimate_is_added_unless_the_user_set_it() -> None:
    decision = Decision(
        placement=Placement(ranks=(on_gpus(0),), memory_bytes_per_gpu=20 * GIB),
        demand=demand(),
        memory_fraction=0.3,
    )
    plan = plan_start(inputs(decision=decision))
    assert plan.spec.arguments[-2:] == ["--gpu-memory-utilization", "0.3"]
    assert plan.where.startswith("GPU 0; --gpu-memory-utilization 0.3 for 20.0 GiB per GPU")
    assert plan.starting_on == (("local", 0),)  # shared by memory: one start at a time on it
    own = plan_start(inputs(decision=decision, parameters=["--gpu-memory-utilization", "0.5"]))
    assert own.spec.arguments.count("--gpu-memory-utilization") == 1
    assert own.spec.arguments[-2:] == ["--gpu-memory-utilization", "0.5"]


def test_a_cpu_engine_gets_its_share_of_the_cores_unless_a_value_is_set() -> None:
    threaded = SERVER.model_copy(update={"cpu_threads_env": ["OMP_NUM_THREADS"], "supports_gpu": False})
    on_cpu = Decision(placement=Placement(ranks=(on_gpus(),)))
    plan = plan_start(inputs(version=threaded, decision=on_cpu, usable_cores=5, other_cpu_engines=1))
    assert plan.on_cpu and plan.spec.env["OMP_NUM_THREADS"] == "2"  # (5 - 1 kept) / 2 engines
    assert plan.where.startswith("CPU; OMP_NUM_THREADS=2")
    kept = plan_start(
        inputs(version=threaded, decision=on_cpu, usable_cores=5, server_environment={"OMP_NUM_THREADS": "3"})
    )
    assert "OMP_NUM_THREADS" not in kept.spec.env and kept.where == "CPU"


def test_on_the_ray_runtime_each_rank_goes_to_its_worker_with_its_rank_flags() -> None:
    gang = SERVER.model_copy(update={"multi_node": GANG_FLAGS})
    decision = Decision(placement=Placement(ranks=(on_gpus(0, worker="node-a"), on_gpus(1, worker="node-b"))))
    plan = plan_start(
        inputs(
            version=gang,
            decision=decision,
            runtime_kind="ray",
            address=address(8101, "10.0.0.1"),
            master_address=address(8102, "10.0.0.1"),
        )
    )
    spec = plan.spec
    assert spec.node_id == "node-a" and spec.gpu_ids == [0]
    assert spec.arguments[-8:] == [
        *("--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "8102")
    ]
    [worker] = spec.worker_ranks
    assert (worker.rank, worker.node_id, worker.gpu_ids) == (1, "node-b", [1])
    assert worker.arguments[-3:] == ["--master-port", "8102", "--headless"]
    assert worker.env == {"CUDA_VISIBLE_DEVICES": "1"}
    assert not plan.on_cpu and plan.where == "node-a GPU 0 + node-b GPU 1"


def test_secret_values_are_masked_in_what_is_recorded_and_kept_for_the_engine() -> None:
    stored = deployment(backend_parameters=["--api-key", "sealed:abc"], env={"HF_TOKEN": "sealed:def"})
    plan = plan_start(
        inputs(deployment=stored, parameters=["--api-key", "sk-engine"], env={"HF_TOKEN": "hf-secret"})
    )
    assert "sk-engine" in plan.spec.arguments  # the engine gets it
    assert plan.api_key == "sk-engine" and plan.secrets >= {"sk-engine", "hf-secret"}
    recorded = plan.launching(datetime(2026, 1, 2, tzinfo=UTC)).command
    assert "sk-engine" not in " ".join(recorded) and MASK in recorded
    assert "sk-engine" not in repr(plan) and "hf-secret" not in repr(plan)


def test_the_same_inputs_give_the_same_plan() -> None:
    assert plan_start(inputs()) == plan_start(inputs())


def test_a_gang_without_a_rendezvous_address_is_refused() -> None:
    gang = SERVER.model_copy(update={"multi_node": GANG_FLAGS})
    decision = Decision(placement=Placement(ranks=(on_gpus(0, worker="a"), on_gpus(0, worker="b"))))
    with pytest.raises(InvalidInput, match="replica of 2 ranks needs a rendezvous address"):
        plan_start(inputs(version=gang, decision=decision, runtime_kind="ray"))


def test_a_gang_of_a_version_without_multi_node_flags_is_refused_naming_the_fix() -> None:
    decision = Decision(placement=Placement(ranks=(on_gpus(0, worker="a"), on_gpus(0, worker="b"))))
    with pytest.raises(InvalidInput, match="no multi-node flags") as refused:
        plan_start(inputs(decision=decision, runtime_kind="ray", master_address=address(8102)))
    assert "multi_node" in (refused.value.hint or "")


def test_a_parameter_that_repeats_a_flag_the_template_sets_is_refused() -> None:
    with pytest.raises(InvalidInput, match="--port"):
        plan_start(inputs(parameters=["--port", "9000"]))


def test_a_program_that_is_not_installed_is_refused() -> None:
    missing = SERVER.model_copy(update={"executable": "no-such-engine-program"})
    with pytest.raises(EngineStartFailed, match="no-such-engine-program"):
        plan_start(inputs(version=missing))


def test_a_placement_without_ranks_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no rank to start"):
        plan_start(inputs(decision=Decision(placement=Placement(ranks=()))))
