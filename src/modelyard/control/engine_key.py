"""The key an engine itself asks for (vLLM and SGLang ``--api-key``, vLLM's ``VLLM_API_KEY``).

An engine started with one answers 401 to every ``/v1`` request without it. The controller reads
it from the deployment's (revealed) parameters and env when it launches or re-adopts the engine,
sends it with readiness and verification, and gives it to the gateway with the endpoint, which
sends it upstream in place of the client's modelyard key. It lives in memory only: the store
keeps the sealed value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

API_KEY_FLAG = "--api-key"
API_KEY_VARIABLE = "VLLM_API_KEY"


def engine_api_key(parameters: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The last ``--api-key`` value of the parameters, else ``VLLM_API_KEY``, else None."""
    found: str | None = None
    for index, argument in enumerate(parameters):
        flag, equals, value = argument.partition("=")
        if flag.replace("_", "-") != API_KEY_FLAG:
            continue
        if equals:
            found = value
        elif index + 1 < len(parameters):
            found = parameters[index + 1]
    if found:
        return found
    return env.get(API_KEY_VARIABLE) or None


def authorization_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
