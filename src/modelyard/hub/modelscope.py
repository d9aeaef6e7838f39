"""ModelScope through its HTTP file API (not the ``modelscope`` package).

Two endpoints, as the ``modelscope`` SDK itself calls them (``HubApi.get_model_files`` and
``get_file_download_url``):

- ``GET {endpoint}/api/v1/models/{owner}/{name}/repo/files?Revision=R&Recursive=true``:
  ``{"Code": 200, "Data": {"Files": [{"Path", "Name", "Type": "blob"|"tree", "Size", "Sha256",
  "IsLFS", "Revision", ...}]}, "Message", "Success"}``; every file carries its SHA-256.
- ``GET {endpoint}/api/v1/models/{owner}/{name}/repo?Revision=R&FilePath=P``: the bytes, with
  ``Range``.

Why not the package: its ``snapshot_download`` has the gaps this module exists to close (its own
retry loop and tqdm progress, no stall timeout, no cancel), and it would add a second HTTP stack
(requests) and its dependencies for two GET requests. ModelScope's file list gives no commit for
the whole repository, so a pull follows the branch or tag it names (``master`` by default).

Usage::

    source = ModelScopeSource(endpoint="https://www.modelscope.cn")
    listing = source.list_files(parse_model_reference("ms://Qwen/Qwen3-8B"))
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import httpx

from modelyard import __version__
from modelyard.errors import Forbidden, HubUnavailable, NotFound
from modelyard.hub.files import RemoteFile, RepoListing, check_remote_path, normalise_hash
from modelyard.hub.reference import MODELSCOPE_DEFAULT_ENDPOINT, ModelReference
from modelyard.hub.source import FileRequest

logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT = MODELSCOPE_DEFAULT_ENDPOINT
DEFAULT_REVISION = "master"
LIST_TIMEOUT_SECONDS = 30.0


class ModelScopeSource:
    """``HubSource`` for ModelScope at ``endpoint``."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT) -> None:
        self.endpoint = endpoint.rstrip("/")

    def _headers(self) -> dict[str, str]:
        return {"User-Agent": f"modelyard/{__version__}", "Accept-Encoding": "identity"}

    def list_files(self, reference: ModelReference) -> RepoListing:
        revision = reference.revision or DEFAULT_REVISION
        url = f"{self.endpoint}/api/v1/models/{reference.repo_id}/repo/files"
        try:
            response = httpx.get(
                url,
                params={"Revision": revision, "Recursive": "true"},
                headers=self._headers(),
                timeout=LIST_TIMEOUT_SECONDS,
                follow_redirects=True,
            )
        except httpx.TransportError as error:
            raise HubUnavailable(
                f"cannot reach {self.endpoint} to list the files of {reference}: "
                f"{error or type(error).__name__}",
                hint="check the network from the server or a proxy (HTTPS_PROXY)",
            ) from error
        body = _json_body(response)
        message = str(body.get("Message") or "") if isinstance(body, dict) else ""
        if response.status_code == 404 or (isinstance(body, dict) and body.get("Code") == 404):
            raise NotFound(
                f"no repository {reference.repo_id!r} at revision {revision!r} on {self.endpoint}"
                + (f": {message}" if message else ""),
                hint="check the name and the revision (ModelScope's default branch is master)",
            )
        if response.status_code in (401, 403):
            raise Forbidden(f"{self.endpoint} refused to list {reference}: {message or response.status_code}")
        if response.status_code >= 400 or not isinstance(body, dict) or body.get("Code") not in (200, None):
            raise HubUnavailable(
                f"{self.endpoint} answered {response.status_code} to list {reference}"
                + (f": {message}" if message else ""),
                hint="try again later",
            )
        entries = (body.get("Data") or {}).get("Files") or []
        files = [
            self._file(entry, reference)
            for entry in entries
            if isinstance(entry, dict) and entry.get("Type") != "tree"
        ]
        files = [file for file in files if file.path not in (".gitattributes", ".gitignore")]
        return RepoListing(
            reference=ModelReference(reference.hub, reference.repo_id, revision), commit=None, files=files
        )

    def _file(self, entry: dict[str, Any], reference: ModelReference) -> RemoteFile:
        path = check_remote_path(str(entry.get("Path") or entry.get("Name") or ""), str(reference))
        size = entry.get("Size")
        if not isinstance(size, int) or size < 0:
            raise HubUnavailable(f"{self.endpoint} gives no size for {path} in {reference}")
        return RemoteFile(path=path, size=size, sha256=normalise_hash(entry.get("Sha256")))

    def file_request(self, listing: RepoListing, file: RemoteFile) -> FileRequest:
        revision = quote(listing.revision or DEFAULT_REVISION, safe="")
        url = (
            f"{self.endpoint}/api/v1/models/{listing.reference.repo_id}/repo"
            f"?Revision={revision}&FilePath={quote(file.path, safe='')}"
        )
        return FileRequest(url=url, headers=self._headers())


def _json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
