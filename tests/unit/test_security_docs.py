"""docs/security.md's route-by-role matrix is the table the server enforces (server/policy.py):
a route added, removed or given another access level without the docs fails here."""

from __future__ import annotations

import re
from pathlib import Path

from modelyard.server.policy import ROUTE_ACCESS

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
_ROW = re.compile(r"^\| `([A-Z]+ [^`]+)` \| ([a-z]+) \|", re.MULTILINE)


def test_the_documented_matrix_is_the_enforced_one() -> None:
    documented = {route: access for route, access in _ROW.findall(SECURITY_DOC.read_text())}
    enforced = {route: access.value for route, access in ROUTE_ACCESS.items()}
    only_documented = sorted(set(documented) - set(enforced))
    only_enforced = sorted(set(enforced) - set(documented))
    other = sorted(route for route in set(documented) & set(enforced) if documented[route] != enforced[route])
    assert documented == enforced, (
        f"docs/security.md's matrix differs from ROUTE_ACCESS: only documented {only_documented}, "
        f"only enforced {only_enforced}, another access level {other}"
    )
