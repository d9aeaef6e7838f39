"""Model files where the replica runs, on a cluster as a user builds it: ``modelyard serve
--cluster`` (its host has no GPU) and two hosts joined with ``modelyard worker join``, each in a
mount namespace of its own whose models folder starts empty (a tmpfs over it), so each host has
only the files copied there. Everything goes through the CLI and the REST API.

- every worker's copy of every model shown (``missing`` at first), a push to one of them
  (``models push``), verified there; the replica placed on that host, answering;
- a push to the other host resumes a file from an earlier push's part file (by offset) and
  replaces a file in place with a flipped byte (caught by its SHA-256 on the worker);
- a model whose files only one worker has, registered there (``models add --worker``), checked
  there and not on the server, deployed there;
- an exported bundle pushed to a worker, its model registered as on the workers only;
- a worker that leaves is shown lost beside its copies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from modelyard.hub.download import PARTIAL_FOLDER
from modelyard.testing.cluster_process import ENGINE_DOUBLE_BACKEND_YAML, JoinedCluster, chat, start_cluster
from modelyard.testing.serve_process import wait_until
from ray_cluster import fake_gpu, require_ray_for_tests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="a host of its own files needs a mount namespace (root)"),
    pytest.mark.skipif(shutil.which("nsenter") is None, reason="needs util-linux's nsenter"),
]
WAIT_SECONDS = 120.0


@dataclass
class Hosts:
    cluster: JoinedCluster
    # The folder each joined host has empty (its own tmpfs); the server's host has the models in it.
    shared: Path
    tiny: Path

    def on_host(self, worker: str, script: str, *arguments: str) -> None:
        """``sh -c script`` in ``worker``'s mount namespace (as someone on that host)."""
        pid = self.cluster.workers[worker].process.pid
        done = subprocess.run(
            ["nsenter", "--mount", "--target", str(pid), "sh", "-c", script, "sh", *arguments],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    def model(self, name: str) -> dict[str, Any]:
        with self.cluster.server.api() as client:
            answer = client.get(f"/api/v1/models/{name}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def copies(self, name: str) -> dict[str, dict[str, Any]]:
        return {copy["worker"]: copy for copy in self.model(name)["workers"]}

    def wait_for_copies(self, name: str, expected: dict[str, str]) -> None:
        def shown() -> bool:
            copies = self.copies(name)
            return all(copies.get(worker, {}).get("state") == state for worker, state in expected.items())

        wait_until(shown, WAIT_SECONDS, f"{name} on the workers: {expected}", interval=0.3)

    def placed_on(self, deployment: str) -> str:
        with self.cluster.server.api() as client:
            [instance] = client.get(f"/api/v1/deployments/{deployment}").json()["instances"]
        assert instance["state"] == "running", instance
        return str(instance["placement"]["ranks"][0]["worker_name"])


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[Hosts]:
    require_ray_for_tests()
    root = tmp_path_factory.mktemp("models-on-workers")
    shared = root / "models"
    tiny = shared / "tiny"
    shutil.copytree(tiny_model_dir, tiny)
    # The same files outside the hidden folder: what a user would copy by hand onto a host.
    shutil.copytree(tiny_model_dir, root / "server-copy")
    cluster = start_cluster(root)
    try:
        with cluster.server.api() as client:
            imported = client.post("/api/v1/backends/import", content=ENGINE_DOUBLE_BACKEND_YAML)
            assert imported.status_code in (200, 201), imported.text
            added = client.post("/api/v1/models", json={"path": str(tiny), "name": "tiny"})
            assert added.status_code == 201, added.text
        for name in ("node-p", "node-q"):  # one at a time: two raylets starting at once on a
            cluster.join(name, [fake_gpu("NVIDIA L4", 0, 24)], hidden=shared)  # busy host time out
            cluster.wait_for_state(name, "ready")
        yield Hosts(cluster, shared, tiny)
    finally:
        cluster.close()


def _deploy(hosts: Hosts, model: str, name: str) -> None:
    deployed = hosts.cluster.cli(
        "deploy",
        model,
        "--name",
        name,
        "--backend",
        "vllm-double",
        "--gpus",
        "1",
        "--skip-verification",
        "--timeout",
        "120",
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr


def test_each_worker_shows_the_model_missing_then_verified_after_a_push_and_the_replica_goes_there(
    hosts: Hosts,
) -> None:
    cluster = hosts.cluster
    hosts.wait_for_copies("tiny", {"node-p": "missing", "node-q": "missing"})
    listed = cluster.cli("models", "list")
    assert "WORKERS" in listed.stdout and "node-p missing, node-q missing" in listed.stdout, listed.stdout
    pushed = cluster.cli("models", "push", "tiny", "--worker", "node-p")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "push task" in pushed.stderr and "completed" in pushed.stderr
    assert "every SHA-256 checked on the worker" in pushed.stderr
    copies = hosts.copies("tiny")
    assert copies["node-p"]["state"] == "verified" and copies["node-p"]["verified_at"]
    assert copies["node-q"]["state"] == "missing"
    shown = cluster.cli("models", "show", "tiny")
    assert "copy it there: modelyard models push tiny --worker node-q" in shown.stdout, shown.stdout
    _deploy(hosts, "tiny", "chat")
    assert hosts.placed_on("chat") == "node-p"
    key = cluster.cli("keys", "create", "me", "--rotate").stdout.strip()
    answer = chat(cluster.server.url, key, "chat")
    assert answer.status_code == 200, answer.text
    with cluster.server.api() as client:
        assert client.delete("/api/v1/deployments/chat").status_code == 202


def test_a_replica_kept_to_a_worker_without_the_files_waits_naming_the_push_command(hosts: Hosts) -> None:
    hosts.wait_for_copies("tiny", {"node-q": "missing"})
    body = {
        "model": "tiny",
        "name": "pinned",
        "backend": "vllm-double",
        "gpus_per_replica": 1,
        "skip_verification": True,
        "workers": ["node-q"],
    }
    with hosts.cluster.server.api() as client:
        created = client.post("/api/v1/deployments", json=body)
        assert created.status_code == 201, created.text
        [warning] = [
            w for w in created.json()["warnings"] if w["check_id"] == "model.missing-on-some-workers"
        ]
        assert "modelyard models push tiny --worker node-q" in warning["fix"]

    def waiting() -> bool:
        with hosts.cluster.server.api() as client:
            instances = client.get("/api/v1/deployments/pinned").json()["instances"]
        return any(
            instance["state"] == "pending"
            and "the files of model tiny are on none of the workers it may use (node-q: missing); copy them "
            "there: modelyard models push tiny --worker node-q"
            in (instance["reason"] or "")
            for instance in instances
        )

    wait_until(waiting, WAIT_SECONDS, "the replica pending with the push command", interval=0.3)
    with hosts.cluster.server.api() as client:
        assert client.delete("/api/v1/deployments/pinned").status_code == 202


def test_a_push_resumes_a_part_file_by_offset_and_replaces_a_file_with_a_flipped_byte(hosts: Hosts) -> None:
    weights = hosts.tiny / "model.safetensors"
    half = weights.stat().st_size // 2
    staging = hosts.tiny / PARTIAL_FOLDER
    # On node-q: half of the weights as an interrupted push leaves them, and a damaged tokenizer.
    hosts.on_host(
        "node-q",
        'mkdir -p "$2" && head -c "$3" "$4/model.safetensors" > "$2/model.safetensors.part" && '
        'cp "$4/tokenizer.json" "$1/tokenizer.json" && printf X | dd of="$1/tokenizer.json" bs=1 seek=100 '
        "conv=notrunc status=none",
        str(hosts.tiny),
        str(staging),
        str(half),
        str(hosts.cluster.root / "server-copy"),
    )
    pushed = hosts.cluster.cli("models", "push", "tiny", "--worker", "node-q", "--json")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    [task] = json.loads(pushed.stdout)
    assert task["state"] == "completed", task
    assert "1 resumed where an earlier push stopped" in task["reason"], task["reason"]
    assert "replaced damaged tokenizer.json" in task["reason"], task["reason"]
    assert hosts.copies("tiny")["node-q"]["state"] == "verified"


def test_a_model_only_on_a_worker_is_checked_there_registered_and_deployed_there(hosts: Hosts) -> None:
    cluster = hosts.cluster
    only = hosts.shared / "only-on-q"
    assert not only.exists()  # not on the server's host
    hosts.on_host("node-q", 'cp -a "$1" "$2"', str(hosts.cluster.root / "server-copy"), str(only))
    refused = cluster.cli("models", "add", str(only), "--name", "nope")
    assert refused.returncode == 1 and "does not exist" in refused.stderr, refused.stderr
    nowhere = cluster.cli("models", "add", "/nowhere/at-all", "--worker", "node-q")
    assert nowhere.returncode == 1
    assert "on worker node-q: /nowhere/at-all does not exist" in nowhere.stderr, nowhere.stderr
    added = cluster.cli("models", "add", str(only), "--name", "only-q", "--worker", "node-q")
    assert added.returncode == 0, added.stdout + added.stderr
    assert "its files are on worker node-q only" in added.stdout
    model = hosts.model("only-q")
    assert model["on_server"] is False and model["architecture"] == "Qwen3ForCausalLM"
    hosts.wait_for_copies("only-q", {"node-q": "present", "node-p": "missing"})
    push = cluster.cli("models", "push", "only-q", "--worker", "node-p")
    assert push.returncode == 1 and "has no copy on the server's host" in push.stderr, push.stderr
    _deploy(hosts, "only-q", "only")
    assert hosts.placed_on("only") == "node-q"
    key = cluster.cli("keys", "create", "me", "--rotate").stdout.strip()
    answer = chat(cluster.server.url, key, "only")
    assert answer.status_code == 200, answer.text
    with cluster.server.api() as client:
        assert client.delete("/api/v1/deployments/only").status_code == 202


def test_an_exported_bundle_is_pushed_to_a_worker_and_its_model_registered_there(hosts: Hosts) -> None:
    cluster = hosts.cluster
    archive = cluster.root / "tiny.modelyard.tar"
    exported = cluster.cli("models", "export", "tiny", str(archive))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    target = hosts.shared / "bundled"
    pushed = cluster.cli(
        "models", "push", "from-bundle", "--bundle", str(archive), "--worker", "node-q", "--to", str(target)
    )
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "every SHA-256 checked on the worker" in pushed.stderr
    model = hosts.model("from-bundle")
    assert model["on_server"] is False and model["path"] == str(target) and model["source"] == "bundle"
    assert hosts.copies("from-bundle")["node-q"]["state"] == "verified"
    assert not target.exists()  # on node-q only


def test_a_worker_that_leaves_is_shown_lost_beside_its_copies(hosts: Hosts) -> None:
    hosts.cluster.kill_worker("node-p")
    hosts.cluster.wait_for_state("node-p", "lost")
    copy = hosts.copies("tiny")["node-p"]
    assert copy["worker_state"] == "lost" and copy["state"] == "verified"
    listed = hosts.cluster.cli("models", "list")
    assert "node-p verified (worker lost)" in listed.stdout, listed.stdout
