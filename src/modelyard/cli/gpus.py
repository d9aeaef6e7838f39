"""``modelyard gpus``: the server host's GPUs as NVML reads them now."""

from __future__ import annotations

from typing import Any

import typer

from modelyard.cli.client import ApiClient
from modelyard.cli.context import stdout
from modelyard.cli.output import print_json, print_table


def _gib(size_bytes: int | None) -> str:
    return "-" if size_bytes is None else f"{size_bytes / 2**30:.1f}"


def _pcie_link(gpu: dict[str, Any]) -> str:
    """``Gen5 x16``; the board's maximum in brackets when the link runs below it (idle or degraded)."""
    if gpu.get("pcie_generation") is None or gpu.get("pcie_width") is None:
        return "-"
    link = f"Gen{gpu['pcie_generation']} x{gpu['pcie_width']}"
    best = (gpu.get("pcie_max_generation"), gpu.get("pcie_max_width"))
    if None not in best and best != (gpu["pcie_generation"], gpu["pcie_width"]):
        link += f" (max Gen{best[0]} x{best[1]})"
    return link


def _power(gpu: dict[str, Any]) -> str:
    if gpu.get("power_watts") is None:
        return "-"
    limit = gpu.get("power_limit_watts")
    return f"{gpu['power_watts']:.0f}/{limit:.0f} W" if limit else f"{gpu['power_watts']:.0f} W"


def gpus(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The server host's GPUs, as NVML reads them now: memory, load, temperature, power, PCIe link."""
    inventory: dict[str, Any] = ApiClient.from_context(ctx).get("/gpus")
    if as_json:
        print_json(inventory)
        return
    if not inventory["gpus"]:
        stdout.print(f"no GPUs: {inventory['unavailable_reason']}", highlight=False)
        return
    print_table(
        ["ID", "NAME", "USED GiB", "FREE GiB", "TOTAL GiB", "UTIL", "TEMP", "POWER", "PCIE"],
        [
            [
                gpu["index"],
                gpu["name"],
                _gib(gpu["memory_used_bytes"]),
                _gib(gpu["memory_free_bytes"]),
                _gib(gpu["memory_total_bytes"]),
                "-" if gpu["utilization_percent"] is None else f"{gpu['utilization_percent']}%",
                "-" if gpu.get("temperature_celsius") is None else f"{gpu['temperature_celsius']} C",
                _power(gpu),
                _pcie_link(gpu),
            ]
            for gpu in inventory["gpus"]
        ],
    )
    driver = inventory.get("driver_version")
    cuda = inventory.get("cuda_driver_version")
    if driver:
        stdout.print(f"driver {driver}" + (f", CUDA {cuda}" if cuda else ""), highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``gpus`` to the root app."""
    app.command("gpus")(gpus)
