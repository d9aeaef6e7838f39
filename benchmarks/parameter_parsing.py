"""Backend parameters of 256 KiB and 2 MiB through the parser and doctor's checks: is the work linear?

Issue 17 measured the old splitting (``shlex``) as quadratic: a 256 KiB backend parameter took
10.7 s, a 2 MiB one 3.5 minutes. This prints, for three shapes of input, the time per MiB at
256 KiB and at 2 MiB and their ratio (1.0 is linear; quadratic work gives 8.0), and ``shlex`` on
the same one-word input at a small size and 4x that size, measured in the same run, as the
baseline the ratio is read against.

    python benchmarks/parameter_parsing.py            # all shapes, 256 KiB and 2 MiB
    python benchmarks/parameter_parsing.py --small    # 8 and 32 KiB (what the test runs)

Never run as a test; ``tests/doctor/test_parameter_bounds.py`` only checks that it runs.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import time
from collections.abc import Callable

from modelyard.backends.flag_tables import load_flag_table
from modelyard.backends.parameters import parse_backend_parameters
from modelyard.doctor.parameters import check_parameters

KIB = 1 << 10
TABLE = load_flag_table("vllm", "0.25.0")


def one_quoted_word(size_bytes: int) -> str:
    return "--chat-template '" + "x" * size_bytes + "'"


def many_known_flags(size_bytes: int) -> str:
    return "--max-model-len 8192 " * (size_bytes // 21)


def many_unknown_flags(size_bytes: int) -> str:
    return " ".join(f"--no-such-flag-{index}" for index in range(size_bytes // 24))


def _seconds(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def _per_mib(seconds: float, size_bytes: int) -> float:
    return seconds / (size_bytes / (1 << 20))


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--small", action="store_true", help="8 and 32 KiB instead of 256 KiB and 2 MiB")
    arguments = options.parse_args()
    small, large = (8 * KIB, 32 * KIB) if arguments.small else (256 * KIB, 2048 * KIB)
    shapes: dict[str, Callable[[int], str]] = {
        "one quoted word": one_quoted_word,
        "many known flags": many_known_flags,
        "many unknown flags": many_unknown_flags,
    }
    print(f"{'input':<22}{'stage':<10}{small // KIB:>6} KiB s/MiB{large // KIB:>8} KiB s/MiB{'ratio':>8}")
    for name, build in shapes.items():
        texts = {size: build(size) for size in (small, large)}
        stages: dict[str, Callable[[str], object]] = {
            "parse": lambda text: parse_backend_parameters(text, TABLE),
            "doctor": lambda text: check_parameters(
                engine="vllm", version="0.25.0", backend_parameters=text, env={}
            ),
        }
        for stage, work in stages.items():
            rates = [
                _per_mib(_seconds(functools.partial(work, texts[size])), size) for size in (small, large)
            ]
            print(f"{name:<22}{stage:<10}{rates[0]:>16.3f}{rates[1]:>18.3f}{rates[1] / rates[0]:>8.2f}")
    baseline_small, baseline_large = (4 * KIB, 16 * KIB) if arguments.small else (128 * KIB, 512 * KIB)
    rates = [
        _per_mib(_seconds(lambda size=size: shlex.split(one_quoted_word(size))), size)
        for size in (baseline_small, baseline_large)
    ]
    print(
        f"{'one quoted word':<22}{'shlex':<10}{rates[0]:>16.3f}{rates[1]:>18.3f}{rates[1] / rates[0]:>8.2f}"
        f"   (baseline at {baseline_small // KIB} and {baseline_large // KIB} KiB: 4x the size)"
    )


if __name__ == "__main__":
    main()
