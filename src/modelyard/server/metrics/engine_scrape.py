"""Each ready engine's own ``/metrics``, scraped at scrape time and re-exported with its deployment.

vLLM (``vllm:...``) and SGLang (``sglang:...``) keep their names; every sample gains the labels
``deployment`` and ``instance_id`` (an engine label of the same name is kept as
``engine_deployment`` / ``engine_instance_id``). Families of one name from several replicas are
merged into one family. ``modelyard_engine_scrape_up`` says, per replica, whether its page was
read (a timeout or an error is 0, never a failed scrape of ``/metrics`` as a whole).

Usage::

    families = await scrape_engines(registry.all_endpoints(), timeout_s=2.0)
"""

from __future__ import annotations

import asyncio
import logging

import httpx
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from modelyard.control.endpoints import Endpoint
from modelyard.control.engine_metrics_page import read_metrics_page
from modelyard.server.metrics.families import PREFIX

logger = logging.getLogger(__name__)

_ADDED = ("deployment", "instance_id")


def _merge(families: dict[str, Metric], text: str, endpoint: Endpoint) -> bool:
    try:
        parsed = list(text_string_to_metric_families(text))
    except ValueError as error:
        logger.info("the metrics of %s are not Prometheus text: %s", endpoint.base_url, error)
        return False
    added = {"deployment": endpoint.deployment_name, "instance_id": str(endpoint.instance_id)}
    for family in parsed:
        target = families.get(family.name)
        if target is None:
            target = families[family.name] = Metric(
                family.name, family.documentation, family.type, family.unit
            )
        elif target.type != family.type:
            continue
        for sample in family.samples:
            labels = {
                f"engine_{key}" if key in _ADDED else key: value for key, value in sample.labels.items()
            }
            target.add_sample(sample.name, {**labels, **added}, sample.value, sample.timestamp)
    return True


async def scrape_engines(endpoints: list[Endpoint], *, timeout_s: float = 2.0) -> list[Metric]:
    """The engines' families, re-labelled, and ``modelyard_engine_scrape_up`` per replica."""
    with_metrics = [endpoint for endpoint in endpoints if endpoint.metrics_path]
    up = GaugeMetricFamily(
        f"{PREFIX}_engine_scrape_up",
        "1 when the engine replica's own metrics were read for this scrape.",
        labels=["deployment", "instance_id"],
    )
    if not with_metrics:
        return [up]
    async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
        pages = await asyncio.gather(*(read_metrics_page(client, endpoint) for endpoint in with_metrics))
    families: dict[str, Metric] = {}
    for endpoint, page in zip(with_metrics, pages, strict=True):
        read = page is not None and _merge(families, page, endpoint)
        up.add_metric([endpoint.deployment_name, str(endpoint.instance_id)], 1.0 if read else 0.0)
    return [up, *families.values()]
