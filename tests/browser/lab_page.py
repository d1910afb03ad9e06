"""Driving one notebook in JupyterLab through the page, and the checks the browser test makes.

Everything here goes through what a learner sees and clicks: the Run menu, the rendered widget
controls (slider handles, drop-downs, buttons), the nbgrader toolbar button and menu. Each check
raises ``AssertionError`` with a message that says what to look at; ``tests/browser`` runs them
on every notebook of the course and, as negative controls, on tiny notebooks built to fail them.

Limits: a widget is exercised by changing one control at a time until its Output area changes
(text or image); a widget whose output legitimately ignores all its controls would fail. The
notebook model is read back from the file JupyterLab saves, so the checks see the outputs the
kernel sent, whatever the page made of them.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# A widget view's output element is the widget renderer itself: unlike every other renderer it
# has no data-mime-type attribute. Only top-level outputs of cells count (not those inside an
# Output widget).
WIDGET_VIEW = ".jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output:not([data-mime-type])"
STDERR = "application/vnd.jupyter.stderr"
IMAGE = '.jp-OutputArea-output[data-mime-type="image/png"] img'
# What a widget view shows when it cannot render (@jupyter-widgets/jupyterlab-manager).
WIDGET_FAILURES = ("Error displaying widget", "Loading widget...", "model not found")


@dataclass
class NotebookRun:
    """What one Run All left: the saved notebook and what the page showed."""
    path: str
    seconds: float
    nb: dict
    rendered_images: int
    widget_views: int
    notes: list[str] = field(default_factory=list)

    def outputs(self):
        for cell in self.nb["cells"]:
            if cell["cell_type"] == "code":
                yield from cell.get("outputs", [])

    def errors(self) -> list[str]:
        return [f"{o['ename']}: {o['evalue']}"[:300] for o in self.outputs()
                if o["output_type"] == "error"]

    def saved_images(self) -> int:
        return sum("image/png" in o.get("data", {}) for o in self.outputs())

    def saved_widget_views(self) -> int:
        return sum(WIDGET_MIME in o.get("data", {}) for o in self.outputs())

    def slow_cells(self, seconds: float = 3.0) -> list[str]:
        """Code cells that ran longer than ``seconds`` (JupyterLab's recorded timing), each with
        whether it drew a tqdm bar (to stderr) and its first line."""
        from autograder.bench import cell_seconds
        slow = []
        for i, cell in enumerate(self.nb["cells"]):
            when = cell_seconds(cell)
            if when is None:
                continue
            took = when[1] - when[0]
            if took > seconds:
                bar = any(o["output_type"] == "stream" and o["name"] == "stderr"
                          and ("it/s" in o["text"] or "s/it" in o["text"]) for o in cell.get("outputs", []))
                first = cell["source"].strip().splitlines()[0][:70]
                slow.append(f"cell {i} {took:.0f} s {'with' if bar else 'WITHOUT'} a bar: {first}")
        return slow

    def unexecuted(self) -> int:
        return sum(1 for c in self.nb["cells"]
                   if c["cell_type"] == "code" and c["source"].strip()
                   and c.get("execution_count") is None)


def status_text(page) -> str:
    return page.locator("#jp-main-statusbar").inner_text(timeout=5000)


def wait_idle(page, timeout_s: float, kernel_display: str = "") -> None:
    """Until the kernel status in the status bar reads '| Idle' (after ``kernel_display``, the
    kernel's name, when one is given: both in the same item at the same moment)."""
    page.locator("#jp-main-statusbar").get_by_text(
        re.compile(re.escape(kernel_display) + r"\s*\|\s*Idle")).wait_for(timeout=timeout_s * 1000)


def open_notebook(page, lab, relpath: str, workspace: str, kernel_display: str) -> None:
    """Open ``relpath`` and wait until its kernel is idle: in the JupyterLab the page has loaded
    already (JupyterLab's own ``docmanager:open`` command, what its file browser runs, through
    ``window.jupyterapp``, which the test server exposes), or else by loading JupyterLab in a fresh
    workspace with the notebook open. Either way the notebook must be the only document open.

    FIELD_NOTES.md: "Run All Cells" clicked before the status bar reads "| Idle" runs only the
    first cell, silently. So this waits for the status bar to read this notebook's kernel and Idle
    together."""
    if page.url.startswith(lab.base + "/") and page.evaluate("() => Boolean(window.jupyterapp)"):
        # the command resolves to the panel, which is made current (JupyterLab may have put a
        # Launcher in the emptied main area); nothing is returned (the panel would be serialized
        # back), and a command that never finishes fails in 60 s, as a page load would
        page.evaluate("""async ([path, ms]) => {
            const app = window.jupyterapp;
            let timer;
            const late = new Promise((_, fail) => {
                timer = setTimeout(() => fail(new Error(`docmanager:open ${path}: nothing in ${ms} ms`)), ms);
            });
            try {
                const panel = await Promise.race([app.commands.execute('docmanager:open', {path}), late]);
                if (panel && panel.id) app.shell.activateById(panel.id);
            } finally {
                clearTimeout(timer);
            }
        }""", [relpath, 60_000])
    else:
        page.goto(lab.url(f"/lab/workspaces/{workspace}/tree/{relpath}"))
    # the notebook in view: a document left open by an earlier test would be first, but hidden
    page.locator(".jp-NotebookPanel .jp-Notebook >> visible=true").first.wait_for(timeout=60_000)
    documents = page.evaluate("() => Array.from(window.jupyterapp.shell.widgets('main'))"
                              ".filter(w => w.context).map(w => w.context.path)")
    assert documents == [relpath], f"{relpath} should be the only document open; open: {documents}"
    try:
        wait_idle(page, 90, kernel_display)
    except Exception as err:  # noqa: BLE001 - timeout or more than one match: say what the bar showed
        raise AssertionError(
            f"{relpath} did not start on the course kernel {kernel_display!r}: in 90 s the status bar "
            f"never read {kernel_display + ' | Idle'!r}; it reads now: {status_text(page)!r}") from err
    # (not read a second time: a moment after its first Idle the bar can read Busy again, and a
    # fresh-clone run failed on a second read that demanded Idle)


def close_documents(page) -> bool:
    """Close every document of the main area without asking to save (what a test saved is on
    disk; the rest is thrown away). JupyterLab then opens a Launcher in the empty main area, which
    ``open_notebook`` leaves behind the notebook it opens. False when that cannot be done: no
    JupyterLab in the page, a dialog still open, or a document left after closing."""
    try:
        if page.is_closed() or page.locator(".jp-Dialog").count():
            return False
        return page.evaluate("""() => {
            const app = window.jupyterapp;
            if (!app) return false;
            for (const w of Array.from(app.shell.widgets('main'))) w.dispose();
            return Array.from(app.shell.widgets('main')).length === 0;
        }""")
    except Exception:  # noqa: BLE001 - a tab that cannot say is replaced
        return False


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(top)}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click()


def _busy_cells(page) -> int:
    return page.locator(".jp-Notebook .jp-InputPrompt", has_text="[*]").count()


def run_all(page, timeout_s: float) -> float:
    """Run > Run All Cells, then wait until no cell is queued or running and the kernel is idle
    (for a second in a row). Returns the seconds it took."""
    t0 = time.monotonic()
    menu(page, "Run", "Run All Cells")
    # Queued cells show [*] at once; give the page a moment to mark them.
    started = time.monotonic()
    while _busy_cells(page) == 0 and time.monotonic() - started < 5:
        page.wait_for_timeout(100)
    calm_since = None
    while True:
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"Run All did not finish in {timeout_s:.0f} s "
                                 f"({_busy_cells(page)} cells still queued or running)")
        quiet = _busy_cells(page) == 0 and re.search(r"\|\s*Idle", status_text(page))
        if quiet:
            calm_since = calm_since or time.monotonic()
            if time.monotonic() - calm_since >= 1.0:
                return time.monotonic() - t0
        else:
            calm_since = None
        page.wait_for_timeout(250)


