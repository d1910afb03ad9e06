"""A test cell uses only its own names and the package's, never a notebook global.

A test cell that reads a name the notebook defined (the base of its hidden draws, the list of
candidate bugs, a fix-checking helper, the notebook's collection of mysteries) grades whatever the
learner left bound to that name, and a learner who rebinds it, even by accident with a helper of
the same name, changes what is graded and how. So every name a test cell reads is assigned or
imported in that cell, is a builtin, or is one of the answers it grades: a name defined in the
notebook's answer cells (nbgrader ``solution`` cells, which the learner writes). Checked over
every test cell of every solution notebook, hidden tests included, with planted violations as the
negative control.
"""
import ast
import builtins
import json
import re
from pathlib import Path

import pytest

from autograder.grading import HIDDEN

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("solutions/*/*.ipynb"))
BUILTINS = frozenset(dir(builtins)) | {"get_ipython", "display", "__file__"}


def _source(cell) -> str:
    text = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines())


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def bound(tree: ast.AST) -> set:
    """Every name a piece of code binds anywhere: assignments, loop and comprehension targets,
    ``def``/``class``, imports, function arguments, ``except ... as``, ``global``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchAs) and node.name:
            out.add(node.name)
    return out


def top_level(tree: ast.Module) -> set:
    """The names a cell defines in the notebook's namespace: its top-level assignments, functions
    and classes, not the arguments or locals of its functions and not its imports (an import in an
    answer cell is scaffolding: the test cell imports what it uses itself)."""
    out = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            return
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                visit(child)
    visit(tree)
    return out


def read(tree: ast.AST) -> set:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def answers(nb: dict) -> set:
    """The names the learner's answer cells define (what the test cells grade)."""
    out = set()
    for cell in nb["cells"]:
        meta = _nbgrader(cell)
        if cell["cell_type"] == "code" and meta.get("solution") and not meta.get("grade"):
            out |= top_level(ast.parse(_source(cell)))
    return out


def notebook_globals_read(nb: dict) -> dict:
    """{grade_id: sorted names} of the test cells that read a name they neither bind nor import,
    that is no builtin and no answer."""
    allowed = answers(nb)
    found = {}
    for cell in nb["cells"]:
        meta = _nbgrader(cell)
        if cell["cell_type"] != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        tree = ast.parse(_source(cell))
        free = read(tree) - bound(tree) - BUILTINS - allowed
        if free:
            found[meta.get("grade_id")] = sorted(free)
    return found


HIDDEN_MAKERS = frozenset({"hidden", "grading_draws", "fresh_draws"})


def _call_name(call: ast.Call) -> str:
    """The name a call calls: ``f`` of ``f(...)`` and of ``x.f(...)``; "" for anything else."""
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _calls(node: ast.AST) -> set:
    """The names of the functions ``node`` calls (``f(...)`` and ``x.f(...)``)."""
    return {_call_name(n) for n in ast.walk(node) if isinstance(n, ast.Call)}


def hidden_after_kernel_rerun(nb: dict) -> list:
    """grade_ids of the test cells that make a hidden draw after a ``check_fix`` call. ``check_fix``
    re-runs the learner's fix in the kernel, so learner code has run in the kernel by then and could
    have read the rest of the cell's source (its hidden draws' bugs and salts): a cell's hidden
    draws come before its first ``check_fix``."""
    found = []
    for cell in nb["cells"]:
        meta = _nbgrader(cell)
        if cell["cell_type"] != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        fixed = False
        for statement in ast.parse(_source(cell)).body:
            calls = _calls(statement)
            if fixed and calls & HIDDEN_MAKERS:
                found.append(meta.get("grade_id"))
                break
            fixed = fixed or "check_fix" in calls
    return found


def _graded_test_cells(nb: dict):
    """(cell, its nbgrader metadata) of each autograder-test cell: code, graded, not an answer."""
    for cell in nb["cells"]:
        meta = _nbgrader(cell)
        if cell["cell_type"] == "code" and meta.get("grade") and not meta.get("solution"):
            yield cell, meta


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.parent.name for p in NOTEBOOKS])
def test_every_test_cell_reads_only_its_own_names_and_the_packages(path):
    found = notebook_globals_read(_load(path))
    assert not found, (f"{path.parent.name}: these test cells read names the notebook defined (a learner "
                       f"could rebind them): {found}. Import them from the package or build them in the cell")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.parent.name for p in NOTEBOOKS])
