"""Doctor on the corpus of real failure reports: caught before start / from the log / missed, per
category, for the fit part, the eval part, and the eval reports no check was written from.

    python scripts/doctor_catch_rate.py                       # tests/doctor/corpus
    python scripts/doctor_catch_rate.py --cases DIR --verbose # every case and the ids it got
    python scripts/doctor_catch_rate.py --markdown            # tables for the docs

Each case is a public report (its URL is in the file); see ``modelyard.doctor.cases``. The split is
by source thread (``split_of``); checks are written from the fit part only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from modelyard.doctor.cases import (
    CaseVerdict,
    Caught,
    catch_rates,
    evaluate_case,
    load_cases,
    log_diagnosis_rate,
    rate_table,
)
from modelyard.doctor.findings import Severity

ROOT = Path(__file__).resolve().parents[1]
KINDS: tuple[Caught, ...] = ("before start", "from the log", "missed")


def _markdown(verdicts: list[CaseVerdict]) -> str:
    rates = catch_rates(verdicts)
    lines = ["| category | cases | before start | from the log | missed |", "| --- | --- | --- | --- | --- |"]
    for category in sorted(rates, key=lambda key: (key == "all", key)):
        counts = rates[category]
        cells = " | ".join(str(counts[kind]) for kind in KINDS)
        lines.append(f"| {category} | {sum(counts.values())} | {cells} |")
    return "\n".join(lines)


def _log_rate_line(verdicts: list[CaseVerdict], label: str) -> str:
    rate = log_diagnosis_rate(verdicts)
    if not rate.logs:
        return f"{label}: no verbatim startup logs"
    diagnosed = f"{rate.diagnosed} ({rate.diagnosed / rate.logs:.0%})"
    named = f"{rate.named_cause} ({rate.named_cause / rate.logs:.0%})"
    return (
        f"{label}: {rate.logs} verbatim startup logs, {diagnosed} get an error or warning, "
        f"{named} one naming the cause"
    )


def main() -> None:
    options = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    options.add_argument("--cases", type=Path, default=ROOT / "tests" / "doctor" / "corpus")
    options.add_argument("--verbose", action="store_true", help="print every case's verdict and finding ids")
    options.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    arguments = options.parse_args()
    verdicts = [evaluate_case(case) for case in load_cases(arguments.cases)]
    if arguments.verbose:
        for verdict in verdicts:
            before = sorted({f.check_id for f in verdict.before_start if f.severity is Severity.ERROR})
            log = sorted({f.check_id for f in verdict.from_log if f.severity is Severity.ERROR})
            print(
                f"{verdict.case.split:<5}{verdict.caught:<13} {verdict.case.name:<60} "
                f"expected={list(verdict.case.expected)} before={before} log={log}"
            )
        print()
    parts = {
        "fit": [v for v in verdicts if v.case.split == "fit"],
        "eval": [v for v in verdicts if v.case.split == "eval"],
        "eval, no check written from it": [
            v
            for v in verdicts
            if v.case.split == "eval" and not v.case.seen_before_split and not v.case.seen_after_split
        ],
        "all": verdicts,
    }
    for batch in sorted({v.case.batch for v in verdicts if v.case.batch}):
        parts[f"batch {batch}"] = [v for v in verdicts if v.case.batch == batch]
    print(
        f"{len(verdicts)} reports from {len({v.case.source_url for v in verdicts})} threads: "
        f"{len(parts['fit'])} fit, {len(parts['eval'])} eval"
    )
    for label, part in parts.items():
        print(f"\n{label} ({len(part)} reports)")
        print(_markdown(part) if arguments.markdown else rate_table(part))
    print()
    for label, part in parts.items():
        print(_log_rate_line(part, label))


if __name__ == "__main__":
    main()
