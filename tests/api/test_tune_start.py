"""``POST /api/v1/tunes``: each field checked on the server before a tune starts, a bad one a 400
naming it (``details.field``), as the console's form shows it beside that field; nothing is
started and no tune is listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelyard.testing.stand_ins import build_stand_in

from .conftest import ApiHarness, add_model

GOOD = {"model": "qwen", "gpus": "1xH100", "backends": "vllm", "workload": "chat", "slo": "ttft_p95<=500ms"}


@pytest.mark.parametrize(
    ("change", "field", "said"),
    [
        ({"model": "nope"}, "model", "the server has no model 'nope'"),
        ({"model": ""}, "model", "model is empty"),
        ({"gpus": "2xPotato"}, "gpus", "unknown GPU"),
        ({"backends": "vllm,tgi"}, "backends", "no backend tgi on this server"),
        ({"workload": "everything"}, "workload", "not a built-in one"),
        ({"workload_file": "name: mine\ninput_tokens: [1, 2\n"}, "workload_file", "the uploaded file"),
        ({"slo": "ttft_p95 under 2s"}, "slo", "ttft_p95"),
        ({"budget": "soon"}, "budget", "'soon' is not a duration"),
    ],
    ids=["unknown-model", "no-model", "gpus", "backends", "workload", "workload-file", "slo", "budget"],
)
def test_a_bad_field_is_a_400_naming_it_and_nothing_starts(
    api: ApiHarness, tmp_path: Path, change: dict[str, Any], field: str, said: str
) -> None:
    add_model(api, build_stand_in("qwen3-8b", tmp_path / "Qwen3-8B"), "qwen")
    response = api.client.post("/api/v1/tunes", json={**GOOD, **change})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "tune_field_invalid"
    assert error["details"] == {"field": field}
    assert said in error["message"]
    assert api.client.get("/api/v1/tunes").json() == []
