"""The vLLM engine DOUBLE with a known performance curve: the reference server
(``modelyard.bench.reference``, the engine double of the tests) whose timings follow from the
vLLM flags it is launched with, so a test knows which candidate a tune must pick.

    python tests/tune/curve_engine.py vllm serve MODEL --port P --max-num-seqs 8 \\
        --max-num-batched-tokens 8192 --tensor-parallel-size 2

The curve (every other flag is passed on to the reference server, which ignores vLLM's):

- requests running at once: ``--max-num-seqs`` (default 256); more wait in a queue, and their
  wait adds to their TTFT;
- TTFT: ``10 + 20 x 8192 / --max-num-batched-tokens`` ms (default 2048: 90 ms; 8192: 30 ms;
  1024: 170 ms), as smaller prefill chunks take more steps;
- inter-token latency: ``4 / --tensor-parallel-size`` ms; with ``--speculative-config`` of K
  tokens, ``x (1 + 0.1 K) / (1 + a K)``, a step verifying K proposals of which the share ``a`` is
  accepted (``ACCEPTANCE_RATIOS``: ngram 0.5, a draft model 0.75, EAGLE 0.7, EAGLE-3 0.85, MTP
  0.8); its ``/metrics`` counts the
  drafts, draft tokens and accepted tokens under vLLM's names.

- the environment: ``CURVE_ENGINE_EXTRA_TTFT_MS`` adds that many ms to the TTFT (so a test sees
  that ``modelyard tune --env`` reached the engine); ``CURVE_ENGINE_STARTUP_DELAY_S`` keeps the
  engine from answering for that long after it starts (a test interrupts a tune mid-start).

So at 8 concurrent streams the best is ``--max-num-seqs 8 --max-num-batched-tokens 8192`` (or
more sequences): the shortest TTFT with no queue.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from modelyard.bench.reference.config import parse_reference_argv
from modelyard.bench.reference.server import run_reference_program

DEFAULT_MAX_SEQUENCES = 256
DEFAULT_BATCHED_TOKENS = 2048
ACCEPTANCE_RATIOS = {"ngram": 0.5, "draft_model": 0.75, "eagle": 0.7, "eagle3": 0.85, "mtp": 0.8}
VERIFY_COST_PER_TOKEN = 0.1
EXTRA_TTFT_VARIABLE = "CURVE_ENGINE_EXTRA_TTFT_MS"
STARTUP_DELAY_VARIABLE = "CURVE_ENGINE_STARTUP_DELAY_S"


def speculation_of(config_text: str | None) -> tuple[int, float]:
    """(tokens proposed per step, share accepted) of a ``--speculative-config``; (0, 0) for none."""
    if not config_text:
        return 0, 0.0
    config = json.loads(config_text)
    method = config.get("method") or ("draft_model" if config.get("model") else "ngram")
    return int(config["num_speculative_tokens"]), ACCEPTANCE_RATIOS.get(method, 0.0)


def curve(
    max_sequences: int,
    batched_tokens: int,
    tensor_parallel: int,
    speculative_tokens: int = 0,
    acceptance: float = 0.0,
) -> tuple[float, float, int]:
    """(TTFT ms, inter-token ms, requests at once) for these flags (see the module docstring)."""
    ttft_ms = 10.0 + 20.0 * 8192 / batched_tokens
    itl_ms = 4.0 / tensor_parallel
    if speculative_tokens:
        itl_ms *= (1.0 + VERIFY_COST_PER_TOKEN * speculative_tokens) / (1.0 + acceptance * speculative_tokens)
    return ttft_ms, itl_ms, max_sequences


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_SEQUENCES)
    parser.add_argument("--max-num-batched-tokens", type=int, default=DEFAULT_BATCHED_TOKENS)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--speculative-config", default=None)
    known, rest = parser.parse_known_args(argv)
    tokens, acceptance = speculation_of(known.speculative_config)
    ttft_ms, itl_ms, at_once = curve(
        known.max_num_seqs, known.max_num_batched_tokens, known.tensor_parallel_size, tokens, acceptance
    )
    ttft_ms += float(os.environ.get(EXTRA_TTFT_VARIABLE, "0"))
    reference_argv = [*rest, "--ttft-ms", repr(ttft_ms), "--itl-ms", repr(itl_ms)]
    reference_argv += [
        "--double-spec-tokens",
        str(tokens),
        "--double-spec-acceptance-ratio",
        repr(acceptance),
    ]
    reference_argv += ["--max-concurrency", str(at_once)]
    reference_argv += ["--startup-delay-s", os.environ.get(STARTUP_DELAY_VARIABLE, "0")]
    return run_reference_program(parse_reference_argv(reference_argv, os.environ))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
