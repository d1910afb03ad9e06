"""The documentation site (``make docs``) in Chromium: every page of its navigation opens, nothing
is fetched from another host, the toolkit reference shows a function's docstring, and the search
finds it.

The site is built here with ``mkdocs build --strict`` (as ``make docs`` does) into a temporary
folder and served over loopback by Python's ``http.server``: the search runs in a web worker that
reads ``search/search_index.json``, which a ``file://`` page may not fetch. Each check is a function
of a page and the site's address; the negative controls run it on a copy of the built site with one
fault planted (a page deleted, a script from a CDN, the search index emptied).
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A function the reference documents: the search must list its section there.
SEARCHED = "update_report"
ANCHOR = "course.toolkit.checks.update_report"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A folder served over loopback by ``python -m http.server``; ``url(path)`` is its address."""

    def __init__(self, root: Path):
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1",
             "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url("index.html"), timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError("http.server did not answer in 30 s")
                time.sleep(0.2)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("docs-site") / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(dest)],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}{built.stderr}"
    return dest


@pytest.fixture(scope="module")
def site(built_site):
    served = Served(built_site)
    yield served
    served.close()


@pytest.fixture
def tab(browser):
    page = browser.new_page()
    page.set_default_timeout(15_000)
    yield page
    page.close()


def navigation_problems(page, base: str) -> list[str]:
    """Open the home page, then every page its navigation bar links; what went wrong, if anything.

    A page fails when it does not load with status 200, has no ``<h1>``, raises a script error, or
    makes the browser request anything outside ``base`` (the site must work offline)."""
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("request", lambda r: None if r.url.startswith((base, "data:")) else
            problems.append(f"fetched from elsewhere: {r.url}"))
    first = page.goto(base + "index.html")
    if first is None or first.status != 200:
        return [f"index.html: status {first and first.status}"]
    # The navigation bar and previous/next: links with an address that is not an anchor of this page.
    links = sorted(set(page.eval_on_selector_all(
        "a.nav-link[href]:not([href^='#'])", "els => els.map(e => e.href)")))
    if len(links) < 2:
        problems.append(f"the navigation bar has {len(links)} links")
    for url in links:
        answer = page.goto(url)
        if answer is None or answer.status != 200:
            problems.append(f"{url}: status {answer and answer.status}")
        elif page.locator("h1").count() == 0:
            problems.append(f"{url}: no heading")
    return problems


def reference_shows(page, base: str) -> str:
    """The text of the reference's section on ``ANCHOR``, as the browser renders it."""
    page.goto(base + f"reference/toolkit.html#{ANCHOR}")
    heading = page.locator(f'[id="{ANCHOR}"]')
    heading.wait_for(state="visible")
    return heading.locator("xpath=..").inner_text()


def search_hits(page, base: str, term: str) -> list[str]:
    """The result links the site's search lists for ``term`` (empty when it finds nothing).

    The search's worker builds its index after the page loads and says so on the console; a query
    typed before then gets no answer, so the term is typed once the index is ready."""
    with page.expect_console_message(lambda m: "search ready" in m.text, timeout=20_000):
        page.goto(base + "index.html")
    page.locator('[data-bs-target="#mkdocs_search_modal"]').first.click()
    box = page.locator("#mkdocs-search-query")
    box.wait_for(state="visible")
    box.press_sequentially(term)  # the search runs on keyup, which fill() does not send
    results = page.locator("#mkdocs-search-results")
    try:
        results.locator("a").first.wait_for(state="attached", timeout=10_000)
    except Exception:  # playwright's TimeoutError: nothing listed
        return []
    return results.locator("a").evaluate_all("els => els.map(e => e.href)")


def test_every_page_of_the_navigation_opens_and_works_offline(tab, site):
    assert navigation_problems(tab, site.url()) == []


def test_the_reference_shows_a_function_with_its_signature_and_docstring(tab, site):
    text = reference_shows(tab, site.url())
    assert "update_report(" in text, "the section shows no signature"
    assert "expect_frozen" in text and "step()" in text, "the section shows no docstring"


def test_the_search_finds_a_function_of_the_reference(tab, site):
    hits = search_hits(tab, site.url(), SEARCHED)
    assert any(h.startswith(site.url("reference/toolkit.html")) for h in hits), hits


# ----- negative controls: a planted fault in a copy of the built site is caught -------------------
@pytest.fixture
def broken_copy(built_site, tmp_path):
    """A copy of the built site, served once ``plant(copy)`` has broken it."""
    copy = tmp_path / "site"
    shutil.copytree(built_site, copy)
    served = []

    def serve(plant):
        plant(copy)
        served.append(Served(copy))
        return served[-1]
    yield serve
    for s in served:
        s.close()


def _delete_reference(root: Path) -> None:
    (root / "reference" / "toolkit.html").unlink()


def _script_from_a_cdn(root: Path) -> None:
    page = root / "learners.html"
    page.write_text(page.read_text().replace(
        "</head>", '<script src="https://cdn.example.invalid/x.js"></script></head>', 1))


def _empty_search_index(root: Path) -> None:
    index = root / "search" / "search_index.json"
    data = json.loads(index.read_text())
    data["docs"] = []
    index.write_text(json.dumps(data))


@pytest.mark.parametrize("plant, expected", [(_delete_reference, "status 404"),
                                             (_script_from_a_cdn, "cdn.example.invalid")])
def test_a_broken_navigation_is_caught(tab, broken_copy, plant, expected):
    served = broken_copy(plant)
    problems = navigation_problems(tab, served.url())
    assert any(expected in p for p in problems), problems


def test_a_search_that_finds_nothing_is_caught(tab, broken_copy):
    served = broken_copy(_empty_search_index)
    assert search_hits(tab, served.url(), SEARCHED) == []