def save_and_read(page, lab, relpath: str) -> dict:
    """File > Save Notebook, wait until the file on disk changes, return it (nbformat 4)."""
    data = _save(page, Path(lab.root) / relpath, relpath)
    return nbformat.reads(data.decode("utf-8"), as_version=4)


def count_rendered_images(page) -> int:
    """Images in output areas that the browser decoded (naturalWidth > 0)."""
    return page.locator(IMAGE).evaluate_all(
        "els => els.filter(e => e.complete && e.naturalWidth > 0).length")


def _difference(before: bytes, after: bytes) -> str:
    """Where two versions of a notebook file differ: metadata keys, cells, other fields, first line."""
    old, new = json.loads(before), json.loads(after)
    keys = sorted(k for k in set(old["metadata"]) | set(new["metadata"])
                  if old["metadata"].get(k) != new["metadata"].get(k))
    cells = [i for i, (x, y) in enumerate(zip(old["cells"], new["cells"])) if x != y]
    lines = [(i, a, b) for i, (a, b) in enumerate(zip(before.decode().splitlines(),
                                                      after.decode().splitlines())) if a != b]
    others = sorted(k for k in set(old) | set(new)
                    if k not in ("metadata", "cells") and old.get(k) != new.get(k))
    return (f"notebook metadata changed: {keys}; cells changed: {cells[:10]}; other fields: "
            f"{others}; first differing line: {lines[:1]}")


