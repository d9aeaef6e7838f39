"""How many keys and deployments the shared limit counters hold apart (``limit_counters.py``).

A key's counters are at slot ``key id % KEY_SLOTS``, a deployment's at ``deployment id %
DEPLOYMENT_SLOTS``. Two keys (or deployments) on the same slot share its counts, which makes
their limits stricter, never looser; ids are sequential, so that starts past 8,192 keys or 1,024
deployments. The shared segment grows by ``(KEY_SLOTS + DEPLOYMENT_SLOTS) x 7 x 8`` bytes per
worker (516 KiB).
"""

from __future__ import annotations

KEY_SLOTS = 8192
DEPLOYMENT_SLOTS = 1024
# A project's counters (requests at once) are at slot ``project id % PROJECT_SLOTS``.
PROJECT_SLOTS = 1024
# Per slot: two minute buckets (even and odd minutes) of (minute stamp, requests, tokens).
WINDOW_CELLS = 6
