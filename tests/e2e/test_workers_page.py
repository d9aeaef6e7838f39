"""The console's workers page: each host with its state, what its Docker can do and its engine
port range, as ``GET /api/v1/workers`` gives them (one host here: the server's own, ``local``)."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from .conftest import WIDE, ConsoleServer, new_console
from .pages import wait_loaded


def test_the_workers_page_shows_this_hosts_docker_and_engine_ports(
    browser: Browser, console_server: ConsoleServer
) -> None:
    [listed] = console_server.api.get("/api/v1/workers").json()["workers"]
    # This machine's dockerd (when it runs) has no NVIDIA runtime: there is no GPU here.
    expected = "ready, no GPU runtime" if console_server.docker_problem is None else "unreachable"
    if listed["docker"]["engine"] == "not-installed":
        expected = "not installed"
    console = new_console(browser, console_server, WIDE, signed_in=True)
    page = console.page
    page.goto(console_server.url + "/workers")
    expect(page.get_by_role("heading", level=1)).to_have_text("Workers")
    wait_loaded(page)
    row = page.get_by_role("row").filter(has_text="local")
    expect(row).to_contain_text(expected)
    expect(row).to_contain_text("any")  # no --engine-ports: any free port
    expect(row.get_by_text("ready", exact=True)).to_be_visible()
    expect(page.locator("#cluster-line")).to_have_text("One host (no cluster)")
    console.context.close()
    assert not console.watch.problems, "\n".join(console.watch.problems)