def check_open_save_unchanged(page, lab, relpath: str, before: bytes) -> None:
    """File > Save Notebook on a notebook just opened (nothing run): the file must be byte for byte
    ``before``, what it was before JupyterLab opened it.

    JupyterLab saves a notebook it opened as soon as it counts as changed (autosave), and it counts
    as changed when the kernel reports ``language_info``: the file gained that metadata, git showed
    every opened solution as modified, and tests/test_release.py failed ("out of date, cells
    differing: []"). The server runs with the course's pre-save hook
    (``autograder.execute_notebooks.lab_pre_save``), as ``make lab`` and ``make lab-instructor`` do;
    this save does now what autosave does later."""
    path = Path(lab.root) / relpath
    after = _save(page, path, relpath)
    assert after == before, (f"opening and saving {relpath} in JupyterLab changed it: "
                             f"{_difference(before, after)}")


def _save(page, path: Path, relpath: str) -> bytes:
    """File > Save Notebook; wait until the server has written the file; its bytes.

    jupyter_server writes in place (``atomic_writing``): it first copies the file to ``.~<name>``
    beside it, then truncates and writes the file (its mtime changes as the write begins), and
    removes the copy once the write is synced. So the file is whole when its mtime has changed and
    the copy is gone."""
    mtime = path.stat().st_mtime_ns
    backup = path.with_name(f".~{path.name}")
    menu(page, "File", "Save Notebook")
    deadline = time.monotonic() + 30
    while path.stat().st_mtime_ns == mtime or backup.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"File > Save Notebook did not write {relpath} in 30 s")
        page.wait_for_timeout(100)
    return path.read_bytes()


def run_notebook(page, lab, relpath: str, workspace: str, kernel_display: str,
                 timeout_s: float = 300, opened_unchanged: bool = True) -> NotebookRun:
    """Open ``relpath``, check that saving it as opened, before anything runs, leaves its file
    byte for byte as it was (``check_open_save_unchanged``; ``opened_unchanged=False`` skips it),
    then Run All, save and read it back."""
    before = (Path(lab.root) / relpath).read_bytes()
    open_notebook(page, lab, relpath, workspace, kernel_display)
    if opened_unchanged:
        check_open_save_unchanged(page, lab, relpath, before)
    seconds = run_all(page, timeout_s)
    nb = save_and_read(page, lab, relpath)
    return NotebookRun(path=relpath, seconds=seconds, nb=nb,
                       rendered_images=count_rendered_images(page),
                       widget_views=page.locator(WIDGET_VIEW).count())


# ---------------------------------------------------------------- checks

