"""A deployment's secrets: sealed before it is stored, masked wherever it is shown.

Secret environment values (by name, ``secret_names.is_secret_env_name``, or named by the user in
``secret_env``) and the values of secret engine flags (``--api-key ...``) are sealed with the
data directory's key (``store/secret_box.py``) when the deployment is created; the controller
opens them only to launch the engine. Listings show ``MASK`` instead, and name the secret
variables in ``secret_env``.

Usage::

    seal_deployment_secrets(deployment, box, chosen=["MY_VARIABLE"])
    shown_env(deployment.env)   # {"HF_TOKEN": "********", "VLLM_LOGGING_LEVEL": "DEBUG"}
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from modelyard.errors import InvalidInput
from modelyard.secret_names import MASK, is_secret_env_name, mask_arguments, secret_argument_indexes
from modelyard.store.secret_box import SecretBox, is_sealed
from modelyard.store.tables import Deployment


def _is_secret(name: str, value: str, chosen: Collection[str]) -> bool:
    return is_sealed(value) or is_secret_env_name(name) or name in chosen


def check_chosen(env: dict[str, str], chosen: Collection[str]) -> None:
    missing = sorted(name for name in chosen if name not in env)
    if missing:
        raise InvalidInput(
            f"secret_env names {', '.join(missing)}, which the environment does not set",
            hint=f"set them in env, or leave them out of secret_env (env has: {', '.join(env) or 'nothing'})",
        )


def _scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` (JSON data) with every occurrence of a secret replaced by ``MASK``."""
    if not secrets:
        return value
    text = json.dumps(value)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(json.dumps(secret)[1:-1], MASK)
    return json.loads(text)


def seal_deployment_secrets(deployment: Deployment, box: SecretBox, chosen: Collection[str] = ()) -> None:
    """Seal the secret values of ``deployment`` (not yet stored) in place; doctor's warnings are
    scrubbed of them too, since they are stored with it."""
    env = dict(deployment.env or {})
    check_chosen(env, chosen)
    clear: list[str] = []
    for name, value in env.items():
        if _is_secret(name, value, chosen) and not is_sealed(value):
            clear.append(value)
            env[name] = box.seal(value)
    parameters = list(deployment.backend_parameters or [])
    for index in secret_argument_indexes(parameters):
        flag, equals, value = parameters[index].partition("=")
        if equals and flag.startswith("-"):
            clear.append(value)
            parameters[index] = f"{flag}={box.seal(value)}"
        else:
            clear.append(parameters[index])
            parameters[index] = box.seal(parameters[index])
    deployment.env = env
    deployment.backend_parameters = parameters
    deployment.warnings = _scrub(list(deployment.warnings or []), clear)


def shown_env(env: dict[str, str]) -> dict[str, str]:
    return {name: MASK if _is_secret(name, value, ()) else value for name, value in env.items()}


def secret_env_names(env: dict[str, str]) -> list[str]:
    return [name for name, value in env.items() if _is_secret(name, value, ())]


def shown_arguments(arguments: list[str]) -> list[str]:
    return [MASK if is_sealed(argument) else argument for argument in mask_arguments(arguments)]
