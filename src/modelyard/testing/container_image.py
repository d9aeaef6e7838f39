"""A container image for tests, made here with no registry: an empty root file system imported
with ``docker import``, run with this host's Python (and the project) bind-mounted read-only.

Nothing can be pulled on the development machines, and the project's engine double
(``python -m modelyard.bench.reference_server``) needs only a Python: the image is a skeleton
(``/usr``, ``/tmp`` and the usual links), and ``host_python_mounts`` lists the host folders that
give it this interpreter, its virtual environment and the project's source, at the same paths.

Usage::

    tag = import_skeleton_image()                 # "modelyard-test-skeleton:1"
    options = DockerOptions(extra_volumes=tuple(host_python_mounts()))
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import modelyard
from modelyard.runtimes.base import Mount

SKELETON_TAG = "modelyard-test-skeleton:2"
# /sbin is a folder of its own: Docker mounts its init (``--init``) at /sbin/docker-init.
_FOLDERS = ("usr", "etc", "tmp", "proc", "sys", "dev", "root", "run", "var", "sbin")
_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64"}


def skeleton_tar() -> bytes:
    """An empty Debian-shaped root file system as a tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in _FOLDERS:
            entry = tarfile.TarInfo(name)
            entry.type = tarfile.DIRTYPE
            entry.mode = 0o1777 if name == "tmp" else 0o755
            archive.addfile(entry)
        for name, target in _LINKS.items():
            entry = tarfile.TarInfo(name)
            entry.type = tarfile.SYMTYPE
            entry.linkname = target
            archive.addfile(entry)
    return buffer.getvalue()


def import_skeleton_image(docker: str = "docker", tag: str = SKELETON_TAG) -> str:
    """``docker import`` the skeleton as ``tag`` (once: an existing image is kept)."""
    present = subprocess.run([docker, "image", "inspect", tag], capture_output=True, check=False)
    if present.returncode != 0:
        subprocess.run([docker, "import", "-", tag], input=skeleton_tar(), capture_output=True, check=True)
    return tag


def host_python_mounts() -> list[Mount]:
    """The host folders that make this Python and the project run inside the skeleton."""
    source = Path(modelyard.__file__).resolve().parent.parent
    folders = {"/usr", sys.base_prefix, sys.prefix, str(source)}
    # The venv's python is a link into the base installation; follow it wherever it lives.
    folders.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    return [Mount(host_path=folder, engine_path=folder, read_only=True) for folder in sorted(folders)]


def project_source_folder() -> str:
    """The folder to put on ``PYTHONPATH`` inside the container (the project's ``src``)."""
    return str(Path(modelyard.__file__).resolve().parent.parent)
