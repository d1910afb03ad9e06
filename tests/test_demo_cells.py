"""Which cells grading may leave unrun (autograder/demo_cells.py), and that SandboxedExecute does.

A demo cell is skipped only when it is the instructor's own text, nothing run after it reads a
name it assigns, and no later cell hides what it reads; each rule has a control that breaks it.
"""
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config

from autograder import demo_cells, sandbox
from autograder.sandboxed_execute import SandboxedExecute


def cells(*sources, demo=()):
    """Code cells; those whose index is in ``demo`` are tagged demo."""
    out = [new_code_cell(s) for s in sources]
    for i in demo:
        out[i].metadata["tags"] = ["demo"]
    return out


def skipped(source_cells, submission_sources=None):
    source = new_notebook(cells=source_cells)
    submission = cells(*(submission_sources or [c.source for c in source_cells]))
    return demo_cells.skippable(submission, demo_cells.demo_sources(source))


SETUP, DEMO, TEST = "import math\nx = 2", "run = [math.sqrt(x)] * 3\nprint(run)", "assert x == 2"


def test_untouched_demo_that_nothing_reads_is_skipped():
    assert skipped(cells(SETUP, DEMO, TEST, demo=[1])) == {1}


def test_untagged_cell_is_never_skipped():
    assert skipped(cells(SETUP, DEMO, TEST)) == set(), "only the instructor's tag makes a cell a demo"


def test_demo_whose_name_a_later_cell_reads_runs():
    assert skipped(cells(SETUP, DEMO, "assert len(run) == 3", demo=[1])) == set(), \
        "a later cell reads `run`, which the demo assigns: the demo must run"


def test_demo_that_assigns_into_a_needed_object_runs():
    assert skipped(cells("d = {}", "d['k'] = 1", "assert d", demo=[1])) == set(), \
        "the demo changes `d` by item assignment and a later cell reads `d`"


def test_later_plain_assignment_is_not_a_read():
    assert skipped(cells(SETUP, "fig = 1", "fig = 2", demo=[1])) == {1}
    assert skipped(cells(SETUP, "fig = 1", "fig += 2", demo=[1])) == set(), "`fig += 2` reads fig"


def test_chain_of_demos_is_skipped_together_and_breaks_when_the_learner_edits_the_last():
    source = cells(SETUP, DEMO, "print(run[0])", TEST, demo=[1, 2])
    assert skipped(source) == {1, 2}
    edited = [c.source for c in source]
    edited[2] = "print(run[1])  # the learner's experiment"
    assert skipped(source, edited) == set(), \
        "an edited demo runs, and the demo whose `run` it reads must run before it"


def test_edited_demo_runs():
    assert skipped(cells(SETUP, DEMO, TEST, demo=[1]), [SETUP, DEMO + "\n", TEST]) == set()


def test_tags_in_the_submission_are_not_trusted():
    source = new_notebook(cells=cells(SETUP, DEMO, TEST))
    submission = cells(SETUP, DEMO, TEST, demo=[1, 2])
    assert demo_cells.skippable(submission, demo_cells.demo_sources(source)) == set()


def test_cell_with_an_nbgrader_role_is_never_skipped():
    source = cells(SETUP, DEMO, TEST, demo=[1])
    source[1].metadata["nbgrader"] = {"grade": False, "solution": True, "grade_id": "answer"}
    assert skipped(source) == set(), "an answer cell tagged demo is still graded work"


@pytest.mark.parametrize("later", ["%time y = 1", "print(globals()['run'])", "from math import *",
                                   "exec('print(run)')", "def f(:",
                                   "-" * 200_000 + "1",  # past the parser's limits: MemoryError
                                   "x = " + "1+" * 600 + "1"])  # parsed, past the walk's: RecursionError
def test_a_cell_the_analysis_cannot_read_makes_every_earlier_demo_run(later):
    assert skipped(cells(SETUP, DEMO, later, demo=[1])) == set(), f"{later[:60]!r} may read anything"


