"""The official recipes (``recipes/official.yaml``) start clean: no error and no warning from doctor.

Qwen3 (dense, MoE FP8 with expert parallelism, YaRN past the model's 40,960 positions), Qwen3.5
and Qwen3.6 (dense and MoE, MTP) and the DP/EP MoE recipes, from the vLLM recipes, the SGLang
cookbook, the Qwen docs and model cards, each on every release of the built-in catalog. Checked
twice: as a plan (every check doctor has, the memory fit included) and through the CLI's
``deployment_checkup`` with planned GPUs (the path that once refused the DP+EP recipe).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelyard.backends.catalog import load_builtin_backends
from modelyard.backends.flag_tables import load_flag_table
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.host_facts import HostFacts
from modelyard.doctor.plan import DeploymentPlan, check_plan
from modelyard.estimate import parse_gpu_specs
from modelyard.modeldir import ModelFacts

TESTS = Path(__file__).parent.parent
RECIPES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "recipes" / "official.yaml").read_text()
)
CATALOG = {spec.family: spec for spec in load_builtin_backends() if spec.family in {"vllm", "sglang"}}
GIB = 1 << 30
# A host as the recipes assume one: the container runs with --ipc=host, no proxy, the model local.
HOST = HostFacts(shm_bytes=64 * GIB, environment={}, hub_cache_dir=Path("/nonexistent/hub-cache"))


def _config(recipe: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((TESTS / recipe["config"]).read_text())
    return {key: value for key, value in config.items() if not key.startswith("_")}


def _cases() -> list[tuple[dict[str, Any], str]]:
    cases = []
    for recipe in RECIPES:
        for version in recipe.get("versions") or sorted(CATALOG[recipe["engine"]].versions):
            table = load_flag_table(recipe["engine"], version)
            if table is not None and any(table.lookup(flag) is None for flag in recipe.get("requires", ())):
                continue
            cases.append((recipe, version))
    return cases


CASES = _cases()


def _loud(findings: list[Finding]) -> list[str]:
    return [
        f"{finding.severity.value} {finding.check_id}: {finding.message}"
        for finding in findings
        if finding.severity in {Severity.ERROR, Severity.WARNING}
    ]


def test_the_recipes_have_sources_and_cover_the_brief() -> None:
    assert len(RECIPES) >= 15
    for recipe in RECIPES:
        assert recipe["source"].startswith("https://"), recipe["id"]
    ids = " ".join(recipe["id"] for recipe in RECIPES)
    for needed in ("qwen3-8b", "qwen3.6-27b", "qwen3.6-35b", "mtp", "dp8-ep", "ep8", "yarn"):
        assert needed in ids
    assert {engine for _, engine in {(r["id"], r["engine"]) for r in RECIPES}} == {"vllm", "sglang"}
    # Each recipe runs on at least one catalog release.
    assert {recipe["id"] for recipe, _ in CASES} == {recipe["id"] for recipe in RECIPES}


@pytest.mark.parametrize(
    ("recipe", "version"), CASES, ids=[f"{recipe['id']}@{version}" for recipe, version in CASES]
)
def test_official_recipe_plans_clean(recipe: dict[str, Any], version: str) -> None:
    plan = DeploymentPlan(
        engine=recipe["engine"],
        version=version,
        backend_parameters=recipe["backend_parameters"],
        env=recipe.get("env") or {},
        model=ModelFacts(directory=Path(f"/models/{recipe['id']}"), config=_config(recipe)),
        gpus=parse_gpu_specs(recipe["gpus"]),
        host=HOST,
    )
    assert _loud(check_plan(plan)) == [], recipe["source"]


def _model_dir(root: Path, recipe: dict[str, Any]) -> Path:
    directory: Path = root / str(recipe["id"])
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(_config(recipe)))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645]}))
    (directory / "tokenizer.json").write_text(
        json.dumps({"added_tokens": [{"id": 151645, "content": "<|im_end|>", "special": True}]})
    )
    # The real checkpoints carry a ChatML template; the chat route needs one.
    template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "chat_template": template})
    )
    return directory


DP_EP = [
    (recipe, version)
    for recipe, version in CASES
    if recipe["id"]
    in {
        "vllm-qwen3.6-35b-a3b-fp8-dp8-ep-text",
        "vllm-qwen3-coder-480b-a35b-fp8-dp8-ep-131k",
        "sglang-qwen3.5-397b-a17b-fp8-tp8-ep8",
    }
]


@pytest.mark.parametrize(
    ("recipe", "version"), DP_EP, ids=[f"{recipe['id']}@{version}" for recipe, version in DP_EP]
)
def test_dp_ep_recipe_through_the_cli_checkup_has_no_error(
    recipe: dict[str, Any], version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelyard.doctor.checkup import deployment_checkup

    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    spec = CATALOG[recipe["engine"]]
    findings = deployment_checkup(
        model_dir=_model_dir(tmp_path, recipe),
        spec=spec,
        version=spec.versions[version],
        backend_parameters=recipe["backend_parameters"],
        env={},
        gpu_specs=parse_gpu_specs(recipe["gpus"]),
    )
    # The stand-in directory has a config and a tokenizer but no weights: model.weights-* says so.
    errors = [
        f"{f.check_id}: {f.message}"
        for f in findings
        if f.severity is Severity.ERROR and not f.check_id.startswith("model.weights")
    ]
    assert errors == [], recipe["source"]


def test_the_cookbooks_qwen3_tool_parser_is_refused() -> None:
    """sgl-cookbook docs/autoregressive/Qwen/Qwen3.md: `--tool-call-parser qwen3`, a name SGLang
    took in 0.4.9.post3 only; doctor says the release refuses it and names `qwen`."""
    for version in sorted(CATALOG["sglang"].versions):
        plan = DeploymentPlan(
            engine="sglang", version=version, backend_parameters=["--tp 8", "--tool-call-parser qwen3"]
        )
        found = [f for f in check_plan(plan) if f.check_id == "param.invalid-choice"]
        assert found and found[0].severity is Severity.ERROR
        assert "did you mean 'qwen'" in (found[0].fix or "")
