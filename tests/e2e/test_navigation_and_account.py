"""What every page's frame shows a new user: every section reachable on a phone's width (the
sections fold behind a Menu button, none hidden past the edge), and the account form stating the
password rule the server enforces."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from modelyard.server.console.templates import NAVIGATION
from modelyard.services.password_policy import MINIMUM_PASSWORD_LENGTH

from .conftest import NARROW, WIDE, Console, ConsoleServer, new_console
from .pages import screenshot

SECTIONS = [label for _, _, label in NAVIGATION] + ["API docs"]


def links_outside_the_window(page: Page) -> list[str]:
    """The navigation's links that are not wholly on screen (or not shown at all)."""
    outside: list[str] = page.evaluate(
        """() => [...document.querySelectorAll('nav[aria-label="Sections"] a')].filter((link) => {
            const box = link.getBoundingClientRect();
            const inside = box.width > 0 && box.height > 0 && box.left >= 0 && box.right <= window.innerWidth
              && box.top >= 0 && box.bottom <= window.innerHeight;
            const hidden = link.closest('ul').scrollWidth > link.closest('nav').clientWidth + 1;
            return !inside || hidden;
          }).map((link) => link.textContent.trim())"""
    )
    return outside


def test_every_section_is_one_tap_away_on_a_narrow_screen(
    browser: Browser, console_server: ConsoleServer
) -> None:
    narrow = new_console(browser, console_server, NARROW, signed_in=True)
    page = narrow.page
    menu = page.get_by_role("button", name="Menu")
    expect(menu).to_be_visible()
    expect(menu).to_have_attribute("aria-expanded", "false")
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    navigation = page.get_by_role("navigation", name="Sections")
    for label in SECTIONS:
        expect(navigation.get_by_role("link", name=label, exact=True)).to_be_visible()
    assert links_outside_the_window(page) == [], (
        f"at 390 px, sections off screen: {links_outside_the_window(page)}"
    )
    screenshot(page, "navigation-open")
    navigation.get_by_role("link", name="Usage", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Usage")
    expect(page.get_by_role("button", name="Menu")).to_have_attribute("aria-expanded", "false")
    narrow.context.close()
    assert not narrow.watch.problems, "\n".join(narrow.watch.problems)


def test_every_section_shows_in_the_bar_on_a_wide_screen(console: Console) -> None:
    page = console.open("/")
    expect(page.get_by_role("button", name="Menu")).to_be_hidden()
    assert links_outside_the_window(page) == []
    assert page.viewport_size == WIDE


def test_the_account_form_states_the_servers_password_length(console: Console) -> None:
    page = console.open("/account")
    expect(page.locator("#new_password")).to_have_attribute("minlength", str(MINIMUM_PASSWORD_LENGTH))
    expect(page.locator("label[for=new_password]")).to_contain_text(
        f"{MINIMUM_PASSWORD_LENGTH} characters or more"
    )
    expect(page.locator("#confirm_password")).to_have_attribute("minlength", str(MINIMUM_PASSWORD_LENGTH))