def check_no_errors(run: NotebookRun) -> None:
    errors = run.errors()
    assert not errors, f"{run.path}: cells ended with errors in JupyterLab: {errors}"
    assert run.unexecuted() == 0, (
        f"{run.path}: {run.unexecuted()} code cells never ran after Run All Cells")


def check_only_not_implemented(run: NotebookRun) -> None:
    """An untouched student notebook stops at a NotImplementedError and at nothing else."""
    errors = run.errors()
    assert errors, (f"{run.path}: Run All Cells raised nothing; an untouched release should "
                    "stop at the first exercise with NotImplementedError")
    wrong = [e for e in errors if not e.startswith("NotImplementedError")]
    assert not wrong, f"{run.path}: errors other than NotImplementedError: {wrong}"


def check_plots(run: NotebookRun, at_least: int) -> None:
    saved = run.saved_images()
    assert saved >= at_least, (
        f"{run.path}: {saved} image outputs after Run All, expected at least {at_least}")
    assert run.rendered_images >= saved, (
        f"{run.path}: the kernel sent {saved} images but the page shows {run.rendered_images} "
        "decoded <img> elements in output areas")


def check_widget_shown(run: NotebookRun) -> None:
    """A notebook whose code imports ipywidgets shows at least one widget after Run All."""
    uses = any(c["cell_type"] == "code" and "ipywidgets" in c["source"] for c in run.nb["cells"])
    assert not uses or run.widget_views, (
        f"{run.path} imports ipywidgets but no widget view appeared after Run All "
        "(did the widget cell stop displaying its widget?)")


def check_widgets_render(page, run: NotebookRun) -> None:
    """Every widget view the kernel sent is on the page as a live widget, not an error."""
    sent = run.saved_widget_views()
    assert run.widget_views == sent, (
        f"{run.path}: the kernel sent {sent} widget views, the page has {run.widget_views}")
    views = page.locator(WIDGET_VIEW)
    for i in range(views.count()):
        view = views.nth(i)
        text = view.inner_text()
        bad = [f for f in WIDGET_FAILURES if f in text]
        assert not bad, f"{run.path}: widget view {i} did not render: {text[:300]!r}"
        assert view.locator(".jupyter-widgets").count() > 0, (
            f"{run.path}: widget view {i} holds no rendered widget: {text[:300]!r}")


def _output_areas(view):
    """The widget Output areas that a change of ``view``'s controls should update: those inside
    the same cell's outputs, else every widget Output area of the notebook."""
    cell = view.locator("xpath=ancestor::div[contains(@class, 'jp-Cell')][1]")
    inside = cell.locator(".widget-output")
    return inside if inside.count() else view.page.locator(".jp-Notebook .widget-output")


def _fingerprint(outputs) -> str:
    parts = outputs.evaluate_all(
        "els => els.map(e => e.innerText + '|' + "
        "Array.from(e.querySelectorAll('img')).map(i => i.src).join(','))")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def _changes(view):
    """(description, action) for each control of the view a learner could change."""
    page = view.page
    for i in range(view.locator(".widget-slider .noUi-handle").count()):
        handle = view.locator(".widget-slider .noUi-handle").nth(i)
        # Towards the side with more room first: a slider may start at either end.
        now, low, high = (float(handle.get_attribute(a) or 0)
                          for a in ("aria-valuenow", "aria-valuemin", "aria-valuemax"))
        sides = [("right", 1), ("left", -1)] if high - now >= now - low else [("left", -1), ("right", 1)]
        for side, sign in sides:
            def drag(handle=handle, sign=sign):
                box = handle.bounding_box()
                x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
                page.mouse.move(x, y)
                page.mouse.down()
                page.mouse.move(x + sign * 60, y, steps=6)
                page.mouse.up()
            yield f"drag slider {i} {side}", drag
        for side, sign in sides:
            def keys(handle=handle, sign=sign):
                handle.focus()
                for _ in range(3):
                    page.keyboard.press("ArrowRight" if sign > 0 else "ArrowLeft")
            yield f"arrow keys on slider {i} ({side})", keys
    for i in range(view.locator(".widget-dropdown select, .widget-select select").count()):
        select = view.locator(".widget-dropdown select, .widget-select select").nth(i)

        def choose(select=select):
            values = select.locator("option").evaluate_all("os => os.map(o => o.value)")
            current = select.input_value()
            other = next(v for v in reversed(values) if v != current)
            select.select_option(other)
        yield f"choose another option in drop-down {i}", choose
    for i in range(view.locator("button.jupyter-button, .widget-toggle-button").count()):
        button = view.locator("button.jupyter-button, .widget-toggle-button").nth(i)
        yield f"click button {i} ({button.inner_text()!r})", button.click
    for i in range(view.locator(".widget-checkbox input[type=checkbox]").count()):
        yield f"tick checkbox {i}", view.locator(".widget-checkbox input[type=checkbox]").nth(i).click


