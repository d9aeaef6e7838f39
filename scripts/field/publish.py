"""Copy a field run's results folder into the docs, small enough to commit.

    python scripts/field/publish.py /tmp/field/results docs/field-tests/h200-DATE/results

What changes on the way (``report.py`` reads both forms):
- ``prompts.jsonl`` is left out (the seeds in each ``result.json`` rebuild the prompts);
- ``requests.jsonl`` is left out, except for side-by-side runs (``side-*``), which keep the fields
  the report's bootstrap intervals need, xz-compressed, as ``requests-brief.jsonl.xz``;
- engine logs become ``engine-excerpt.log``: the memory, parallelism, start and error lines;
- ``serve.log`` becomes ``serve-excerpt.log``: no access lines, no admin password, no cluster
  join token (``serve --cluster`` prints it once).
"""

from __future__ import annotations

import json
import lzma
import re
import shutil
import sys
from pathlib import Path

BRIEF_FIELDS = ("request_index", "warmup", "error", "ttft_ms", "e2el_ms", "usage_completion_tokens")
ENGINE_LINES = re.compile(
    r"Model loading took|Available KV cache|GPU KV cache size|Maximum concurrency|init engine|"
    r"Load weight end|KV Cache is allocated|max_total_num_tokens|tensor_parallel|tp_size|world_size|"
    r"NCCL|custom all|CUDA graph|Capturing|Error|Traceback|Started server|Uvicorn running|"
    r"The server is fired up|ready to roll",
    re.IGNORECASE,
)
# The cluster's join token, as ``serve --cluster`` prints it once ("worker join HOST:PORT --token T").
JOIN_TOKEN = re.compile(r"(--token\s+)\S+")
EXCERPT_LINES = 300
SERVE_EXCERPT_LINES = 200


def brief_requests(path: Path) -> bytes:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    brief = (
        {key: record.get(key) for key in BRIEF_FIELDS} | {"chunks": len(record.get("chunk_arrival_ns") or [])}
        for record in lines
    )
    return lzma.compress("\n".join(json.dumps(record) for record in brief).encode())


def excerpt(path: Path, keep: re.Pattern[str] | None, limit: int) -> str:
    lines = path.read_text(errors="replace").splitlines()
    if keep is not None:
        kept = [line[:400] for line in lines if keep.search(line)]
    else:  # the server's log: what is not an access line, the admin password or the join token
        kept = [
            JOIN_TOKEN.sub(r"\1<the cluster token: not published>", line)[:400]
            for line in lines
            if " INFO: " not in line and "HTTP/1.1" not in line and "admin password" not in line
        ]
    return "\n".join(kept[:limit]) + "\n"


def publish(source: Path, target: Path) -> None:
    for path in sorted(source.rglob("*")):
        if path.is_dir() or path.name == "prompts.jsonl":
            continue
        out = target / path.relative_to(source)
        out.parent.mkdir(parents=True, exist_ok=True)
        if path.name == "requests.jsonl":
            if path.parent.name.startswith("side-"):
                (out.parent / "requests-brief.jsonl.xz").write_bytes(brief_requests(path))
        elif path.name == "engine.log":
            (out.parent / "engine-excerpt.log").write_text(excerpt(path, ENGINE_LINES, EXCERPT_LINES))
        elif path.name == "serve.log":
            (out.parent / "serve-excerpt.log").write_text(excerpt(path, None, SERVE_EXCERPT_LINES))
        else:
            shutil.copy2(path, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: publish.py RESULTS_DIR TARGET_DIR")
    publish(Path(sys.argv[1]), Path(sys.argv[2]))
