"""The pull source's rules against the hub library's own: every repository id ours accepts,
``huggingface_hub.utils.validate_repo_id`` accepts too (so no ``HFValidationError``, no 500), and
every revision ours accepts, git's ``check-ref-format`` accepts."""

from __future__ import annotations

import string
import subprocess

import pytest
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelyard.errors import InvalidInput
from modelyard.hub.identifiers import InvalidModelReference
from modelyard.hub.reference import parse_model_reference

# Characters a user may type or paste: the allowed ones, their look-alikes, separators, spaces.
TYPED = string.ascii_letters[:6] + string.digits[:3] + "-_./@: ~^é٣\t%" + "Qq"
PART = st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=1, max_size=98)


def _hub_accepts(repo_id: str) -> bool:
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return False
    return True


def _ours(text: str) -> str | None:
    try:
        return parse_model_reference(text).repo_id
    except InvalidModelReference:
        return None


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=TYPED, min_size=0, max_size=40))
def test_every_id_we_accept_the_hub_library_accepts(text: str) -> None:
    repo_id = _ours(f"hf://{text}")
    if repo_id is not None:
        assert _hub_accepts(repo_id), repo_id


@settings(max_examples=2000, deadline=None)
@given(PART, PART)
def test_every_id_the_hub_library_refuses_we_refuse_with_a_reason(organisation: str, name: str) -> None:
    repo_id = f"{organisation}/{name}"
    for scheme in ("hf", "ms"):
        accepted = _ours(f"{scheme}://{repo_id}")
        if not _hub_accepts(repo_id):
            assert accepted is None, repo_id
        elif accepted is None:
            # Refused although the hub library takes it: only for the rules we add (none for ASCII ids).
            pytest.fail(f"{repo_id!r} is refused, although huggingface_hub accepts it")


def _git_accepts_branch(revision: str) -> bool:
    result = subprocess.run(
        ["git", "check-ref-format", "--allow-onelevel", f"refs/heads/{revision}"],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=string.ascii_letters[:3] + string.digits[:2] + "-_./@ ~:", min_size=1, max_size=16))
def test_every_revision_we_accept_git_accepts(revision: str) -> None:
    try:
        reference = parse_model_reference(f"hf://Qwen/Qwen3-8B@{revision}")
    except InvalidModelReference:
        return
    assert reference.revision is not None and _git_accepts_branch(reference.revision), revision


@pytest.mark.parametrize(
    "text",
    [
        "hf://Qwen/Qwen3-8B",
        "hf://Qwen/Qwen3-8B@main",
        "hf://Qwen/Qwen3-8B@refs/pr/12",
        "hf://Qwen/Qwen3-8B@0123456789abcdef0123456789abcdef01234567",
        "hf://meta-llama/Llama-3.1-8B-Instruct",
        "hf://unsloth/Qwen3-30B-A3B-GGUF@v1.0",
        "ms://Qwen/Qwen3-8B@master",
        "hf://_private/model_v2",
        f"hf://{'o' * 96}/{'n' * 96}",
    ],
)
def test_real_ids_and_revisions_are_accepted(text: str) -> None:
    reference = parse_model_reference(text)
    assert str(reference) == text
    assert _hub_accepts(reference.repo_id)


def test_a_refusal_is_input_error_400_with_its_own_code() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_model_reference("hf://Qwen/a..b")
    assert refused.value.http_status == 400 and refused.value.code == "invalid_model_reference"
    assert refused.value.message == (
        "'Qwen/a..b' in 'hf://Qwen/a..b' is not a repository id: the name has '..'"
    )
    assert refused.value.hint is not None and "e.g. Qwen/Qwen3-8B" in refused.value.hint
