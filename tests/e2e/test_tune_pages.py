"""The console's tune pages: a tune of this server's data directory, written by the real tune
session (``run_tune``) with a DOUBLE deployer and measurer (no engine runs here), listed with
its winner, and shown with its winner, deploy command, and each candidate's acceptance or drop
reason; both pages and their API are behind the admin's sign-in."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.sync_api import Browser, expect

from modelyard.estimate import parse_gpu_specs
from modelyard.testing.http_clients import shared_tls_context
from modelyard.tune.acceptance import AcceptanceFigures
from modelyard.tune.endpoint import Endpoint
from modelyard.tune.measurement import Measurement, PointFigures
from modelyard.tune.session import TuneRequest, run_tune
from modelyard.tune.slo import parse_slos
from modelyard.tune.space import Candidate, EngineChoice, SearchSpace
from modelyard.tune.speculation import Speculation
from modelyard.tune.workloads import BUILTIN_WORKLOADS

from .conftest import WIDE, ConsoleServer, new_console
from .pages import wait_loaded


class DeployerDouble:
    """Starts nothing: every candidate answers at a made-up address."""

    def start(self, candidate: Candidate) -> Endpoint:
        return Endpoint("http://127.0.0.1:9/v1", candidate.candidate_id)

    def stop(self, candidate: Candidate) -> None:
        return None


class MeasurerDouble:
    """Known figures: speculation doubles the throughput; 62 % of its proposals accepted."""

    def measure(
        self, candidate: Candidate, endpoint: Endpoint, rung: int, requests_per_point: int, record_dir: Path,
        *, final: bool = False,
    ) -> Measurement:  # fmt: skip
        throughput = 200.0 if candidate.speculation else 100.0
        point = PointFigures(8.0, True, requests_per_point, 0, 1.0, throughput, {"ttft_ms": {"p95": 100.0}})
        speculation = AcceptanceFigures(0.62, 2.9) if candidate.speculation else None
        return Measurement(
            candidate.candidate_id, rung, requests_per_point, (point,), str(record_dir), 1.0, speculation
        )


def test_a_tune_is_listed_and_shown_with_its_winner_and_acceptance(
    browser: Browser, console_server: ConsoleServer
) -> None:
    request = TuneRequest(
        model="tiny-shared",
        model_facts=None,
        gpus_text="1xH100",
        gpus=parse_gpu_specs("1xH100"),
        workload=BUILTIN_WORKLOADS["chat"],
        slos=parse_slos("ttft_p95<=500ms"),
        space=SearchSpace(
            engines=(EngineChoice("vllm", "vllm", "0.25.0"),),
            max_sequences=(None,),
            batched_tokens=(None,),
            speculation=(None, Speculation("ngram", 4)),
        ),
    )
    result = run_tune(
        request, console_server.data_dir, deployer_for=lambda _id: DeployerDouble(), measurer=MeasurerDouble()
    )
    winner = "vllm 0.25.0 tp1 spec=ngram:4"
    assert httpx.get(f"{console_server.url}/api/v1/tunes", verify=shared_tls_context()).status_code == 401

    console = new_console(browser, console_server, WIDE, signed_in=True)
    page = console.page
    page.goto(console_server.url + "/tunes")
    expect(page.get_by_role("heading", level=1)).to_have_text("Tunes")
    wait_loaded(page)
    row = page.get_by_role("row").filter(has_text=result.tune_id)
    expect(row).to_contain_text(winner)
    expect(row).to_contain_text("2.00x the defaults")
    page.locator("#speculative").fill("off,ngram:4")
    expect(page.locator("#tune-command")).to_contain_text("--speculative off,ngram:4")

    row.get_by_role("link", name=result.tune_id).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(result.tune_id)
    expect(page.locator("#winners")).to_contain_text(winner)
    expect(page.locator("#gain")).to_contain_text("2.00x the throughput")
    expect(page.locator("#deploy-command")).to_contain_text("--speculative-config")
    speculating = page.locator("#candidates").get_by_role("row").filter(has_text="spec=ngram:4")
    expect(speculating).to_contain_text("62% (2.9 tokens/step)")
    console.context.close()
    assert not console.watch.problems, "\n".join(console.watch.problems)

    anonymous = new_console(browser, console_server, WIDE, signed_in=False)
    anonymous.page.goto(console_server.url + f"/tunes/{result.tune_id}")
    expect(anonymous.page).to_have_url(f"{console_server.url}/login?next=/tunes/{result.tune_id}")
    anonymous.context.close()
