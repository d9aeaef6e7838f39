"""The estimator's error on real startup logs, per engine: median and worst.

By default only the evaluation split (``tests/estimate/evaluation``: sources never used to set a
constant); ``--split fitting`` shows the starts the constants came from, ``--cases`` each case.

    python scripts/estimate_accuracy.py
    python scripts/estimate_accuracy.py --cases
    python scripts/estimate_accuracy.py --split fitting
    python scripts/estimate_accuracy.py --directory tests/estimate/sweep/cases --cases   # the memory sweep
"""

from __future__ import annotations

import argparse
from pathlib import Path

from modelyard.estimate.startup_logs import GIB, Split, error_table, evaluate, load_cases

ROOT = Path(__file__).resolve().parent.parent / "tests" / "estimate"
DIRECTORIES: dict[Split, Path] = {"fitting": ROOT / "fixtures", "evaluation": ROOT / "evaluation"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=sorted(DIRECTORIES), default="evaluation")
    parser.add_argument("--cases", action="store_true", help="print each case")
    parser.add_argument(
        "--directory", type=Path, default=None, help="cases of another folder (e.g. the memory sweep's)"
    )
    args = parser.parse_args()
    split: Split = args.split
    results = evaluate(load_cases(args.directory or DIRECTORIES[split], split))
    sources = sorted({result.case.source for result in results})
    label = str(args.directory) if args.directory else f"{split} split"
    print(f"{label}: {len(results)} startup logs from {len(sources)} sources ({', '.join(sources)})")
    print("KV memory: what the estimator predicts for the KV cache of one GPU (on its total memory)")
    print("against what the engine logged; tokens: the tokens that memory holds.\n")
    if args.cases:
        for result in results:
            components = ", ".join(
                f"{name} {value:+.2f}" for name, value in result.component_errors().items()
            )
            print(
                f"{result.case.name:<62} KV {result.case.logged.memory_bytes / GIB:7.2f} GiB logged, "
                f"{result.predicted_kv_bytes / GIB:7.2f} predicted ({result.kv_error:+6.1%}); "
                f"tokens {result.token_error:+6.1%}" + (f"; GiB off: {components}" if components else "")
            )
        print()
    print(error_table(results))


if __name__ == "__main__":
    main()
