"""A DOUBLE of the Hugging Face Hub: the part of its HTTP API that ``huggingface_hub`` uses to list
and download a model, serving real files (a tiny TEST model built by the tests).

What it answers, as the Hub does (read from huggingface_hub 2.4's ``hf_api.py`` / ``file_download.py``):

- ``GET /api/models/{repo}[/revision/{rev}]``: model info with ``sha`` (the commit) and
  ``siblings``; with ``?blobs=true`` each sibling has ``size``, ``blobId`` and, for LFS files,
  ``lfs: {sha256, size, pointerSize}``. An unknown repository is 404 with ``X-Error-Code:
  RepoNotFound``, an unknown revision 404 with ``RevisionNotFound``.
- ``HEAD|GET /{repo}/resolve/{rev}/{path}``: a file kept in git is answered here (``ETag`` = its
  git blob id, ``X-Repo-Commit``); an LFS file is a 302 to the CDN (a second server, another
  origin) with ``X-Linked-Etag`` (its SHA-256), ``X-Linked-Size`` and ``X-Repo-Commit``.
- ``GET /lfs/{sha256}`` on the CDN: the bytes, ``ETag`` = the SHA-256.

Both file endpoints honour ``Range`` (206 with ``Content-Range``, 416 past the end) and the
injected faults (``faults.Faults``). Every request is recorded in ``log``.

Usage::

    with HuggingFaceHubDouble([RepositoryDouble.from_directory("org/tiny", model_dir)]) as hub:
        HuggingFaceSource(endpoint=hub.endpoint).list_files(parse_model_reference("hf://org/tiny"))
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from modelyard.testing.hub_doubles.faults import Faults
from modelyard.testing.hub_doubles.repository import RepositoryDouble
from modelyard.testing.hub_doubles.serving import DoubleHttpServer, DoubleRequestHandler, RequestLog

DEFAULT_BRANCH = "main"


class _HubHandler(DoubleRequestHandler):
    def do_GET(self) -> None:
        self._route()

    def do_HEAD(self) -> None:
        self._route()

    @property
    def hub(self) -> HuggingFaceHubDouble:
        owner: HuggingFaceHubDouble = self.server.owner
        return owner

    def _route(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        if path.startswith("/api/models/"):
            self._model_info(path.removeprefix("/api/models/"), parse_qs(url.query))
        elif "/resolve/" in path:
            repo_id, _, rest = path.strip("/").partition("/resolve/")
            revision, _, file_path = rest.partition("/")
            self._resolve(repo_id, revision, file_path)
        else:
            self.send_json(404, b'{"error": "not found"}')

    def _repository(self, repo_id: str, revision: str) -> RepositoryDouble | None:
        repository = self.hub.repositories.get(repo_id)
        if repository is None:
            self.send_json(
                404,
                json.dumps({"error": "Repository not found"}).encode(),
                {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
            )
            return None
        if revision not in (DEFAULT_BRANCH, repository.commit):
            self.send_json(
                404,
                json.dumps({"error": f"Invalid rev id: {revision}"}).encode(),
                {"X-Error-Code": "RevisionNotFound", "X-Error-Message": f"Invalid rev id: {revision}"},
            )
            return None
        return repository

    def _model_info(self, rest: str, query: dict[str, list[str]]) -> None:
        repo_id, _, revision = rest.partition("/revision/")
        repository = self._repository(repo_id.strip("/"), revision or DEFAULT_BRANCH)
        if repository is None:
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings: list[dict[str, Any]] = []
        for file in repository.files.values():
            sibling: dict[str, Any] = {"rfilename": file.path}
            if blobs and self.hub.faults.hides_hash(file.path):
                sibling["size"] = file.size  # a mirror's listing: the size, no hash
            elif blobs:
                sibling.update(size=file.size, blobId=file.git_blob_id)
                if file.lfs:
                    sibling["lfs"] = {
                        "sha256": file.sha256,
                        "size": file.size,
                        "pointerSize": len(file.pointer),
                    }
            siblings.append(sibling)
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        info = {
            "_id": repository.commit[:24],
            "id": repository.repo_id,
            "modelId": repository.repo_id,
            "author": repository.repo_id.split("/")[0],
            "sha": repository.commit,
            "lastModified": now,
            "createdAt": now,
            "private": False,
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "library_name": "transformers",
            "tags": ["transformers", "safetensors", "text-generation", "modelyard-test-double"],
            "pipeline_tag": "text-generation",
            "siblings": siblings,
            "usedStorage": repository.size_bytes,
        }
        self.send_json(200, json.dumps(info).encode())

    def _resolve(self, repo_id: str, revision: str, file_path: str) -> None:
        repository = self._repository(repo_id, revision)
        if repository is None:
            return
        served = repository.files.get(file_path)
        if served is None:
            self.send_json(404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"})
            return
        hashless = self.hub.faults.hides_hash(served.path)
        if served.lfs:
            headers = {
                "Location": f"{self.hub.cdn_url}/lfs/{served.sha256}?repo={repository.repo_id}",
                "X-Linked-Etag": f'"{served.sha256}"',
                "X-Linked-Size": str(served.size),
                "X-Repo-Commit": repository.commit,
                "ETag": f'"{served.git_blob_id}"',
            }
            if hashless:
                del headers["X-Linked-Etag"], headers["ETag"]
            self.send_empty(302, headers)
            return
        headers = {"X-Repo-Commit": repository.commit}
        if not hashless:
            headers["ETag"] = f'"{served.git_blob_id}"'
        self.serve_file(served, headers)


class _CdnHandler(DoubleRequestHandler):
    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def _serve(self) -> None:
        owner: HuggingFaceHubDouble = self.server.owner
        url = urlsplit(self.path)
        sha256 = url.path.removeprefix("/lfs/")
        repo_id = parse_qs(url.query).get("repo", [""])[0]
        repository = owner.repositories.get(repo_id)
        served = repository.by_sha256(sha256) if repository else None
        if served is None:
            self.send_json(404, b'{"error": "no such object"}')
            return
        self.serve_file(
            served, {} if owner.faults.hides_hash(served.path) else {"ETag": f'"{served.sha256}"'}
        )


class HuggingFaceHubDouble:
    """The hub and its CDN, each on its own loopback port. ``endpoint`` is what ``HF_ENDPOINT`` takes."""

    def __init__(self, repositories: list[RepositoryDouble]) -> None:
        self.repositories = {repository.repo_id: repository for repository in repositories}
        self.log = RequestLog()
        self.faults = Faults()
        self._hub = DoubleHttpServer(_HubHandler, "hub", self)
        self._cdn = DoubleHttpServer(_CdnHandler, "cdn", self)

    @property
    def endpoint(self) -> str:
        return self._hub.url

    @property
    def cdn_url(self) -> str:
        return self._cdn.url

    def start(self) -> HuggingFaceHubDouble:
        self._hub.start()
        self._cdn.start()
        return self

    def stop(self) -> None:
        self.faults.release_all()
        self._hub.stop()
        self._cdn.stop()

    def __enter__(self) -> HuggingFaceHubDouble:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
