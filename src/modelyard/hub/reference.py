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

from modelyard.hub.identifiers import REPO_ID_RULE, InvalidModelReference, check_repo_id, check_revision

HubName = Literal["huggingface", "modelscope"]

SCHEMES: dict[str, HubName] = {"hf": "huggingface", "ms": "modelscope"}
SCHEME_OF: dict[HubName, str] = {hub: scheme for scheme, hub in SCHEMES.items()}
HUB_TITLES: dict[HubName, str] = {"huggingface": "Hugging Face", "modelscope": "ModelScope"}
HF_DEFAULT_ENDPOINT = "https://huggingface.co"
MODELSCOPE_DEFAULT_ENDPOINT = "https://www.modelscope.cn"

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
    """``hf://ORG/NAME`` for a hub page's address (``https://huggingface.co/ORG/NAME/tree/main``)."""
    match = re.match(r"^(?:https?://)?([^/]+)/(?:models/)?([^/@?#]+/[^/@?#]+)", text)
    if match and match.group(1).lower() in _WEB_ADDRESSES:
        return f"{_WEB_ADDRESSES[match.group(1).lower()]}://{match.group(2)}"
    return None


def parse_model_reference(text: str) -> ModelReference:
    """Parse ``hf://ORG/NAME[@REVISION]`` or ``ms://ORG/NAME[@REVISION]``; raise
    ``InvalidModelReference`` (an ``InvalidInput``, 400) naming what is wrong and what to write.

    Nothing here asks a hub: every id that passes is one ``huggingface_hub`` accepts too."""
    value = text.strip()
    scheme, separator, rest = value.partition("://")
    if not separator or scheme.lower() not in SCHEMES:
        suggestion = _suggest_scheme(value)
        if suggestion:
            hint = f"write it as {suggestion}"
        elif re.match(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(@.*)?$", value):
            hint = f"say which hub: hf://{value} (Hugging Face) or ms://{value} (ModelScope)"
        else:
            hint = (
                "write hf://ORG/NAME[@REVISION] or ms://ORG/NAME[@REVISION]; "
                "a local directory is `models add PATH`"
            )
        raise InvalidModelReference(f"{text!r} is not a model reference", hint=hint)
    prefix = scheme.lower()
    if "://" in rest or _suggest_scheme(rest):
        suggestion = _suggest_scheme(rest.partition("://")[2] or rest)
        raise InvalidModelReference(
            f"{text!r} is not a model reference: after {prefix}:// comes a repository id, not an address",
            hint=f"write it as {suggestion}" if suggestion else REPO_ID_RULE,
        )
    repo_id, at, revision = rest.partition("@")
    check_repo_id(repo_id, text, prefix)
    if at:
        check_revision(revision, text)
    return ModelReference(hub=SCHEMES[prefix], repo_id=repo_id, revision=revision if at else None)
