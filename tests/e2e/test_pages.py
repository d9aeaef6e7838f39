"""Every console page at 1280 and 390 px: it loads with no browser error, fits the width, labels
its inputs and can be walked with the keyboard. Every page each role may open, as that role:
no control or link the role may not use (the server would refuse it). Screenshots for
docs/console/ (see pages.py)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from modelyard.estimate import parse_gpu_specs
from modelyard.services.roles import Role
from modelyard.tune.session import TuneRequest, run_tune
from modelyard.tune.slo import parse_slos
from modelyard.tune.space import EngineChoice, SearchSpace
from modelyard.tune.workloads import BUILTIN_WORKLOADS

from .conftest import NARROW, WIDE, ConsoleServer, PageWatch, new_console
from .pages import (
    controls_out_of_role,
    horizontal_overflow_px,
    refused_routes,
    screenshot,
    unlabelled_fields,
    unreachable_by_keyboard,
    wait_loaded,
)

# (screenshot name, path, a heading the page shows)
PAGES = [
    ("dashboard", "/", "Dashboard"),
    ("models", "/models", "Model files"),
    ("model", "/models/tiny-shared", "Model tiny-shared"),
    ("backends", "/backends", "Backends"),
    ("deployments", "/deployments", "Deployments"),
    ("deploy", "/deployments/new?model=tiny-shared", "New deployment"),
    ("deployment", "/deployments/chat", "Deployment chat"),
    ("workers", "/workers", "Workers"),
    ("playground", "/playground?deployment=chat", "Playground"),
    ("benchmarks", "/benchmarks", "Benchmarks"),
    ("keys", "/keys", "API keys"),
    ("usage", "/usage", "Usage"),
    ("tunes", "/tunes", "Tunes"),
    ("tune", "/tunes/{tune_id}", "Tune"),
    ("account", "/account", "Account"),
]


@pytest.fixture(scope="module")
def walked_tune(console_server: ConsoleServer) -> str:
    """A finished tune in the server's data directory, for its page: the real tune session with a
    DOUBLE deployer and measurer (no engine runs here)."""
    from .test_tune_pages import DeployerDouble, MeasurerDouble

    request = TuneRequest(
        model="tiny-shared",
        model_facts=None,
        gpus_text="1xH100",
        gpus=parse_gpu_specs("1xH100"),
        workload=BUILTIN_WORKLOADS["rag"],
        slos=parse_slos("ttft_p95<=800ms"),
        space=SearchSpace(
            engines=(EngineChoice("vllm", "vllm", "0.25.0"),),
            max_sequences=(None, 64),
            batched_tokens=(None,),
        ),
    )
    result = run_tune(
        request, console_server.data_dir, deployer_for=lambda _id: DeployerDouble(), measurer=MeasurerDouble()
    )
    return result.tune_id


@pytest.mark.parametrize("viewport", [WIDE, NARROW], ids=["1280", "390"])
def test_every_page_fits_is_labelled_and_keyboard_reachable(
    browser: Browser,
    console_server: ConsoleServer,
    double_deployment: str,
    walked_tune: str,
    viewport: dict[str, int],
) -> None:
    console = new_console(browser, console_server, viewport, signed_in=True)
    page = console.page
    problems: list[str] = []
    for name, path, heading in PAGES:
        path = path.format(tune_id=walked_tune)
        page.goto(console_server.url + path)
        expect(page.get_by_role("heading", level=1)).to_contain_text(heading)
        wait_loaded(page)
        if name == "deployment":
            expect(page.locator("#state")).to_have_text("running")
        overflow = horizontal_overflow_px(page)
        if overflow > 0:
            problems.append(f"{path} at {viewport['width']} px is {overflow} px wider than the window")
        problems += [f"{path}: unlabelled {field}" for field in unlabelled_fields(page)]
        screenshot(page, name)
        if viewport is WIDE:
            problems += [f"{path}: not reachable by Tab: {item}" for item in unreachable_by_keyboard(page)]
            problems += [f"{path}: {problem}" for problem in controls_out_of_role(page, Role.ADMIN)]
    console.context.close()
    assert not problems, "\n".join(problems)
    assert not console.watch.problems, "\n".join(console.watch.problems)


@pytest.mark.parametrize("viewport", [WIDE, NARROW], ids=["1280", "390"])
def test_sign_in_page_and_api_docs_work_offline(
    browser: Browser, console_server: ConsoleServer, viewport: dict[str, int]
) -> None:
    console = new_console(browser, console_server, viewport, signed_in=False)
    page = console.page
    page.goto(console_server.url + "/")
    expect(page).to_have_url(f"{console_server.url}/login?next=/")
    assert horizontal_overflow_px(page) <= 0
    assert not unlabelled_fields(page)
    screenshot(page, "login")
    # Swagger UI's files come from this server (the watch fails on any request elsewhere).
    page.goto(console_server.url + "/api/docs")
    expect(page.locator(".swagger-ui .opblock-summary-path").first).to_be_visible()
    expect(page.get_by_text("/api/v1/deployments/preflight").first).to_be_visible()
    screenshot(page, "api-docs")
    console.context.close()
    assert not console.watch.problems, "\n".join(console.watch.problems)


WALK_PASSWORD = "correct horse battery staple"


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.MEMBER], ids=["operator", "member"])
def test_every_page_a_role_opens_offers_only_what_the_role_may_use(
    browser: Browser,
    console_server: ConsoleServer,
    double_deployment: str,
    walked_tune: str,
    role: Role,
) -> None:
    """A member sees the deployment but no Scale, Stop, Start, Delete, limits form or "New
    deployment"; an operator sees those but not the registry credentials (admins only)."""
    username = f"walk-{role.value}"
    made = console_server.api.post(
        "/api/v1/users", json={"username": username, "password": WALK_PASSWORD, "role": role.value}
    )
    assert made.status_code in (201, 409), made.text
    joined = console_server.api.put(f"/api/v1/projects/default/members/{username}")
    assert joined.status_code == 200, joined.text
    context = browser.new_context(viewport=WIDE, base_url=console_server.url)  # type: ignore[arg-type]
    context.set_default_timeout(30_000)
    page = context.new_page()
    watch = PageWatch(origin=console_server.url)
    watch.attach(page)
    page.goto(f"{console_server.url}/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(WALK_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{console_server.url}/")
    walked: list[str] = []
    problems: list[str] = []
    for _name, path, heading in PAGES:
        path = path.format(tune_id=walked_tune)
        if refused_routes(role, path.partition("?")[0]):
            continue
        walked.append(path)
        page.goto(console_server.url + path)
        expect(page.get_by_role("heading", level=1)).to_contain_text(heading)
        wait_loaded(page)
        problems += [f"{path}: {problem}" for problem in controls_out_of_role(page, role)]
    if role is Role.MEMBER:
        assert walked == [
            "/",
            "/deployments",
            "/deployments/chat",
            "/playground?deployment=chat",
            "/keys",
            "/usage",
            "/account",
        ]
        page.goto(f"{console_server.url}/deployments/chat")
        expect(page.locator("#state")).to_have_text("running")
        expect(page.get_by_role("button", name="Scale", exact=True)).to_have_count(0)
        expect(page.get_by_role("link", name="Try in the playground")).to_be_visible()
        expect(page.locator("#limits-now")).to_contain_text("No limits")
    else:
        assert len(walked) == len(PAGES)
        page.goto(f"{console_server.url}/backends")
        wait_loaded(page)
        expect(page.get_by_role("heading", name="Registry credentials")).to_have_count(0)
    context.close()
    assert not problems, "\n".join(problems)
    assert not watch.problems, "\n".join(watch.problems)
