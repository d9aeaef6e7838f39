"""How long modelyard's image pull takes from a registry on loopback, against ``docker pull`` of
the same image measured in the same run.

A real registry (Debian's ``docker-registry`` with htpasswd auth, ``testing/local_registry.py``)
gets an image built here from a folder of this machine (default ``/usr/lib/python3.11``, about
54 MB unpacked), pushed, and removed from dockerd. Then, ``--runs`` times each, interleaved so
that both see the same load: ``pull_image`` (the Engine API over dockerd's socket, the credential
in ``X-Registry-Auth``, progress parsed, as the controller pulls) and ``docker pull`` under a
temporary ``DOCKER_CONFIG`` holding the login; the image is removed from dockerd after each pull.
Prints the bytes that came down, the median seconds of each, and their ratio.

    python benchmarks/image_pull.py
    python benchmarks/image_pull.py --folder /usr/share/locale --runs 5 --json /tmp/image-pull.json

Takes about a minute; never run as a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from modelyard.runtimes.image_pull import DockerDaemon, PullResult, RegistryAuth, pull_image
from modelyard.testing.local_registry import LocalRegistry

USERNAME = "bench"


def build_image(folder: Path, reference: str) -> int:
    """``docker import`` a tar of ``folder`` (at its own path) as ``reference``; its size in bytes."""
    tar = subprocess.run(
        ["tar", "-C", "/", "-cf", "-", str(folder).lstrip("/")], capture_output=True, check=True
    ).stdout
    subprocess.run(["docker", "import", "-", reference], input=tar, capture_output=True, check=True)
    return len(tar)


def docker(*arguments: str, config: Path, stdin: bytes | None = None) -> None:
    subprocess.run(
        ["docker", "--config", str(config), *arguments], input=stdin, capture_output=True, check=True
    )


def remove(reference: str) -> None:
    subprocess.run(["docker", "image", "rm", "--force", reference], capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=Path("/usr/lib/python3.11"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    password = uuid.uuid4().hex
    with (
        tempfile.TemporaryDirectory() as root,
        LocalRegistry.start(Path(root) / "registry", username=USERNAME, password=password) as registry,
    ):
        reference = f"{registry.host}/bench/{options.folder.name}:1"
        tar_bytes = build_image(options.folder, reference)
        config = Path(root) / "docker-config"
        config.mkdir()
        docker(
            "login",
            "--username",
            USERNAME,
            "--password-stdin",
            registry.host,
            config=config,
            stdin=password.encode(),
        )
        docker("push", reference, config=config)
        remove(reference)
        auth = RegistryAuth(server_address=registry.host, username=USERNAME, password=password)
        ours: list[float] = []
        theirs: list[float] = []
        result: PullResult | None = None
        for _ in range(options.runs):
            result = asyncio.run(pull_image(reference, daemon=DockerDaemon(), auth=auth))
            ours.append(result.seconds)
            remove(reference)
            started = time.monotonic()
            docker("pull", reference, config=config)
            theirs.append(time.monotonic() - started)
            remove(reference)
    assert result is not None
    figures = {
        "folder": str(options.folder),
        "image_tar_bytes": tar_bytes,
        "downloaded_bytes": result.downloaded_bytes,
        "layers": result.layers_total,
        "modelyard_pull_median_seconds": statistics.median(ours),
        "docker_pull_median_seconds": statistics.median(theirs),
        "ratio": statistics.median(ours) / statistics.median(theirs),
        "runs": options.runs,
    }
    pulled_mb = result.downloaded_bytes / 1e6
    print(
        f"image from {options.folder}: {tar_bytes / 1e6:.1f} MB as a tar, {pulled_mb:.1f} MB pulled "
        f"(compressed, {result.layers_total} layer)"
    )
    print(f"modelyard pull_image: median {figures['modelyard_pull_median_seconds']:.2f} s of {options.runs}")
    print(f"docker pull:          median {figures['docker_pull_median_seconds']:.2f} s of {options.runs}")
    print(f"ratio (modelyard / docker pull): {figures['ratio']:.2f}")
    if options.json is not None:
        options.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
