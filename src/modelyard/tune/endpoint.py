"""Where a started tune candidate answers (what a `Deployer` hands the measuring side)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    """Where a started candidate answers: an OpenAI base URL, the model name to send, a key; and
    where its engine's Prometheus samples can be read (``metrics_url``, with a bearer token and
    the labels that pick this candidate's samples), for the speculative acceptance rate."""

    base_url: str
    model: str
    api_key: str | None = None
    metrics_url: str | None = None
    metrics_token: str | None = None
    metrics_labels: tuple[tuple[str, str], ...] = ()
