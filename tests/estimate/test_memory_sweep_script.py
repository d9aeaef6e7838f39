"""The memory sweep's script (scripts/field/memory_sweep.py) for SGLang: the command line of a
start, the lines a case keeps of SGLang's log (in the format SGLang 0.5.17 prints them) and the
case it writes, read back by the estimator's evaluation. No engine runs here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from modelyard.estimate.startup_logs import GIB, evaluate, load_case

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "scripts" / "field" / "memory_sweep_sglang.yaml"
# Lines as SGLang 0.5.17 logs them (model_runner.py, memory_pool.py, kv_cache_configurator.py,
# scheduler.py), around them a progress bar and a line the case need not keep.
SGLANG_LOG = "\n".join(
    [
        "[2026-12-07 05:38:20] Load weight begin. avail mem=139.13 GB",
        "[2026-12-07 05:38:20] Load weight end. elapsed=0.18 s, type=Qwen3ForCausalLM, "
        "avail mem=123.85 GB, mem usage=15.28 GB.",
        "[2026-12-07 05:38:21] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 803516, "
        "K size: 55.17 GB, V size: 55.17 GB",
        "[2026-12-07 05:38:21] Memory pool end. avail mem=13.31 GB",
        "\rCapturing batches (bs=256 avail_mem=11.69 GB):   0%|          | 0/36 [00:00<?, ?it/s]",
        "[2026-12-07 05:38:22] Using fallback token IDs for yes/no (9693/2152)",
        "[2026-12-07 05:39:47] max_total_num_tokens=803516, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=4096, context_len=8192, "
        "available_gpu_mem=11.48 GB",
        "[2026-12-07 05:39:47] INFO:     Application startup complete.",
    ]
)


def _sweep() -> ModuleType:
    path = ROOT / "scripts" / "field" / "memory_sweep.py"
    spec = importlib.util.spec_from_file_location("memory_sweep", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["memory_sweep"] = module
    spec.loader.exec_module(module)
    return module


def _plan() -> dict[str, Any]:
    plan: dict[str, Any] = yaml.safe_load(PLAN.read_text(encoding="utf-8"))
    return plan


def test_the_sglang_plan_names_real_configs_and_the_settings_that_move_its_overheads() -> None:
    plan = _plan()
    assert plan["engine"] == "sglang" and plan["engine_version"] == "0.5.17"
    words = {word for case in plan["cases"] for word in case["arguments"]}
    assert {"--mem-fraction-static", "--context-length", "--max-running-requests"} <= words
    assert {"--chunked-prefill-size", "--disable-cuda-graph", "--cuda-graph-max-bs", "fp8_e5m2"} <= words
    for case in plan["cases"]:
        assert (ROOT / case["config"]).is_file(), case["name"]
        for extra in (case.get("files") or {}).values():
            assert (ROOT / extra).is_file(), extra
    configs = {Path(case["config"]).name for case in plan["cases"]}
    assert {"qwen3.6-27b.json", "qwen3.6-35b-a3b.json", "deepseek-v2-lite.json"} <= configs


def test_an_sglang_start_is_launch_server_with_dummy_weights_and_the_kit_s_backends() -> None:
    sweep = _sweep()
    plan = _plan()
    case = next(case for case in plan["cases"] if case["name"] == "qwen3-8b-8k-frac07")
    argv = sweep.engine_argv(plan, case, Path("/tmp/models/x"), 8123)
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert argv[argv.index("--model-path") + 1] == "/tmp/models/x"
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--attention-backend") + 1] == "triton"
    assert argv[argv.index("--sampling-backend") + 1] == "pytorch"
    assert argv[-4:] == ["--context-length", "8192", "--mem-fraction-static", "0.7"]
    assert "--skip-tokenizer-init" in argv


def test_a_case_keeps_sglang_s_memory_lines_and_the_estimator_reads_them(tmp_path: Path) -> None:
    sweep = _sweep()
    plan = _plan()
    case = dict(next(case for case in plan["cases"] if case["name"] == "qwen3-8b-8k"))
    case["config"] = str(ROOT / case["config"])
    gpu = {"name": "NVIDIA H200", "memory_total_mib": 143771, "memory_used_mib": 0, "driver": "580"}
    seen = {"argv": [], "outcome": "ready", "seconds": 114.1, "gpu_used_at_ready_mib": 131400}
    record = sweep.case_record(plan, case, 1, seen, SGLANG_LOG, gpu)
    assert record["name"] == "sglang-qwen3-8b-8k-start1" and record["gpu"] == "1xH200"
    assert "Capturing" not in record["log"] and "yes/no" not in record["log"]
    assert "KV Cache is allocated" in record["log"] and "max_total_num_tokens=803516" in record["log"]
    cases = tmp_path / "cases"
    cases.mkdir()
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "qwen3-8b.json").write_bytes(Path(case["config"]).read_bytes())
    path = cases / f"{record['name']}.yaml"
    path.write_text(yaml.safe_dump(record, sort_keys=False, width=10_000), encoding="utf-8")
    loaded = load_case(path, "evaluation")
    assert loaded.engine == "sglang" and loaded.logged.tokens == 803_516
    assert abs(loaded.logged.memory_bytes / GIB - 110.34) < 0.01
    assert abs(evaluate([loaded])[0].kv_error) < 0.01
