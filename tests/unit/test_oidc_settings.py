"""The OpenID Connect settings from the environment, and the claim -> role mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.errors import InvalidInput
from modelyard.server.oidc.claims import (
    NoRoleForAccount,
    projects_for_claims,
    role_for_claims,
    username_for_claims,
)
from modelyard.server.oidc.settings import OidcSettings, RoleMapping

ISSUER = "https://id.example.org/realms/main"


def _settings(**environment: str) -> OidcSettings:
    base = {"MODELYARD_OIDC_ISSUER": ISSUER, "MODELYARD_OIDC_CLIENT_ID": "modelyard"}
    settings = OidcSettings.from_environment({**base, **environment})
    assert settings is not None
    return settings


def test_no_issuer_means_no_single_sign_on() -> None:
    assert OidcSettings.from_environment({}) is None


def test_the_secret_is_read_from_its_file_and_never_shown(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cr3t-value\n")
    settings = _settings(
        MODELYARD_OIDC_CLIENT_SECRET_FILE=str(secret_file), MODELYARD_OIDC_SCOPES="profile,groups"
    )
    assert settings.client_secret == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(settings)
    assert settings.scopes == ("openid", "profile", "groups")
    assert settings.display_name == "id.example.org"


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        (
            {"MODELYARD_OIDC_CLIENT_SECRET": "x", "MODELYARD_OIDC_ISSUER": "id.example.org"},
            "is not an http(s) URL",
        ),
        ({}, "the client secret is not"),
        (
            {"MODELYARD_OIDC_CLIENT_SECRET": "x", "MODELYARD_OIDC_CLIENT_SECRET_FILE": "/x"},
            "both MODELYARD_OIDC_CLIENT_SECRET and MODELYARD_OIDC_CLIENT_SECRET_FILE are set",
        ),
        ({"MODELYARD_OIDC_CLIENT_SECRET_FILE": "/nonexistent/secret"}, "cannot be read: No such file"),
        (
            {"MODELYARD_OIDC_CLIENT_SECRET": "x", "MODELYARD_OIDC_DEFAULT_ROLE": "owner"},
            "MODELYARD_OIDC_DEFAULT_ROLE='owner' is not a role",
        ),
    ],
)
def test_a_bad_setting_is_named(environment: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        _settings(**environment)
    assert message in raised.value.message


def test_a_missing_client_id_is_named() -> None:
    with pytest.raises(InvalidInput) as raised:
        OidcSettings.from_environment({"MODELYARD_OIDC_ISSUER": ISSUER})
    assert "MODELYARD_OIDC_CLIENT_ID is not" in raised.value.message


MAPPING = RoleMapping(
    claim="groups",
    values={"admin": ("platform-admins",), "operator": ("ml-ops",), "member": ("staff",)},
)


@pytest.mark.parametrize(
    ("claims", "role"),
    [
        ({"groups": ["staff", "platform-admins"]}, "admin"),  # the strongest that matches
        ({"groups": ["ml-ops", "staff"]}, "operator"),
        ({"groups": "staff"}, "member"),  # a string claim is one value
    ],
)
def test_role_for_claims_gives_the_strongest_matching_role(claims: dict[str, object], role: str) -> None:
    assert role_for_claims(claims, MAPPING) == role


def test_role_for_claims_reads_nested_claims_and_falls_back_to_the_default() -> None:
    nested = RoleMapping(
        claim="realm_access.roles", values={"operator": ("deployer",)}, default_role="member"
    )
    assert role_for_claims({"realm_access": {"roles": ["deployer"]}}, nested) == "operator"
    assert role_for_claims({"realm_access": {"roles": ["other"]}}, nested) == "member"
    assert role_for_claims({}, RoleMapping(values={"member": ("*",)})) == "member"


def test_role_for_claims_refuses_an_account_nothing_matches() -> None:
    with pytest.raises(NoRoleForAccount) as raised:
        role_for_claims({"groups": ["visitors"]}, MAPPING)
    assert "its 'groups' claim (visitors) matches no configured value" in raised.value.message


def test_the_username_comes_from_the_configured_claim_then_email_then_sub() -> None:
    assert username_for_claims({"preferred_username": "alice", "sub": "1"}, "preferred_username") == "alice"
    assert (
        username_for_claims({"email": "bob@example.org", "sub": "2"}, "preferred_username")
        == "bob@example.org"
    )
    assert username_for_claims({"sub": "3 4/5"}, "preferred_username") == "3_4_5"


def test_project_pairs_map_claim_values_to_projects_read_from_the_role_claim_by_default() -> None:
    settings = _settings(
        MODELYARD_OIDC_CLIENT_SECRET="s3cret",
        MODELYARD_OIDC_ROLE_CLAIM="realm_access.roles",
        MODELYARD_OIDC_PROJECTS="ml-research=research, ml=research,ml=shared ,*=everyone",
    )
    mapping = settings.projects
    assert mapping.claim == "realm_access.roles"
    assert mapping.managed == {"research", "shared", "everyone"}
    claims = {"realm_access": {"roles": ["ml"]}}
    assert projects_for_claims(claims, mapping) == {"research", "shared", "everyone"}
    assert projects_for_claims({}, mapping) == {"everyone"}


def test_a_project_pair_without_its_equals_sign_is_named() -> None:
    with pytest.raises(InvalidInput) as refused:
        _settings(
            MODELYARD_OIDC_CLIENT_SECRET="s3cret", MODELYARD_OIDC_PROJECTS="ml-research=research,ml-ops"
        )
    assert "MODELYARD_OIDC_PROJECTS has 'ml-ops', which is not VALUE=PROJECT" in str(refused.value.message)
    assert refused.value.hint is not None and "ml-research=research" in refused.value.hint
