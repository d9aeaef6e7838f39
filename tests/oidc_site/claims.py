"""What the test provider says about its users: the standard claims and a ``groups`` claim."""

from __future__ import annotations

from typing import Any

from oidc_provider.lib.claims import ScopeClaims


def userinfo(claims: dict[str, Any], user: Any) -> dict[str, Any]:
    claims["preferred_username"] = user.username
    claims["name"] = user.get_full_name() or user.username
    claims["email"] = user.email
    claims["email_verified"] = True
    return claims


class GroupsScopeClaims(ScopeClaims):  # type: ignore[misc]
    info_groups = ("Groups", "The groups you belong to.")

    def scope_groups(self) -> dict[str, Any]:
        return {"groups": sorted(group.name for group in self.user.groups.all())}
