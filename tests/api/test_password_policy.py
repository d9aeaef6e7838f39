"""A new admin password must be long and not one attackers try first."""

from __future__ import annotations

import pytest

from .conftest import ApiHarness, assert_error


@pytest.mark.parametrize(
    ("new_password", "fragment"),
    [
        ("password", "at least 12"),
        ("passwordpassword", "too easy to guess"),
        ("modelyard2026!", "too easy to guess"),
        ("admin123456789", "too easy to guess"),
        ("qwertyuiop123", "too easy to guess"),
        (" maple-harbor-violin-7", "whitespace"),
    ],
)
def test_a_weak_new_password_is_refused_saying_why(api: ApiHarness, new_password: str, fragment: str) -> None:
    response = api.client.put(
        "/api/v1/auth/password", json={"current_password": api.password, "new_password": new_password}
    )
    assert response.status_code == 400, response.text
    assert_error(response.json(), "invalid_input", fragment)
    assert api.context.settings.admin_password_file.read_text().strip() == api.password


def test_a_long_uncommon_password_is_accepted(api: ApiHarness) -> None:
    response = api.client.put(
        "/api/v1/auth/password",
        json={"current_password": api.password, "new_password": "maple-harbor-violin-7"},
    )
    assert response.status_code == 204, response.text
