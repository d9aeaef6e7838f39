"""What every console page must do in the browser, whatever its content: fit the width, label its
inputs, be reachable by keyboard, offer no control its user's role may not use. Also the
screenshots kept in ``docs/console/``.

``MODELYARD_CONSOLE_SCREENSHOTS=docs/console`` makes the tests write one PNG per page and width
(``<name>-1280.png``, ``<name>-390.png``); without it nothing is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Locator, Page
from starlette.routing import compile_path

from modelyard.server.policy import ROUTE_ACCESS
from modelyard.services.roles import Role, may

SCREENSHOTS_VARIABLE = "MODELYARD_CONSOLE_SCREENSHOTS"
CONTROLS = ", ".join(
    f"main {kind}"
    for kind in ("a[href]", "button", "input", "select", "textarea", "summary", '[tabindex="0"]')
)


def wait_loaded(page: Page) -> None:
    """The page's scripts have filled it: no 'Loading…' placeholder is left."""
    page.wait_for_load_state("domcontentloaded")
    page.wait_for_function("() => !document.body.innerText.includes('Loading…')")


def horizontal_overflow_px(page: Page) -> int:
    overflow: int = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    return overflow


def unlabelled_fields(page: Page) -> list[str]:
    """Visible inputs, selects and text areas without a label (or aria-label)."""
    names: list[str] = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea')]
            .filter((field) => field.type !== 'hidden' && field.offsetParent !== null)
            .filter((field) => !(field.labels && field.labels.length) && !field.getAttribute('aria-label'))
            .map((field) => field.outerHTML.slice(0, 120))"""
    )
    return names


def unreachable_by_keyboard(page: Page, maximum_steps: int = 250) -> list[str]:
    """Press Tab through the page; the visible, enabled controls of <main> that focus never reached."""
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    page.evaluate(
        """(selector) => document.querySelectorAll(selector)
            .forEach((element, index) => element.dataset.tabProbe = index)""",
        CONTROLS,
    )
    reached: set[str] = set()
    for _ in range(maximum_steps):
        page.keyboard.press("Tab")
        probe = page.evaluate("() => document.activeElement?.dataset.tabProbe ?? ''")
        if probe:
            if probe in reached:
                break
            reached.add(probe)
    missing: list[str] = page.evaluate(
        """(reached) => [...document.querySelectorAll('[data-tab-probe]')]
            .filter((element) => element.offsetParent !== null && !element.disabled)
            .filter((element) => !element.closest('details:not([open])') || element.tagName === 'SUMMARY')
            .filter((element) => !reached.includes(element.dataset.tabProbe))
            .map((element) => element.outerHTML.slice(0, 120))""",
        sorted(reached),
    )
    return missing


def screenshot(page: Page, name: str, top: Locator | None = None) -> None:
    """The window as it is (or scrolled so that ``top`` is at its top edge)."""
    folder = os.environ.get(SCREENSHOTS_VARIABLE)
    if not folder:
        return
    if top is not None:
        top.evaluate("(element) => element.scrollIntoView({block: 'start'})")
    width = page.viewport_size["width"] if page.viewport_size else 0
    target = Path(folder) / f"{name}-{width}.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target), full_page=False)


# Every GET route of the role table as a pattern, to find what a link leads to.
_GET_ROUTES = [
    (compile_path(route.partition(" ")[2])[0], route) for route in ROUTE_ACCESS if route.startswith("GET ")
]


def refused_routes(role: Role, path: str) -> list[str]:
    """The GET routes that ``path`` (no query) matches and ``role`` may not open; [] when it may."""
    return [
        route for pattern, route in _GET_ROUTES if pattern.match(path) and not may(role, ROUTE_ACCESS[route])
    ]


def controls_out_of_role(page: Page, role: Role) -> list[str]:
    """The page's controls that a user of ``role`` may not use, or that do not say what they call.

    Every button of <main> (shown or not) must name the route it calls in ``data-route``, as
    ``modelyard.server.policy.ROUTE_ACCESS`` spells it, or ``local`` (it calls none), and the
    role must be allowed that route; every link of <main> must lead to a page or route the role
    may open (the strictest route its path matches, as /deployments/new matches two).
    """
    found: dict[str, list[list[str]]] = page.evaluate(
        """() => ({
            // A chart's own tool bar (plotly.js: zoom, pan, save as PNG) acts on the chart only.
            buttons: [...document.querySelectorAll('main button, main input[type=submit]')]
              .filter((element) => !element.closest('.js-plotly-plot'))
              .map((element) => [element.dataset.route ?? '', element.outerHTML.slice(0, 120)]),
            links: [...document.querySelectorAll('main a[href]')]
              .filter((link) => new URL(link.href).origin === location.origin)
              .map((link) => [new URL(link.href).pathname, link.outerHTML.slice(0, 120)]),
        })"""
    )
    problems: list[str] = []
    for route, html in found["buttons"]:
        if route == "local":
            continue
        if not route:
            problems.append(f"a control names no route (data-route): {html}")
        elif route not in ROUTE_ACCESS:
            problems.append(f"a control names {route!r}, which is not in ROUTE_ACCESS: {html}")
        elif not may(role, ROUTE_ACCESS[route]):
            problems.append(
                f"role {role.value} is offered {route} ({ROUTE_ACCESS[route].value} only): {html}"
            )
    for path, html in found["links"]:
        refused = refused_routes(role, path)
        if refused:
            problems.append(
                f"role {role.value} is offered a link to {path} ({refused[0]} is refused): {html}"
            )
    return problems
