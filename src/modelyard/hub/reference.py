"""What a user names when they pull: ``hf://ORG/NAME[@REVISION]`` or ``ms://ORG/NAME[@REVISION]``.

Usage::

    reference = parse_model_reference("hf://Qwen/Qwen3-8B@main")
    reference.hub, reference.repo_id, reference.revision  # "huggingface", "Qwen/Qwen3-8B", "main"
    str(reference)  # "hf://Qwen/Qwen3-8B@main"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from modelyard.errors import InvalidInput

HubName = Literal["huggingface", "modelscope"]

SCHEMES: dict[str, HubName] = {"hf": "huggingface", "ms": "modelscope"}
SCHEME_OF: dict[HubName, str] = {hub: scheme for scheme, hub in SCHEMES.items()}
HUB_TITLES: dict[HubName, str] = {"huggingface": "Hugging Face", "modelscope": "ModelScope"}
HF_DEFAULT_ENDPOINT = "https://huggingface.co"
MODELSCOPE_DEFAULT_ENDPOINT = "https://www.modelscope.cn"

# Both hubs name repositories ORG/NAME with letters, digits and - _ . (Hugging Face allows 96 characters).
_REPO_PART = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}"
_REPO_ID = re.compile(rf"^{_REPO_PART}/{_REPO_PART}$")
# A branch, tag or commit: no spaces, no "..", nothing a URL would need to escape beyond "/".
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$")
_WEB_ADDRESSES = {
    "huggingface.co": "hf",
    "hf.co": "hf",
    "modelscope.cn": "ms",
    "www.modelscope.cn": "ms",
}


@dataclass(frozen=True)
class ModelReference:
    """A model repository on a hub, optionally at a revision (branch, tag or commit)."""

    hub: HubName
    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        suffix = f"@{self.revision}" if self.revision else ""
        return f"{SCHEME_OF[self.hub]}://{self.repo_id}{suffix}"

    @property
    def default_name(self) -> str:
        """The name a pulled model is registered under unless the user gives one: the repo's name."""
        return self.repo_id.split("/", 1)[1]

    @property
    def hub_title(self) -> str:
        return HUB_TITLES[self.hub]


def _suggest_scheme(text: str) -> str | None:
    match = re.match(r"^https?://([^/]+)/(?:models/)?([^/]+/[^/?#]+)", text)
    if match and match.group(1).lower() in _WEB_ADDRESSES:
        return f"{_WEB_ADDRESSES[match.group(1).lower()]}://{match.group(2)}"
    return None


def parse_model_reference(text: str) -> ModelReference:
    """Parse ``hf://ORG/NAME[@REVISION]`` or ``ms://ORG/NAME[@REVISION]``, else raise ``InvalidInput``."""
    value = text.strip()
    scheme, separator, rest = value.partition("://")
    if not separator or scheme.lower() not in SCHEMES:
        suggestion = _suggest_scheme(value)
        if suggestion:
            hint = f"write it as {suggestion}"
        elif re.match(rf"^{_REPO_PART}/{_REPO_PART}(@.*)?$", value):
            hint = f"say which hub: hf://{value} (Hugging Face) or ms://{value} (ModelScope)"
        else:
            hint = (
                "write hf://ORG/NAME[@REVISION] or ms://ORG/NAME[@REVISION]; "
                "a local directory is `models add PATH`"
            )
        raise InvalidInput(f"{text!r} is not a model reference", hint=hint)
    repo_id, at, revision = rest.partition("@")
    repo_id = repo_id.strip("/")
    if not _REPO_ID.match(repo_id):
        raise InvalidInput(
            f"{repo_id!r} in {text!r} is not a repository id",
            hint="a repository id is ORG/NAME of letters, digits and - _ . (e.g. Qwen/Qwen3-8B)",
        )
    if at and not _REVISION.match(revision):
        raise InvalidInput(
            f"revision {revision!r} in {text!r} is not a branch, tag or commit",
            hint="write ORG/NAME@main, ORG/NAME@v1.0 or ORG/NAME@<commit sha>",
        )
    return ModelReference(hub=SCHEMES[scheme.lower()], repo_id=repo_id, revision=revision if at else None)
