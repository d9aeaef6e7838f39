"""One ``docker run`` for a container on this host (the Docker runtime) and on a cluster's worker
(the Ray supervisor): the same name, labels, model mount, GPUs and env by name; on a worker the
CLI stays attached and the container is removed when it ends."""

from __future__ import annotations

from pathlib import Path

from modelyard.runtimes.base import EngineAddress, EngineIdentity, LaunchSpec
from modelyard.runtimes.docker import (
    LABEL_RUNTIME,
    DockerOptions,
    DockerRuntime,
    container_name,
    docker_run_arguments,
)


def _spec(tmp_path: Path) -> LaunchSpec:
    return LaunchSpec(
        identity=EngineIdentity(
            owner="owner-1",
            launch_token="token-1",
            deployment="chat",
            instance_uid="0123456789abcdef",
            replica_index=0,
            start_number=2,
        ),
        program=["python3", "-m", "engine"],
        arguments=["--port", "8001"],
        env={"HF_TOKEN": "hf_secret_value", "CUDA_VISIBLE_DEVICES": "1,3"},
        gpu_ids=[1, 3],
        model_path="/srv/models/qwen",
        address=EngineAddress(bind_host="10.0.0.2", port=8001, reach_host="10.0.0.2", reach_port=8001),
        log_path=tmp_path / "start-2.log",
        working_directory=tmp_path / "work",
        image="vllm/vllm-openai:v0.19.1",
    )


def test_a_workers_container_gets_the_docker_runtimes_argv_attached_and_removed_on_exit(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    here = DockerRuntime(DockerOptions()).run_arguments(spec)
    worker = docker_run_arguments(
        spec, DockerOptions(), "docker", detach=False, remove_on_exit=True, labels={LABEL_RUNTIME: "ray"}
    )
    assert here[1:3] == ["run", "--detach"] and "--rm" not in here
    assert worker[:3] == ["docker", "run", "--rm"] and "--detach" not in worker
    # Everything else is the same function's: only the Ray label is added.
    at = worker.index(f"{LABEL_RUNTIME}=ray")
    assert worker[at - 1] == "--label"
    assert worker[3 : at - 1] + worker[at + 1 :] == here[3:]
    assert worker[worker.index("--name") + 1] == container_name(spec.identity)
    assert worker[worker.index("--gpus") + 1] == '"device=1,3"'
    assert "/srv/models/qwen:/models/qwen:ro" in worker
    assert "modelyard.launch-token=token-1" in worker
    # Env by name only: the value goes through the CLI's environment, the GPUs through --gpus.
    assert "HF_TOKEN" in worker and not any("hf_secret_value" in part for part in worker)
    assert "CUDA_VISIBLE_DEVICES" not in worker
