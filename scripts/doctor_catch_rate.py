"""Doctor on the corpus of real failure reports: caught before start / from the log / missed, per category.

    python scripts/doctor_catch_rate.py                       # tests/doctor/corpus
    python scripts/doctor_catch_rate.py --cases DIR --verbose # every case and the ids it got

Each case is a public issue (its URL is in the file); see ``modelyard.doctor.cases``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from modelyard.doctor.cases import catch_rates, evaluate_case, load_cases

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--cases", type=Path, default=ROOT / "tests" / "doctor" / "corpus")
    options.add_argument("--verbose", action="store_true", help="print every case's verdict and finding ids")
    arguments = options.parse_args()
    verdicts = [evaluate_case(case) for case in load_cases(arguments.cases)]
    if arguments.verbose:
        for verdict in verdicts:
            before = sorted({f.check_id for f in verdict.before_start if f.severity == "error"})
            log = sorted({f.check_id for f in verdict.from_log if f.severity == "error"})
            print(f"{verdict.caught:<13} {verdict.case.name:<60} before={before} log={log}")
        print()
    rates = catch_rates(verdicts)
    print(f"{'category':<14}{'cases':>6}{'before start':>14}{'from the log':>14}{'missed':>8}")
    for category in sorted(rates, key=lambda key: (key == "all", key)):
        counts = rates[category]
        total = sum(counts.values())
        cells = [
            f"{counts[kind]} ({counts[kind] / total:.0%})"
            for kind in ("before start", "from the log", "missed")
        ]
        print(f"{category:<14}{total:>6}{cells[0]:>14}{cells[1]:>14}{cells[2]:>8}")


if __name__ == "__main__":
    main()
