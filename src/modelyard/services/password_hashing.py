"""Admin passwords are stored as scrypt hashes with a per-user salt: ``scrypt$n$r$p$salt$hash``.

Usage::

    stored = hash_password("correct horse")
    verify_password("correct horse", stored)  # True
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

# scrypt cost: 2**14 * 8 * 128 bytes = 16 MiB of memory, tens of milliseconds per check.
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
HASH_BYTES = 32
SALT_BYTES = 16
# Longer is refused before hashing: nobody types more, and it bounds the work of a check.
MAXIMUM_PASSWORD_CHARACTERS = 1024


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r + 1024 * 1024, dklen=HASH_BYTES
    )


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_encode(salt)}${_encode(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """True when ``password`` matches ``stored``; compares in constant time. Never raises."""
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        return False
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, expected = _decode(parts[4]), _decode(parts[5])
    except ValueError:
        return False
    return hmac.compare_digest(_scrypt(password, salt, n, r, p), expected)
