"""Prefix-aware routing against least outstanding: prefix-cache hits and time to first token.

Two deployments of two replicas each behind one ``modelyard serve``, one routed by least
outstanding requests and one by prompt prefix (``--routing prefix``). Each replica is the exact
upstream with its prefix-cache model (``exact_upstream.py --prefill-ms-per-token``): the first
token waits for the prompt's uncached tokens, the prompt's leading blocks seen before on that
replica are free. Both deployments get the same multi-turn workload, one after the other, A/B/A:
``--conversations`` conversations at once, each ``--turns`` turns; a conversation starts from one
of ``--system-prompts`` long contexts (default: one each, as in chats over documents; fewer: shared,
as the users of one application share its system prompt) and every turn sends the whole history
so far plus a new question. Each replica's cache holds ``--cache-blocks`` blocks (default: about
the contexts of half the conversations), as a GPU's KV cache holds only so much.

Printed per policy: TTFT p50 / p99 over all turns and over turns after the first, and the
prefix-cache hit rate (tokens served from cache / prompt tokens, from the replicas' own
``vllm:prefix_cache_*`` counters). The H200 version of this measurement (two vLLM replicas
sharing one GPU) is the field phase ``share-routing`` (``scripts/field/h200.sh``), run on
``--url`` with ``--no-platform``.

``--one-deployment``: one deployment of two replicas instead of two, its routing switched
(``PATCH /api/v1/deployments/NAME {"routing": ...}``) before each pass, so that both policies run
on the same engines; every pass then has conversations of its own (a pass's conversations would
otherwise hit the cache the pass before it filled), and the hit rate of a pass still comes from
its own requests (the counters' difference over the pass).

    python benchmarks/prefix_routing.py
    python benchmarks/prefix_routing.py --one-deployment
    BENCH_API_KEY=... python benchmarks/prefix_routing.py --no-platform --url http://gpu-host:8080 \
        --metrics-token-file /var/lib/modelyard/metrics-token --deployments vllm-lo,vllm-px
    BENCH_API_KEY=... python benchmarks/prefix_routing.py --no-platform --url http://gpu-host:8080 \
        --metrics-token-file DATA/metrics-token --admin-password-file DATA/admin-password \
        --one-deployment --deployments pair
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from overhead_processes import Platform, SetupFailed, require_taskset

WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
)


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


@dataclass
class PolicyFigures:
    policy: str
    ttft_ms: list[float] = field(default_factory=list)
    later_turn_ttft_ms: list[float] = field(default_factory=list)
    hits: float = 0.0
    queries: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else float("nan")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


async def conversation(
    client: httpx.AsyncClient,
    deployment: str,
    system: str,
    turns: int,
    seed: int,
    figures: PolicyFigures,
    question_words: int,
) -> None:
    rng = random.Random(seed)
    history: list[dict[str, str]] = [{"role": "system", "content": system}]
    for turn in range(turns):
        history.append({"role": "user", "content": words(rng, question_words)})
        body = {"model": deployment, "messages": history, "max_tokens": 16, "stream": True}
        started = time.perf_counter()
        first: float | None = None
        answer = []
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                raise SetupFailed(
                    f"{deployment}: HTTP {response.status_code}: {(await response.aread())[:300]!r}"
                )
            async for piece in response.aiter_bytes():
                if first is None and b"data:" in piece:
                    first = time.perf_counter()
                answer.append(piece)
        ttft_ms = ((first or time.perf_counter()) - started) * 1000
        figures.ttft_ms.append(ttft_ms)
        if turn:
            figures.later_turn_ttft_ms.append(ttft_ms)
        history.append({"role": "assistant", "content": words(rng, 16)})


def cache_counters(url: str, token: str, deployment: str) -> tuple[float, float]:
    """(hits, queries) of the deployment's replicas, from the engines' own prefix-cache counters as
    modelyard's ``/metrics`` re-exports them (vLLM's names; the exact upstream uses them too)."""
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text
    hits = queries = 0.0
    label = f'deployment="{deployment}"'
    for line in text.splitlines():
        if label not in line:
            continue
        if line.startswith("vllm:prefix_cache_hits_total"):
            hits += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


async def run_policy(
    url: str,
    key: str,
    token: str,
    deployment: str,
    policy: str,
    arguments: argparse.Namespace,
    seed: int,
) -> PolicyFigures:
    figures = PolicyFigures(policy)
    rng = random.Random(seed)
    systems = [words(rng, arguments.system_words) for _ in range(arguments.system_prompts)]
    hits_before, queries_before = cache_counters(url, token, deployment)
    limits = httpx.Limits(max_connections=arguments.conversations * 2)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300, limits=limits) as client:
        await asyncio.gather(
            *(
                conversation(
                    client,
                    deployment,
                    systems[index % len(systems)],
                    arguments.turns,
                    seed * 1000 + index,
                    figures,
                    arguments.question_words,
                )
                for index in range(arguments.conversations)
            )
        )
    hits_after, queries_after = cache_counters(url, token, deployment)
    figures.hits, figures.queries = hits_after - hits_before, queries_after - queries_before
    return figures


def set_routing(url: str, password: str, deployment: str, policy: str) -> None:
    """Switch ``deployment``'s routing policy through the REST API (admin)."""
    response = httpx.patch(
        f"{url}/api/v1/deployments/{deployment}",
        json={"routing": policy},
        auth=("admin", password),
        timeout=30,
    )
    if response.status_code != 200:
        raise SetupFailed(
            f"{deployment}: routing {policy!r} refused: HTTP {response.status_code} {response.text}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument(
        "--system-prompts", type=int, default=16, help="Distinct long contexts (16: one per conversation)"
    )
    parser.add_argument("--system-words", type=int, default=800)
    parser.add_argument("--question-words", type=int, default=40)
    parser.add_argument("--prefill-ms-per-token", type=float, default=0.25)
    parser.add_argument(
        "--cache-blocks",
        type=int,
        default=800,
        help="Prefix-cache capacity per replica, in blocks of 16 tokens",
    )
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds (least outstanding, then prefix)")
    parser.add_argument("--url", default=None, help="An existing server (with --no-platform)")
    parser.add_argument("--no-platform", action="store_true")
    parser.add_argument(
        "--metrics-token-file", default="", help="With --no-platform: the server's metrics-token"
    )
    parser.add_argument("--json", type=Path, default=None, help="Save the figures here")
    parser.add_argument(
        "--deployments",
        default="lo,px",
        help="least-outstanding,prefix deployment names (with --one-deployment: one name)",
    )
    parser.add_argument(
        "--one-deployment",
        action="store_true",
        help="Both policies on one deployment of two replicas, its routing switched before each pass",
    )
    parser.add_argument(
        "--admin-password-file", default="", help="With --no-platform --one-deployment: the server's"
    )
    parser.add_argument("--proxy-cpus", default="0")
    parser.add_argument("--load-cpus", default="1")
    arguments = parser.parse_args()
    names = arguments.deployments.split(",")
    if arguments.one_deployment:
        names = [names[0], names[0]] if names != ["lo", "px"] else ["shared", "shared"]
    if len(names) != 2:
        parser.error("--deployments takes two names (least-outstanding,prefix), or one with --one-deployment")
    lo_name, px_name = names
    results: dict[str, list[PolicyFigures]] = {"least-outstanding": [], "prefix": []}
    try:
        with tempfile.TemporaryDirectory(prefix="modelyard-prefix-") as scratch:
            platform: Platform | None = None
            if arguments.no_platform:
                url, key = arguments.url, os.environ.get("BENCH_API_KEY", "")
                token = Path(arguments.metrics_token_file).read_text().strip()
                if arguments.one_deployment:
                    password = Path(arguments.admin_password_file).read_text().strip()
            else:
                require_taskset()
                platform = Platform(Path(scratch), gateway_workers=1, cpus=arguments.proxy_cpus)
                platform.start()
                options = f"--ttft-ms 20 --itl-ms 5 --prefill-ms-per-token {arguments.prefill_ms_per_token:g}"
                options += f" --cache-blocks {arguments.cache_blocks}"
                platform.deploy(lo_name, arguments.load_cpus, options, replicas=2)
                if not arguments.one_deployment:
                    platform.deploy(px_name, arguments.load_cpus, options, replicas=2, routing="prefix")
                url, key = platform.url, platform.api_key
                token = (platform.data_dir / "metrics-token").read_text().strip()
                password = (platform.data_dir / "admin-password").read_text().strip()
            try:
                for round_index in range(arguments.rounds):
                    for offset, (name, policy) in enumerate(
                        ((lo_name, "least-outstanding"), (px_name, "prefix"))
                    ):
                        seed = 7 + round_index
                        if arguments.one_deployment:  # the same engines: conversations of its own
                            set_routing(url, password, name, policy)
                            seed = 7 + 2 * round_index + offset
                        figures = asyncio.run(run_policy(url, key, token, name, policy, arguments, seed))
                        results[policy].append(figures)
                        print(
                            f"  round {round_index} {policy:17}: TTFT p50 "
                            f"{statistics.median(figures.ttft_ms):7.1f} ms, hit rate {figures.hit_rate:.1%}",
                            file=sys.stderr,
                        )
            finally:
                if platform is not None:
                    platform.stop()
    except SetupFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(
        f"\n{arguments.conversations} conversations x {arguments.turns} turns, "
        f"{arguments.system_prompts} system prompts of {arguments.system_words} words, "
        f"{arguments.rounds} rounds; "
        + (
            "one deployment of 2 replicas, routing switched"
            if arguments.one_deployment
            else "2 replicas each"
        )
    )
    # A turn's TTFT is bimodal (its prompt mostly cached, or mostly not): the median lands on one
    # mode or the other with a few turns' difference, so the means are printed beside it.
    print(
        f"{'policy':18} {'TTFT p50':>9} {'p99':>9} {'mean':>7} {'later turns p50':>16} "
        f"{'later mean':>11} {'hit rate':>9}"
    )
    for policy, runs in results.items():
        ttft = [value for run in runs for value in run.ttft_ms]
        later = [value for run in runs for value in run.later_turn_ttft_ms]
        hits = sum(run.hits for run in runs)
        queries = sum(run.queries for run in runs)
        rate = hits / queries if queries else float("nan")
        print(
            f"{policy:18} {statistics.median(ttft):8.1f}  {percentile(ttft, 0.99):8.1f} "
            f"{statistics.mean(ttft):7.1f}  {statistics.median(later):15.1f} {statistics.mean(later):11.1f}"
            f"  {rate:8.1%}"
        )
    if arguments.json is not None:
        document = {
            "settings": {name: str(value) for name, value in vars(arguments).items()},
            "policies": {
                policy: [
                    {
                        "ttft_ms": run.ttft_ms,
                        "later_turn_ttft_ms": run.later_turn_ttft_ms,
                        "hits": run.hits,
                        "queries": run.queries,
                    }
                    for run in runs
                ]
                for policy, runs in results.items()
            },
        }
        arguments.json.write_text(json.dumps(document))
    lo = [value for run in results["least-outstanding"] for value in run.ttft_ms]
    px = [value for run in results["prefix"] for value in run.ttft_ms]
    print(
        f"prefix / least-outstanding TTFT p50: {statistics.median(px) / statistics.median(lo):.3f}, "
        f"mean: {statistics.mean(px) / statistics.mean(lo):.3f}"
    )
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
