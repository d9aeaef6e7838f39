"""One read of a ready replica's own ``/metrics`` page (its ``Endpoint.metrics_path``), for the
server's re-export (``server/metrics/engine_scrape.py``) and the autoscaler's signals.

The engine's API key goes with it where the deployment has one (an engine that guards every
route answers 401 without it). A page that cannot be read is ``None`` and a line in the log
at INFO: a replica that does not answer is a fact of the scrape, not an error of it.

Usage::

    async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
        text = await read_metrics_page(client, endpoint)
"""

from __future__ import annotations

import logging

import httpx

from modelyard.control.endpoints import Endpoint

logger = logging.getLogger(__name__)


async def read_metrics_page(client: httpx.AsyncClient, endpoint: Endpoint) -> str | None:
    """The page's text; None when the endpoint has none, it fails or it answers other than 200."""
    if not endpoint.metrics_path:
        return None
    url = endpoint.base_url + endpoint.metrics_path
    headers = {"Authorization": f"Bearer {endpoint.engine_api_key}"} if endpoint.engine_api_key else {}
    try:
        response = await client.get(url, headers=headers)
    except httpx.HTTPError as error:
        logger.info("could not read the metrics of %s: %s", url, error)
        return None
    return response.text if response.status_code == 200 else None
