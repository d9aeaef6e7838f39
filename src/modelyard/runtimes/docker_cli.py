"""The few Docker CLI calls the Docker runtime makes, as asyncio subprocesses, with errors that
say what to do (no daemon, no such image, no NVIDIA runtime).

Usage::

    cli = DockerCli()
    ids = await cli.container_ids({"modelyard.owner": owner}, include_stopped=True)
    state = await cli.inspect_state(ids[0])   # {"Running": False, "ExitCode": 137, ...}
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import shutil
import signal
from collections.abc import Mapping
from typing import BinaryIO

_PR_SET_PDEATHSIG = 1
DEFAULT_TIMEOUT_SECONDS = 120.0


class DockerCliError(Exception):
    """A Docker CLI call failed; ``message`` is Docker's own words, ``hint`` what to do."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    @property
    def no_such_container(self) -> bool:
        text = self.message.lower()
        return "no such container" in text or "no such object" in text


def hint_for(stderr: str) -> str | None:
    text = stderr.lower()
    if "cannot connect to the docker daemon" in text or "is the docker daemon running" in text:
        return "start the Docker daemon (dockerd, or `systemctl start docker`) and let this user use it"
    if "unable to find image" in text or "no such image" in text or "pull access denied" in text:
        return (
            "the image is not on this host: `docker pull` it or `docker load` an exported image, or "
            "let modelyard pull it (the backend version's pull_policy: if-missing or always)"
        )
    if "could not select device driver" in text or "nvidia-container-cli" in text:
        return (
            "install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure "
            "--runtime=docker`, then restart dockerd"
        )
    if "is already in use by container" in text:
        return "a container of that name exists: `docker rm -f` it, or let modelyard's orphan sweep remove it"
    if "permission denied" in text and "docker.sock" in text:
        return "add this user to the docker group (or run modelyard as a user allowed to use Docker)"
    return None


def meaningful_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    chosen = (errors or lines or ["no output"])[-1]
    return chosen.removeprefix("docker: ").removeprefix("Error response from daemon: ")


def _die_with_parent() -> None:
    """Run in the child before exec: it gets SIGKILL when the server dies (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class DockerCli:
    def __init__(
        self, executable: str = "docker", *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    ) -> None:
        self.executable = shutil.which(executable) or executable
        self._timeout_seconds = timeout_seconds

    async def run(self, arguments: list[str], *, env: Mapping[str, str] | None = None) -> str:
        """Run ``docker ARGUMENTS``; its stdout, or ``DockerCliError`` with its stderr."""
        try:
            process = await asyncio.create_subprocess_exec(
                self.executable,
                *arguments,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env) if env is not None else None,
            )
        except FileNotFoundError as error:
            raise DockerCliError(
                f"the Docker CLI {self.executable!r} is not installed",
                hint="install Docker (Debian: apt-get install docker.io) to run container backends",
            ) from error
        try:
            async with asyncio.timeout(self._timeout_seconds):
                stdout, stderr = await process.communicate()
        except TimeoutError as error:
            process.kill()
            await process.wait()
            raise DockerCliError(
                f"docker {arguments[0]} did not answer in {self._timeout_seconds:.0f} s",
                hint="check that dockerd is healthy (`docker info`)",
            ) from error
        if process.returncode is not None and process.returncode < 0:
            name = (
                signal.Signals(-process.returncode).name
                if -process.returncode in signal.valid_signals()
                else ""
            )
            raise DockerCliError(
                f"docker {arguments[0]} was killed by {name or f'signal {-process.returncode}'}",
                hint="see the host's kernel log (an OOM kill?) and dockerd's log",
            )
        if process.returncode != 0:
            text = stderr.decode(errors="replace")
            raise DockerCliError(meaningful_line(text), hint=hint_for(text))
        return stdout.decode(errors="replace")

    async def container_ids(self, labels: Mapping[str, str], *, include_stopped: bool = False) -> list[str]:
        arguments = ["ps", "--quiet", "--no-trunc"]
        if include_stopped:
            arguments.append("--all")
        for key, value in labels.items():
            arguments += ["--filter", f"label={key}={value}"]
        return [line for line in (await self.run(arguments)).split() if line]

    async def inspect_state(self, container_id: str) -> dict[str, object]:
        output = await self.run(["inspect", "--format", "{{json .State}}", container_id])
        value = json.loads(output)
        if not isinstance(value, dict):
            raise DockerCliError(f"docker inspect printed no state for {container_id}")
        return value

    async def inspect_labels(self, container_ids: list[str]) -> list[tuple[str, str, dict[str, str]]]:
        """(id, name, labels) of each container (gone ones are left out)."""
        if not container_ids:
            return []
        template = "{{json .Id}}\t{{json .Name}}\t{{json .Config.Labels}}"
        try:
            output = await self.run(["inspect", "--format", template, *container_ids])
        except DockerCliError as error:
            if not error.no_such_container or len(container_ids) == 1:
                if error.no_such_container:
                    return []
                raise
            found = []  # one vanished meanwhile: ask one by one
            for container_id in container_ids:
                found += await self.inspect_labels([container_id])
            return found
        described = []
        for line in output.splitlines():
            if not line.strip():
                continue
            raw_id, raw_name, raw_labels = line.split("\t", 2)
            labels = json.loads(raw_labels) or {}
            described.append((json.loads(raw_id), json.loads(raw_name).lstrip("/"), dict(labels)))
        return described

    async def spawn(self, arguments: list[str], *, output: BinaryIO | int) -> asyncio.subprocess.Process:
        """Start ``docker ARGUMENTS`` writing to ``output``, killed when this server dies."""
        return await asyncio.create_subprocess_exec(
            self.executable,
            *arguments,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=output,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
