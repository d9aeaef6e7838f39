"""What a hub must do for a pull: list a repository's files, and say how to fetch one of them.

Two implementations: ``HuggingFaceSource`` (``huggingface.py``, through ``huggingface_hub``) and
``ModelScopeSource`` (``modelscope.py``, ModelScope's HTTP file API). The bytes themselves are
fetched by ``transfer.download_file`` with the request a source describes, so that both hubs get
the same resume, stall timeout, retries and hash check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from modelyard.hub.files import RemoteFile, RepoListing
from modelyard.hub.reference import ModelReference


@dataclass(frozen=True)
class FileRequest:
    """An HTTP GET that returns a file's bytes (redirects allowed; ``Range`` is added on resume)."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)


class HubSource(Protocol):
    """A model hub. Both methods may be called from worker threads."""

    def list_files(self, reference: ModelReference) -> RepoListing:
        """The repository's files at ``reference.revision`` (the default branch when None), with sizes
        and hashes. Raises ``NotFound`` (no such repository or revision), ``Forbidden`` (gated or
        private without a token) or ``HubUnavailable`` (unreachable, an error answer)."""
        ...

    def file_request(self, listing: RepoListing, file: RemoteFile) -> FileRequest:
        """The request that downloads ``file`` at the listing's revision."""
        ...
