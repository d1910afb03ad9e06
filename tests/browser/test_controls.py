"""Negative controls of the browser checks: each check must pass on a healthy tiny notebook and
fail on one built to break exactly what it checks. Without these, a check that can never fail
(a selector that matches nothing, a wait that always times out "successfully") would look green.

The notebooks are written here, a few cells each, with no torch: a few seconds per notebook.
"""
from __future__ import annotations

import nbformat
import pytest

import lab_page as lp

KERNEL_DISPLAY = "Python 3 (debug course)"
WAIT_S = 3  # the tiny callbacks answer in well under a second

SETUP = "import ipywidgets as widgets\nimport matplotlib.pyplot as plt"
PLOT = 'plt.plot([0, 1], [0, 1])\nplt.title("a line")\nplt.show()'
HEALTHY_WIDGET = ('_ = widgets.interact(lambda n: print(f"n = {n}"), '
                  'n=widgets.IntSlider(value=5, min=0, max=10))')
NOTEBOOKS = {
    "healthy": [SETUP, PLOT, HEALTHY_WIDGET],
    # The widget cell builds its widget but no longer displays it.
    "widget_not_shown": [SETUP, PLOT, "slider = widgets.IntSlider(value=5)"],
    # A widget view whose model the kernel never created: the page cannot render it.
    "widget_not_rendered": [SETUP, PLOT, (
        "from IPython.display import display\n"
        "display({'application/vnd.jupyter.widget-view+json': {'model_id': '0' * 32,"
        " 'version_major': 2, 'version_minor': 0}, 'text/plain': 'a widget'}, raw=True)")],
    # The slider is shown but nothing observes it: its Output area never changes.
    "widget_not_responding": [SETUP, PLOT, (
        "out = widgets.Output()\nwith out:\n    print('fixed text')\n"
        "widgets.VBox([widgets.IntSlider(value=5), out])")],
    # The callback raises once the value changes: the output changes, to a traceback.
    "widget_callback_error": [SETUP, PLOT, (
        "def show(n):\n    if n != 5:\n        raise RuntimeError('callback broken')\n"
        "    print(f'n = {n}')\n\n"
        "_ = widgets.interact(show, n=widgets.IntSlider(value=5, min=0, max=10))")],
    # A cell of a solution errors: the cells after it never run.
    "cell_error": [SETUP, PLOT, "raise ValueError('a solution cell broke')", HEALTHY_WIDGET],
    # Healthy cells, but the file names the course kernel under an old display name: JupyterLab
    # writes the kernel's own into the metadata when it opens it, so saving it as opened changes it.
    "changed_on_open": [SETUP, PLOT, HEALTHY_WIDGET],
}
DISPLAY_NAMES = {"changed_on_open": "Python 3 (an old name)"}


@pytest.fixture(scope="module")
def controls(lab):
    """Write the control notebooks into the server's root; name -> relative path."""
    paths = {}
    for name, sources in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "debug-course", "language": "python",
                                     "display_name": DISPLAY_NAMES.get(name, KERNEL_DISPLAY)}
        nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
        rel = f"controls/{name}.ipynb"
        (lab.root / "controls").mkdir(exist_ok=True)
        nbformat.write(nb, lab.root / rel)
        paths[name] = rel
    return paths


def _run(page, lab, controls, name):
    return lp.run_notebook(page, lab, controls[name], f"control-{name}", KERNEL_DISPLAY,
                           timeout_s=120)


def _all_checks(page, run):
    lp.check_no_errors(run)
    lp.check_plots(run, at_least=1)
    lp.check_widget_shown(run)
    lp.check_widgets_render(page, run)
    return lp.check_widgets_respond(page, run, wait_s=WAIT_S)


def test_healthy_control_passes_every_check(page, lab, controls):
    lines = _all_checks(page, _run(page, lab, controls, "healthy"))
    assert lines and "changed its output" in lines[0], lines


@pytest.mark.parametrize("name, message", [
    ("widget_not_shown", "no widget view appeared"),
    ("widget_not_rendered", "did not render"),
    ("widget_not_responding", "did not respond"),
    ("widget_callback_error", "shows an error"),
    ("cell_error", "cells ended with errors"),
])
def test_checks_fail_on_broken_control(name, message, page, lab, controls):
    run = _run(page, lab, controls, name)
    with pytest.raises(AssertionError, match=message):
        _all_checks(page, run)


def test_open_save_check_fails_when_opening_changes_the_file(page, lab, controls):
    """The check that opening and saving a notebook leaves its file as it was (run first on every
    course notebook) can fail: here the kernel's display name is written into the metadata."""
    with pytest.raises(AssertionError, match=r"changed it: notebook metadata changed: \['kernelspec'\]"):
        _run(page, lab, controls, "changed_on_open")
