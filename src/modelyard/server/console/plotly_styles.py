"""plotly.js's own CSS as a stylesheet, so that console pages with plotly charts keep their
Content-Security-Policy (``style-src 'self'``: no inline ``<style>``).

plotly.js adds its rules to a ``<style id="plotly.js-style-global">`` it makes itself, unless
the page already has an element of that id with the class ``no-inline-styles``; it makes
another ``<style>`` for maplibre (map traces) unless an element of its id exists. A page that
charts with plotly puts those elements in (``PLOTLY_STYLE_IDS``, each with class
``no-inline-styles``) and links ``/console/vendor/plotly.css``: the rules plotly would have
inserted, read from the bundle it serves (``assets.PLOTLY_JS``), with its selector
substitutions (``X``: ``.js-plotly-plot .plotly``, ``Y``: ``.plotly-notifier``).

Usage::

    css = bundle_css(PLOTLY_JS)          # served as /console/vendor/plotly.css
    ids = bundle_style_ids(PLOTLY_JS)    # a charting page's placeholders
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

GLOBAL_STYLE_ID = "plotly.js-style-global"
# The rules object: {"X,X div":'direction:ltr;...', ..., "Y .notifier-close:hover":"..."}
_RULES = re.compile(r'=(\{"X,X div":.*?\});for\(')
_PAIR = re.compile(r'"((?:[^"\\]|\\.)*)":(\'(?:[^\'\\]|\\.)*\'|"(?:[^"\\]|\\.)*")')
# Other style elements the bundle makes unless an element with their id exists (maplibre's).
_GUARDED_STYLE = re.compile(
    r'if\(!document\.getElementById\("([0-9a-f]{64})"\)\)\{var \w=document\.createElement\("style"\)'
)


def _string(literal: str) -> str:
    body = literal[1:-1]
    if literal[0] == "'":
        body = body.replace('\\"', '"').replace('"', '\\"').replace("\\'", "'")
    decoded: str = json.loads(f'"{body}"')
    return decoded


def plotly_css(bundle: str) -> str:
    """The CSS rules plotly.js would insert inline, one per line; ``ValueError`` when the
    bundle has no rules object of the known shape (a plotly.js this code does not know)."""
    found = _RULES.search(bundle)
    if found is None:
        raise ValueError("plotly.min.js has no style rules object of the known shape")
    lines = []
    for key, value in _PAIR.findall(found.group(1)):
        selector = re.sub(r"^,", " ,", _string(f'"{key}"'))
        selector = selector.replace("X", ".js-plotly-plot .plotly").replace("Y", ".plotly-notifier")
        lines.append(f"{selector}{{{_string(value)}}}")
    return "\n".join(lines) + "\n"


def plotly_style_ids(bundle: str) -> list[str]:
    """The ids of the elements that keep plotly.js from making inline ``<style>`` elements."""
    return [GLOBAL_STYLE_ID, *_GUARDED_STYLE.findall(bundle)]


@functools.cache
def bundle_css(bundle_path: Path) -> str:
    """``plotly_css`` of the bundle at ``bundle_path``, read once per process."""
    return plotly_css(bundle_path.read_text(encoding="utf-8"))


@functools.cache
def bundle_style_ids(bundle_path: Path) -> tuple[str, ...]:
    """``plotly_style_ids`` of the bundle at ``bundle_path``, read once per process."""
    return tuple(plotly_style_ids(bundle_path.read_text(encoding="utf-8")))