def check_widgets_respond(page, run: NotebookRun, wait_s: float = 20) -> list[str]:
    """For each widget view: change its controls through the page, one at a time, until its
    Output area's text or image changes. Returns one line per widget saying what worked."""
    lines = []
    views = page.locator(WIDGET_VIEW)
    for i in range(views.count()):
        view = views.nth(i)
        view.scroll_into_view_if_needed()
        outputs = _output_areas(view)
        assert outputs.count(), (f"{run.path}: widget view {i} has no widget Output area "
                                 "(.widget-output) whose change could be seen")
        tried = []
        for what, action in _changes(view):
            wait_idle(page, 120)
            before = _fingerprint(outputs)
            action()
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and _fingerprint(outputs) == before:
                page.wait_for_timeout(200)
            if _fingerprint(outputs) != before:
                errors = outputs.locator(f'[data-mime-type="{STDERR}"]').all_inner_texts()
                errors = [e for e in errors if "Traceback" in e or re.search(r"\b\w+Error\b", e)]
                assert not errors, (f"{run.path}: widget view {i}: after '{what}' its Output area "
                                    f"shows an error: {errors[0][-800:]}")
                lines.append(f"widget {i}: {what} changed its output")
                break
            tried.append(what)
        else:
            raise AssertionError(
                f"{run.path}: widget view {i} did not respond: its Output area stayed the same "
                f"after each of {tried or ['(no slider, drop-down, button or checkbox found)']}")
        wait_idle(page, 120)
    return lines


def screenshot_at(page, locator, path: Path) -> None:
    """A screenshot of the page with ``locator`` (if any) scrolled into view."""
    if locator is not None and locator.count():
        locator.first.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
    page.screenshot(path=str(path))


# ---------------------------------------------------------------- nbgrader views

def validate(page, timeout_s: float = 300) -> tuple[str, str]:
    """Click the notebook toolbar's Validate button; return (result class, dialog text)."""
    page.locator(".validate-button").first.click()
    message = page.locator(".jp-Dialog #validation-message")
    message.wait_for(timeout=timeout_s * 1000)
    kind = next((k for k in ("validation-success", "validation-failed", "validation-changed",
                             "validation-type-changed")
                 if k in (message.get_attribute("class") or "")), "error")
    return kind, message.inner_text()


def close_dialog(page) -> None:
    page.locator(".jp-Dialog .jp-mod-accept").click()
    page.locator(".jp-Dialog").wait_for(state="detached", timeout=10_000)


def open_assignment_list(page, timeout_s: float = 60) -> str:
    """Nbgrader > Assignment List; wait until its three lists have loaded. Returns its text."""
    menu(page, "Nbgrader", "Assignment List")
    panel = page.locator("#nbgrader-assignment-list")
    panel.wait_for(timeout=timeout_s * 1000)
    loading = ["#released_assignments_list_loading", "#fetched_assignments_list_loading",
               "#submitted_assignments_list_loading"]
    deadline = time.monotonic() + timeout_s
    while any(panel.locator(sel).is_visible() for sel in loading):
        if time.monotonic() > deadline:
            raise AssertionError("nbgrader's Assignments view was still loading after "
                                 f"{timeout_s:.0f} s: {panel.inner_text()[:500]!r}")
        page.wait_for_timeout(250)
    return panel.inner_text()
