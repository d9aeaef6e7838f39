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
- inter-token latency: ``4 / --tensor-parallel-size`` ms.

So at 8 concurrent streams the best is ``--max-num-seqs 8 --max-num-batched-tokens 8192`` (or
more sequences): the shortest TTFT with no queue.
"""

from __future__ import annotations

import argparse
import os
import sys

from modelyard.bench.reference.config import parse_reference_argv
from modelyard.bench.reference.server import run_reference_program

DEFAULT_MAX_SEQUENCES = 256
DEFAULT_BATCHED_TOKENS = 2048


def curve(max_sequences: int, batched_tokens: int, tensor_parallel: int) -> tuple[float, float, int]:
    """(TTFT ms, inter-token ms, requests at once) for these flags (see the module docstring)."""
    ttft_ms = 10.0 + 20.0 * 8192 / batched_tokens
    itl_ms = 4.0 / tensor_parallel
    return ttft_ms, itl_ms, max_sequences


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_SEQUENCES)
    parser.add_argument("--max-num-batched-tokens", type=int, default=DEFAULT_BATCHED_TOKENS)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    known, rest = parser.parse_known_args(argv)
    ttft_ms, itl_ms, at_once = curve(
        known.max_num_seqs, known.max_num_batched_tokens, known.tensor_parallel_size
    )
    reference_argv = [*rest, "--ttft-ms", repr(ttft_ms), "--itl-ms", repr(itl_ms)]
    reference_argv += ["--max-concurrency", str(at_once)]
    return run_reference_program(parse_reference_argv(reference_argv, os.environ))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