def test_imports_of_a_skipped_cell_still_run():
    assert demo_cells.imports("import os\nfrom math import sqrt as s\ny = s(4)\nif y:\n    import json") == \
        "import os\nfrom math import sqrt as s"


@pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux-only")
@pytest.mark.parametrize("skip_demos", [True, False])
def test_sandboxed_execute_leaves_skippable_demos_unrun(tmp_path, skip_demos):
    """Graded as nbgrader grades (resources name the assignment; the source notebook is read from
    the course root): the demo nothing needs prints the note and does not run, its import does;
    the demo a test reads runs. With skip_demos off, everything runs."""
    sandbox.install()
    source = cells("x = 1", "import json\nprint('DEMO-A ran')", "y = 2\nprint('DEMO-B ran')",
                   "assert y == 2 and json.dumps(1) == '1', 'y and json must exist'", demo=[1, 2])
    (tmp_path / "solutions" / "a").mkdir(parents=True)
    nbformat.write(new_notebook(cells=source), tmp_path / "solutions" / "a" / "a.ipynb")
    work = tmp_path / "autograded" / "me" / "a"
    work.mkdir(parents=True)
    nb = new_notebook(cells=cells(*[c.source for c in source]))
    nb.metadata["kernelspec"] = {"name": "debug-course", "display_name": "x", "language": "python"}
    config = Config({"CourseDirectory": {"root": str(tmp_path), "source_directory": "solutions"}})
    SandboxedExecute(config=config, timeout=20, skip_demos=skip_demos).preprocess(
        nb, {"metadata": {"path": str(work)}, "nbgrader": {"assignment": "a", "notebook": "a"}})
    out = ["".join(o.get("text", "") + o.get("ename", "") for o in c.outputs) for c in nb.cells]
    if skip_demos:
        assert out[1] == demo_cells.NOTE, f"demo A needs nothing later: skipped, got {out[1]!r}"
    else:
        assert "DEMO-A ran" in out[1], out[1]
    assert "DEMO-B ran" in out[2], "the test reads y, which demo B assigns: demo B must run"
    assert out[3] == "", f"the test must pass (json imported by the skipped demo): {out[3]!r}"


def test_a_functions_parameters_and_locals_are_not_global_reads():
    later = "def check(run, n=len(shown)):\n    total = run[0]\n    return [run for run in range(n)], total"
    assert demo_cells.reads(later) == {"len", "shown", "range"}
    assert skipped(cells(SETUP, DEMO, later, demo=[1])) == {1}, \
        "`run` in the later cell is check's parameter, not the demo's `run`"
    uses_global = "def check():\n    return run[0]"
    assert skipped(cells(SETUP, DEMO, uses_global, demo=[1])) == set(), "check() reads the global `run`"
    declared = "def reset():\n    global run\n    run = run + [1]"
    assert skipped(cells(SETUP, DEMO, declared, demo=[1])) == set(), "`global run` reads the demo's run"
    assert demo_cells.reads("[x for x in xs if x > lim]") == {"xs", "lim"}
    assert demo_cells.reads("lambda a, b=c: a + d") == {"c", "d"}


def test_a_name_the_cell_assigns_before_using_it_is_not_a_read():
    assert demo_cells.reads("for name in names:\n    print(name)") == {"names", "print"}
    assert demo_cells.reads("run = 1\nprint(run)") == {"print"}
    assert demo_cells.reads("print(run)\nrun = 1") == {"print", "run"}, "read before the assignment"
    assert demo_cells.reads("if c:\n    run = 1\nprint(run)") == {"c", "print", "run"}, \
        "an assignment under `if` may not happen: the later read may see the earlier cell's run"
    assert demo_cells.reads("for name in []:\n    pass\nprint(name)") == {"print", "name"}, \
        "after an empty loop the loop variable is still the earlier cell's"
    assert skipped(cells(SETUP, DEMO, "for run in range(2):\n    print(run)", demo=[1])) == {1}