def test_hidden_draws_come_before_the_kernel_reruns_a_fix(path):
    late = hidden_after_kernel_rerun(_load(path))
    assert not late, (f"{path.parent.name}: these test cells make hidden draws after check_fix has re-run the "
                      f"learner's fix in the kernel: {late}. Put the hidden block before the visible check_fix")


def test_the_order_check_finds_a_hidden_draw_after_check_fix():
    late = ("from course.exercises import mystery\nmystery.check_fix(fix, [], None)\n### BEGIN HIDDEN TESTS\n"
            "mystery.check_fix(fix, [mystery.hidden('x', 1)], None)\n")
    early = ("from course.exercises import mystery\n### BEGIN HIDDEN TESTS\n"
             "mystery.check_fix(fix, [mystery.hidden('x', 1)], None)\n### END HIDDEN TESTS\nmystery.check_fix(fix, [], None)\n")
    assert hidden_after_kernel_rerun(_toy(late)) == ["test_detect"]
    assert hidden_after_kernel_rerun(_toy(early)) == []


def _toy(test_source: str, answer_source: str = "def detect(pipe):\n    return True\n") -> dict:
    code = lambda src, **nbg: {"cell_type": "code", "source": src, "metadata": {"nbgrader": nbg}}
    return {"cells": [code("from course.exercises import mystery\nmysteries = {}\nBASE = None\n"),
                      code(answer_source, solution=True, grade=False, grade_id="detect"),
                      code(test_source, grade=True, solution=False, grade_id="test_detect", points=1)]}


def test_the_check_finds_a_planted_notebook_global():
    # negative controls: the notebook's mysteries, its imported module, a base in a hidden test
    assert notebook_globals_read(_toy("assert_detector(detect, mysteries)\n")) == \
        {"test_detect": ["assert_detector", "mysteries"]}
    assert notebook_globals_read(_toy("mystery.check_fix(detect, [], None)\n")) == {"test_detect": ["mystery"]}
    hidden = "from course.exercises import mystery\n### BEGIN HIDDEN TESTS\nmystery.hidden('x', 1, BASE)\n"
    assert notebook_globals_read(_toy(hidden)) == {"test_detect": ["BASE"]}


def test_the_check_accepts_a_cells_own_names_and_the_answers():
    ok = ("import math\nfrom course.exercises import mystery\nfrom course.exercises.grading import assert_detector\n"
          "cases = {f'd{i}': mystery.hidden('healthy', i) for i in range(2)}\n"
          "try:\n    assert_detector(detect, cases, {})\nexcept ValueError as err:\n    print(err, math.pi)\n")
    assert notebook_globals_read(_toy(ok)) == {}


# Test cells that grade no computation, only what the learner typed into a form (a name, a record
# of their own work): no input, so nothing to draw. Each is named with its reason.
FORM_ONLY = {
    ("11_capstone", "test_my_name"): "the learner's name, a string typed in",
    ("11_capstone", "test_my_name_hidden"): "the learner's name against the id graded",
    ("11_capstone", "test_diagnosis"): "the learner's own record, checked for form",
}
HIDDEN_BEGIN, HIDDEN_END = HIDDEN  # the markers nbgrader strips from the release


def _hidden_lines(text: str) -> set:
    """The line numbers (1-based) between the hidden-test markers."""
    inside, out = False, set()
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == HIDDEN_BEGIN:
            inside = True
        elif line.strip() == HIDDEN_END:
            inside = False
        elif inside:
            out.add(number)
    return out


SALT = re.compile(r"h-?\d\d")  # the course's salts: "h-04-v2d", "h13-v7k"


def _salt_names(tree: ast.AST) -> set:
    """Names the cell binds to a string in the course's salt form (``_salt = "h-02-d7e1"``)."""
    return {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str) and SALT.match(n.value.value)
            for t in n.targets if isinstance(t, ast.Name)}


def _salted(call: ast.Call, salt_names: frozenset = frozenset()) -> bool:
    """A call that draws under the grader's secret: ``hidden_seed(...)`` (under any alias ending so),
    or a call given a salt (a ``salt=`` keyword that is not empty, or an argument that is a string
    in the course's salt form or a name the cell bound to one, passed on to a draw or to a cell's
    own helper that draws with it)."""
    if _call_name(call).endswith("hidden_seed"):
        return True
    values = list(call.args) + [k.value for k in call.keywords]
    if any(k.arg == "salt" and not (isinstance(k.value, ast.Constant) and not k.value.value) for k in call.keywords):
        return True
    return any((isinstance(v, ast.Constant) and isinstance(v.value, str) and SALT.match(v.value)) or
               (isinstance(v, ast.Name) and v.id in salt_names) for v in values)


