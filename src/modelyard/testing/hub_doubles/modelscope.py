"""A DOUBLE of ModelScope's file API, serving real files (a tiny TEST model built by the tests).

What it answers, in the shape the ``modelscope`` SDK reads (``HubApi.get_model_files``,
``get_file_download_url``; a sample answer is in its ``tests/hub/test_hub_retry.py``):

- ``GET /api/v1/models/{owner}/{name}/repo/files?Revision=R&Recursive=true``:
  ``{"Code": 200, "Data": {"Files": [{"Name", "Path", "Type", "Size", "Sha256", "IsLFS",
  "Revision", "Mode", "CommitMessage", "CommittedDate", "CommitterName", "InCheck"}]},
  "Message": "success", "RequestId", "Success": true}``; folders appear as ``Type: "tree"``.
  An unknown repository or revision is 404 with ``Code: 404``.
- ``GET /api/v1/models/{owner}/{name}/repo?Revision=R&FilePath=P``: the bytes, with ``Range``.

Usage::

    with ModelScopeDouble([RepositoryDouble.from_directory("org/tiny", model_dir)]) as hub:
        ModelScopeSource(endpoint=hub.endpoint)
"""

from __future__ import annotations

import json
import uuid
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from modelyard.testing.hub_doubles.faults import Faults
from modelyard.testing.hub_doubles.repository import RepositoryDouble
from modelyard.testing.hub_doubles.serving import DoubleHttpServer, DoubleRequestHandler, RequestLog

DEFAULT_BRANCH = "master"
COMMITTED_AT = 1767225600


class _ModelScopeHandler(DoubleRequestHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        owner: ModelScopeDouble = self.server.owner
        if not path.startswith("/api/v1/models/"):
            self._answer(404, "not found")
            return
        rest = path.removeprefix("/api/v1/models/")
        if rest.endswith("/repo/files"):
            repository = self._repository(owner, rest.removesuffix("/repo/files"), query)
            if repository is not None:
                self._files(owner, repository)
        elif rest.endswith("/repo"):
            repository = self._repository(owner, rest.removesuffix("/repo"), query)
            if repository is None:
                return
            served = repository.files.get(query.get("FilePath", ""))
            if served is None:
                self._answer(404, f"file {query.get('FilePath')!r} not found")
                return
            hashless = owner.faults.hides_hash(served.path)
            self.serve_file(served, {} if hashless else {"ETag": f'"{served.sha256}"'})
        else:
            self._answer(404, "not found")

    def _answer(self, status: int, message: str, data: Any = None) -> None:
        body = {
            "Code": status,
            "Data": data,
            "Message": message,
            "RequestId": str(uuid.uuid4()),
            "Success": status == 200,
        }
        self.send_json(status, json.dumps(body).encode())

    def _repository(
        self, owner: ModelScopeDouble, repo_id: str, query: dict[str, str]
    ) -> RepositoryDouble | None:
        repository = owner.repositories.get(repo_id.strip("/"))
        revision = query.get("Revision", DEFAULT_BRANCH)
        if repository is None:
            self._answer(404, f"model {repo_id} not exists")
            return None
        if revision not in (DEFAULT_BRANCH, repository.commit):
            self._answer(404, f"revision {revision} not exists")
            return None
        return repository

    def _files(self, owner: ModelScopeDouble, repository: RepositoryDouble) -> None:
        entries: list[dict[str, Any]] = []
        folders = sorted({path.rsplit("/", 1)[0] for path in repository.files if "/" in path})
        for folder in folders:
            entries.append({"Name": folder.rsplit("/", 1)[-1], "Path": folder, "Type": "tree", "Size": 0})
        for file in repository.files.values():
            entry: dict[str, Any] = {
                "CommitMessage": "upload",
                "CommittedDate": COMMITTED_AT,
                "CommitterName": "modelyard-test-double",
                "InCheck": False,
                "IsLFS": file.lfs,
                "Mode": "33188",
                "Name": file.path.rsplit("/", 1)[-1],
                "Path": file.path,
                "Revision": repository.commit,
                "Sha256": file.sha256,
                "Size": file.size,
                "Type": "blob",
            }
            if owner.faults.hides_hash(file.path):
                del entry["Sha256"]
            entries.append(entry)
        self._answer(200, "success", {"Files": entries})


class ModelScopeDouble:
    def __init__(self, repositories: list[RepositoryDouble]) -> None:
        self.repositories = {repository.repo_id: repository for repository in repositories}
        self.log = RequestLog()
        self.faults = Faults()
        self._server = DoubleHttpServer(_ModelScopeHandler, "modelscope", self)

    @property
    def endpoint(self) -> str:
        return self._server.url

    def start(self) -> ModelScopeDouble:
        self._server.start()
        return self

    def stop(self) -> None:
        self.faults.release_all()
        self._server.stop()

    def __enter__(self) -> ModelScopeDouble:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
