"""A widget box's plain-text view: what a frontend without live widgets shows in its place.

Outside a running JupyterLab (a saved notebook opened elsewhere, nbconvert, a terminal, the
feedback HTML) an ``ipywidgets`` box shows as its ``repr``, ``VBox(children=(...))``. ``with_text``
makes its ``text/plain`` form the box's current state in words instead; a live frontend still gets
the widget (the widget view in the same bundle comes first). ``html_text`` strips the tags of an
``HTML`` widget's value for that text, turning line breaks and block ends into newlines.
"""
from __future__ import annotations

import html
import re
from typing import Callable


_BREAKS = re.compile(r"<br\s*/?>|</(?:p|div|li|tr|h[1-6])\s*>", re.IGNORECASE)


def html_text(value: str) -> str:
    """The text of an HTML snippet: ``<br>`` and the ends of blocks (``</p>``, ``</div>``, ``</li>``,
    ``</tr>``, headings) become newlines, other tags are removed, entities decoded; no newline at
    either end."""
    return html.unescape(re.sub(r"<[^>]+>", "", _BREAKS.sub("\n", value))).strip("\n")


def with_text(box, text: Callable[[], str]):
    """``box`` with ``text()`` (called each time it is shown) as its plain-text form. Returns ``box``."""
    widget_bundle = box._repr_mimebundle_

    def bundle(**kwargs):
        data = widget_bundle(**kwargs)
        data["text/plain"] = text()
        return data

    box._repr_mimebundle_ = bundle  # an instance attribute, as ipywidgets itself sets it on close
    return box