def _fixed_seed(call: ast.Call) -> bool:
    """``manual_seed(<constant>)`` or ``Random(<constant>)``: a seed the repository's text gives."""
    return _call_name(call) in ("manual_seed", "Random", "seed") and bool(call.args) and isinstance(call.args[0], ast.Constant)


def unsalted_tests(nb: dict, assignment: str = "") -> dict:
    """{grade_id: why} of the graded test cells whose hidden part draws nothing under the grader's
    secret (or has no hidden part), or seeds a generator with a constant there. Such a cell grades the
    inputs the repository's text gives, for every learner and every course: an answer that looks its
    input up in a table made offline from that text scores (red team 14, notebooks 01 and 03)."""
    found = {}
    for cell, meta in _graded_test_cells(nb):
        if (assignment, meta.get("grade_id")) in FORM_ONLY:
            continue
        text = _source(cell)
        lines = _hidden_lines(text)
        tree = ast.parse(text)
        salt_names = frozenset(_salt_names(tree))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno in lines]
        if not lines:
            found[meta.get("grade_id")] = "no hidden part"
        elif any(_fixed_seed(c) for c in calls):
            found[meta.get("grade_id")] = "a constant seed in the hidden part"
        elif not any(_salted(c, salt_names) for c in calls):
            found[meta.get("grade_id")] = "nothing in the hidden part is drawn under the grader's secret"
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.parent.name for p in NOTEBOOKS])
def test_every_hidden_test_draws_its_inputs_under_the_graders_secret(path):
    found = unsalted_tests(_load(path), path.parent.name)
    assert not found, (f"{path.parent.name}: these test cells grade inputs the repository's text gives: {found}. "
                       "Draw the hidden part's inputs from course.exercises.grading.hidden_seed('h-<nn>-<tag>') "
                       "(or a salted draw), with expected values from a reference")


def test_the_salt_check_finds_a_fixed_seed_and_a_missing_hidden_part():
    fixed = "import torch\n### BEGIN HIDDEN TESTS\n_g = torch.Generator().manual_seed(11)\nassert detect(_g)\n### END HIDDEN TESTS\n"
    unsalted = "### BEGIN HIDDEN TESTS\nassert detect(3)\n### END HIDDEN TESTS\n"
    visible_only = "from course.exercises.grading import hidden_seed\nassert detect(hidden_seed('h-x'))\n"
    empty_salt = "### BEGIN HIDDEN TESTS\nassert detect(mystery.hidden('x', 1, salt=''))\n### END HIDDEN TESTS\n"
    assert unsalted_tests(_toy(fixed)) == {"test_detect": "a constant seed in the hidden part"}
    assert unsalted_tests(_toy(unsalted)) == {"test_detect": "nothing in the hidden part is drawn under the grader's secret"}
    assert unsalted_tests(_toy(visible_only)) == {"test_detect": "no hidden part"}
    assert unsalted_tests(_toy(empty_salt)) == {"test_detect": "nothing in the hidden part is drawn under the grader's secret"}


def test_the_salt_check_accepts_a_salted_seed_and_a_salted_draw():
    seeded = ("import torch\nfrom course.exercises.grading import hidden_seed as _hidden_seed\n### BEGIN HIDDEN TESTS\n"
              "_g = torch.Generator().manual_seed(_hidden_seed('h-x'))\nassert detect(_g)\n### END HIDDEN TESTS\n")
    drawn = "### BEGIN HIDDEN TESTS\nassert detect(mystery.hidden('x', 1, salt='h-y'))\n### END HIDDEN TESTS\n"
    by_name = "### BEGIN HIDDEN TESTS\n_salt = 'h-02-d7e1'\nassert detect(mystery.hidden('x', 1, None, _salt))\n### END HIDDEN TESTS\n"
    other_name = "### BEGIN HIDDEN TESTS\n_salt = 'plain'\nassert detect(mystery.hidden('x', 1, None, _salt))\n### END HIDDEN TESTS\n"
    assert unsalted_tests(_toy(seeded)) == {}
    assert unsalted_tests(_toy(drawn)) == {}
    assert unsalted_tests(_toy(by_name)) == {}
    assert unsalted_tests(_toy(other_name)) == {"test_detect": "nothing in the hidden part is drawn under the grader's secret"}


