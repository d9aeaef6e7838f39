"""The Hugging Face Hub (or a mirror, by endpoint) through ``huggingface_hub``.

- Listing: ``HfApi.model_info(files_metadata=True)``, one call that gives the commit the revision
  resolves to and, per file, its size, git blob id and, for LFS files, the SHA-256. A mirror that
  leaves sizes or hashes out is asked per file with ``get_hf_file_metadata`` (a HEAD on
  ``resolve/``: ``X-Linked-Size`` and ``X-Linked-Etag`` / ``ETag``).
- Downloads: the ``resolve/<commit>/<path>`` URL from ``hf_hub_url``, pinned to that commit, with
  ``build_hf_headers`` (user agent, the token from ``HF_TOKEN`` or ``hf auth login``). The bytes are
  fetched by ``transfer.download_file``, not ``hf_hub_download``: in huggingface_hub 2.x the latter
  writes to a process-unique ``.incomplete`` file that it deletes on failure (no resume after a
  restart), retries five times with a fixed 1 s pause, reports progress only through tqdm and
  cannot be cancelled.

Usage::

    source = HuggingFaceSource(endpoint="https://huggingface.co")
    listing = source.list_files(parse_model_reference("hf://Qwen/Qwen3-8B"))
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import httpx2
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

# Public API (documented under huggingface_hub.utils), exported lazily, so mypy cannot see it.
from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

from modelyard import __version__
from modelyard.errors import Forbidden, HubUnavailable, NotFound
from modelyard.hub.files import RemoteFile, RepoListing, check_remote_path, hash_from_etag, normalise_hash
from modelyard.hub.identifiers import REPO_ID_RULE, InvalidModelReference
from modelyard.hub.reference import HF_DEFAULT_ENDPOINT, ModelReference
from modelyard.hub.source import FileRequest

logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT = HF_DEFAULT_ENDPOINT
METADATA_TIMEOUT_SECONDS = 30.0

Result = TypeVar("Result")


class HuggingFaceSource:
    """``HubSource`` for the Hugging Face Hub at ``endpoint`` (``HF_ENDPOINT`` for a mirror)."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, token: str | None = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._token = token
        self._api = HfApi(
            endpoint=self.endpoint, token=token, library_name="modelyard", library_version=__version__
        )

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = dict(
            build_hf_headers(token=self._token, library_name="modelyard", library_version=__version__)
        )
        # The real size: never a compressed body, whose length is not the file's.
        headers["Accept-Encoding"] = "identity"
        return headers

    def _call(self, reference: ModelReference, what: str, call: Callable[[], Result]) -> Result:
        """Run a huggingface_hub call; turn its errors into ours, with what to do."""
        if hub_constants.is_offline_mode():
            raise HubUnavailable(
                f"cannot {what} {reference}: HF_HUB_OFFLINE is set in the server's environment",
                hint="unset HF_HUB_OFFLINE for `modelyard serve`, or bring the model as a bundle "
                "(modelyard models export / import)",
            )
        try:
            return call()
        except GatedRepoError as error:
            raise Forbidden(
                f"{reference} is gated: its owner must grant access first",
                hint="accept its terms on the hub, then give the server a token (HF_TOKEN)",
            ) from error
        except RevisionNotFoundError as error:
            raise NotFound(
                f"{reference}: no revision {reference.revision!r} on {self.endpoint}",
                hint="name a branch, tag or commit that exists (default: main)",
            ) from error
        except RepositoryNotFoundError as error:
            raise NotFound(
                f"no repository {reference.repo_id!r} on {self.endpoint}",
                hint="check the name; a private repository needs a token (HF_TOKEN) "
                "in the server's environment",
            ) from error
        except HFValidationError as error:
            # parse_model_reference refuses what huggingface_hub would; this is the second line.
            raise InvalidModelReference(
                f"huggingface_hub refused {reference}: {error}", hint=REPO_ID_RULE
            ) from error
        except OfflineModeIsEnabled as error:
            raise HubUnavailable(f"cannot {what} {reference}: {error}") from error
        except HfHubHTTPError as error:
            status = error.response.status_code if error.response is not None else "?"
            raise HubUnavailable(
                f"{self.endpoint} answered {status} to {what} {reference}",
                hint="try again later; for a mirror, check HF_ENDPOINT",
            ) from error
        except httpx2.TransportError as error:
            raise HubUnavailable(
                f"cannot reach {self.endpoint} to {what} {reference}: {error or type(error).__name__}",
                hint="check the network from the server, a proxy (HTTPS_PROXY), "
                "or set HF_ENDPOINT to a mirror",
            ) from error

    def list_files(self, reference: ModelReference) -> RepoListing:
        info = self._call(
            reference,
            "list the files of",
            lambda: self._api.model_info(
                reference.repo_id,
                revision=reference.revision,
                files_metadata=True,
                timeout=METADATA_TIMEOUT_SECONDS,
            ),
        )
        commit = info.sha
        files: list[RemoteFile] = []
        for sibling in info.siblings or []:
            path = check_remote_path(sibling.rfilename, str(reference))
            if path in (".gitattributes", ".gitignore"):
                continue
            lfs = sibling.lfs
            sha256 = normalise_hash(lfs.sha256) if lfs is not None else None
            size = lfs.size if lfs is not None else sibling.size
            blob_id = None if lfs is not None else normalise_hash(sibling.blob_id)
            file = RemoteFile(
                path=path, size=size if size is not None else -1, sha256=sha256, git_blob_id=blob_id
            )
            if size is None or file.expected_hash is None:
                file = self._head(reference, commit, path)
            files.append(file)
        return RepoListing(reference=reference, commit=commit, files=files)

    def _head(self, reference: ModelReference, commit: str | None, path: str) -> RemoteFile:
        """A file the listing gave no size or hash for: ask ``resolve/`` with a HEAD."""
        url = hf_hub_url(
            reference.repo_id, path, revision=commit or reference.revision, endpoint=self.endpoint
        )
        metadata = self._call(
            reference,
            f"read the size and hash of {path} in",
            lambda: get_hf_file_metadata(
                url,
                token=self._token,
                timeout=METADATA_TIMEOUT_SECONDS,
                endpoint=self.endpoint,
                retry_on_errors=True,
            ),
        )
        sha256, blob_id = hash_from_etag(metadata.etag)
        if metadata.size is None:
            raise HubUnavailable(
                f"{self.endpoint} gives no size for {path} in {reference}",
                hint="the endpoint may not be a Hugging Face Hub or a mirror of one (check HF_ENDPOINT)",
            )
        return RemoteFile(path=path, size=metadata.size, sha256=sha256, git_blob_id=blob_id)

    def file_request(self, listing: RepoListing, file: RemoteFile) -> FileRequest:
        url = hf_hub_url(
            listing.reference.repo_id, file.path, revision=listing.revision, endpoint=self.endpoint
        )
        return FileRequest(url=url, headers=self._headers())
