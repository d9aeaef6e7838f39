"""Gateway API keys: how they are made and how they are stored (a SHA-256 hash, never the key)."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "my-"


def generate_key() -> str:
    """A new key: ``my-`` and 43 URL-safe characters (256 bits of randomness)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """The stored form of a key. A fast hash is right here: keys are long and random."""
    return hashlib.sha256(key.encode()).hexdigest()


def display_prefix(key: str) -> str:
    """The first characters of a key, safe to show in listings (``my-AbC12``)."""
    return key[: len(KEY_PREFIX) + 5]