# The graded calls: each runs the learner's function in a forked, sealed child where the running
# test cell's data was deleted (course.exercises.isolation.run_apart). ``check_fix`` re-runs a fix in
# the kernel too, by design and too late to matter (its docstring says why).
GRADED_CALLERS = frozenset({"graded_calls", "assert_detector", "assert_names", "check_fix"})
# Answers a test cell may use in the kernel, each named with the reason no test data is there to read.
IN_KERNEL = {
    ("10_amp_memory", "test_peak_bytes"): "a GPU test: CUDA cannot run in a forked child, so peak_bytes runs in "
                                          "the kernel (its inputs are the function it measures; the expected "
                                          "peak is computed after it returns)",
    ("06_throughput", "test_take_snapshot"): "not yet apart: run in a graded call, the race left 06's mystery "
                                             "cells failing their solution under the grading kernel (Sealed, "
                                             "2026-12-07; cause not found), so it stays in the kernel, stated open",
    ("11_capstone", "MY_NAME"): "a string, not a function: under grading `identity` returns the grader's id "
                                "without reading it, and test_my_name reads it before any test data exists",
}


def learner_code_in_kernel(nb: dict, assignment: str = "") -> dict:
    """{grade_id: sorted names} of the test cells that use a learner's answer (a name an answer cell
    defines) anywhere but in the first argument of a graded call (the function itself, or a lambda
    or call that wraps it there). Such a use runs the learner's code in the kernel, where the test's
    own data is a notebook global and its frame is one ``sys._getframe`` away: an answer can read
    the expected value (route (f) of docs/grading-integrity.md)."""
    allowed = answers(nb)
    found = {}
    for cell, meta in _graded_test_cells(nb):
        if (assignment, meta.get("grade_id")) in IN_KERNEL:
            continue
        tree = ast.parse(_source(cell))
        named = {a.asname: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names if a.asname}
        firsts = [node.args[0] for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                  and named.get(_call_name(node), _call_name(node)) in GRADED_CALLERS]
        apart = {id(n) for first in firsts for n in ast.walk(first)}
        # a function the cell defines and hands to a graded call (and uses nowhere else) runs apart too
        handed = {f.id for f in firsts if isinstance(f, ast.Name)}
        elsewhere = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in apart}
        apart |= {id(n) for d in ast.walk(tree) if isinstance(d, ast.FunctionDef)
                  and d.name in handed - elsewhere for n in ast.walk(d)}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                and n.id in allowed and id(n) not in apart and (assignment, n.id) not in IN_KERNEL}
        if used:
            found[meta.get("grade_id")] = sorted(used)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.parent.name for p in NOTEBOOKS])
def test_every_test_cell_runs_the_learners_code_apart(path):
    found = learner_code_in_kernel(_load(path), path.parent.name)
    assert not found, (f"{path.parent.name}: these test cells run the learner's code in the kernel, where it can "
                       f"read the test's data: {found}. Call it through course.exercises.grading.graded_calls "
                       "(one call per part, the wrapper sending back plain data), then compare")


def test_the_apart_check_finds_a_call_in_the_kernel():
    # negative controls: a direct call, the function handed to a package function that calls it
    # here, and a call beside a graded one
    assert learner_code_in_kernel(_toy("assert detect(3)\n")) == {"test_detect": ["detect"]}
    assert learner_code_in_kernel(_toy("from course.lessons import throughput\nthroughput.race(None, detect)\n")) == \
        {"test_detect": ["detect"]}
    beside = "from course.exercises.grading import graded_calls\nassert graded_calls(detect, [1]) == [detect(1)]\n"
    assert learner_code_in_kernel(_toy(beside)) == {"test_detect": ["detect"]}
    twice = ("from course.exercises.grading import graded_calls\ndef _probe(c):\n    return detect(c)\n"
             "graded_calls(_probe, [1])\n_probe(2)\n")
    assert learner_code_in_kernel(_toy(twice)) == {"test_detect": ["detect"]}


def test_the_apart_check_accepts_graded_calls_and_their_wrappers():
    ok = ("from course.exercises.grading import assert_detector as _ad, graded_calls as _gc\n"
          "_ad(detect, {'a': 1}, {'b': 2})\n_got = _gc(lambda c: {'v': float(detect(*c))}, [(1, 2)])\n"
          "from course.exercises import mystery\nmystery.check_fix(detect, [], None)\n"
          "def _probe(c):\n    return str(detect(c))\n_gc(_probe, [1])\n")
    assert learner_code_in_kernel(_toy(ok)) == {}
