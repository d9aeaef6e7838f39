"""What every console page must do in the browser, whatever its content: fit the width, label its
inputs, be reachable by keyboard. Also the screenshots kept in ``docs/console/``.

``MODELYARD_CONSOLE_SCREENSHOTS=docs/console`` makes the tests write one PNG per page and width
(``<name>-1280.png``, ``<name>-390.png``); without it nothing is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Locator, Page

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
