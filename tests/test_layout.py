"""The layout of ``course``: which subpackage may import which, and no import cycle at all; and no
import cycle in ``autograder`` either (the class runner's library apart from its command line).

Every ``import`` and ``from ... import`` of every module of ``course`` is read with ``ast`` (at the
top of the module and inside functions and classes, relative and absolute), resolved to the module
of ``course`` it names, and checked against the layers:

* ``course.toolkit``: only the toolkit (and torch, the standard library, numpy, matplotlib, ...);
* ``course.reference``: the toolkit and the reference;
* ``course.lessons`` and ``course.bugs``: the toolkit, the reference, the lessons and the bugs;
* ``course.exercises`` and ``course`` itself (``__init__``): anything.

And the graph of all those imports, function-level ones included, has no cycle: no module imports
one that depends on it. ``check_layout`` takes the sources as a mapping, so the negative controls
below plant a bad import in a copy of the real sources and see it fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "course"
GRADER = ROOT.parent / "autograder"
THIRD_PARTY_OK = True  # outside course anything may be imported; only course's own layers are checked

# what each layer may import, by the second part of the module name
ALLOWED = {
    "toolkit": {"toolkit"},
    "reference": {"toolkit", "reference"},
    "lessons": {"toolkit", "reference", "lessons", "bugs"},
    "bugs": {"toolkit", "reference", "lessons", "bugs"},
    "exercises": {"toolkit", "reference", "lessons", "bugs", "exercises"},
}


def sources(root: Path = ROOT) -> dict[str, tuple[str, bool]]:
    """``{module name: (source, is_package)}`` for every ``.py`` file under ``root`` (``course``)."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root.parent).with_suffix("").parts
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f.read_text(), is_pkg)
    return out


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module of ``modules`` that ``name`` (a module, or a module's attribute) refers to."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports(srcs: dict[str, tuple[str, bool]], top: str = "course") -> dict[str, set[tuple[str, int]]]:
    """``{module: {(imported module of top, line)}}``, from every import statement anywhere."""
    modules = set(srcs)
    graph: dict[str, set[tuple[str, int]]] = {}
    for mod, (src, is_pkg) in srcs.items():
        edges = graph.setdefault(mod, set())
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(src, filename=mod)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                # "from course.toolkit import checks" names the module course.toolkit.checks
                targets = [f"{prefix}.{a.name}" for a in node.names] + [prefix]
                targets = [t for t in targets[:-1] if t in modules] or [prefix]
            else:
                continue
            for t in targets:
                if t == top or t.startswith(top + "."):
                    found = _resolve(t, modules)
                    if found is not None and found != mod:
                        edges.add((found, node.lineno))
    return graph


def _layer(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the package course itself


def check_layout(srcs: dict[str, tuple[str, bool]]) -> list[str]:
    """Every import that breaks a layer's rule, and every cycle; empty when the layout holds."""
    graph = imports(srcs)
    problems = []
    for mod, edges in sorted(graph.items()):
        layer = _layer(mod)
        if layer is None:
            continue
        allowed = ALLOWED.get(layer)
        if allowed is None:
            problems.append(f"{mod}: in no known layer (toolkit, reference, lessons, bugs, exercises)")
            continue
        for target, line in sorted(edges):
            if _layer(target) not in allowed:
                problems.append(f"{mod}:{line} imports {target} ({layer} may import {sorted(allowed)} only)")
    problems += cycles(graph)
    return problems


def cycles(graph: dict[str, set[tuple[str, int]]]) -> list[str]:
    """Every import cycle of ``graph`` (``imports``), as ``cycle: a -> b -> a``."""
    problems = []
    # a depth-first search that reports the path back to a module on the stack
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for target in sorted({t for t, _ in graph.get(mod, ())}):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target] if target in path else [mod, target]
                problems.append("cycle: " + " -> ".join(cycle))
            elif target not in state:
                visit(target, path + [target])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    return problems


# ----- the real package ------------------------------------------------------------------------------
def test_the_package_has_its_layers_and_no_cycle():
    srcs = sources()
    assert {_layer(m) for m in srcs} == {None, "toolkit", "reference", "lessons", "bugs", "exercises"}
    assert check_layout(srcs) == []


def test_the_imports_are_read_at_every_depth():
    # the reader finds function-level and relative imports, and "from package import module"
    graph = imports(sources())
    names = {t for t, _ in graph["course.reference.checkpoint"]}
    assert "course.reference.train" in names  # imported inside functions only
    assert "course.reference.parts" in names  # relative, at the top
    assert "course.toolkit.nonfinite" in {t for t, _ in graph["course.exercises.capstone"]}  # "from ..toolkit import nonfinite"


# ----- negative controls: a planted bad import is caught ------------------------------------------
def _planted(module: str, line: str, at_top: bool = False) -> dict:
    srcs = dict(sources())
    src, is_pkg = srcs[module]
    body = line + "\n" if at_top else f"\n\ndef _planted():\n    {line}\n"
    srcs[module] = ((body + src) if at_top else (src + body), is_pkg)
    return srcs


@pytest.mark.parametrize("module, line, expected", [
    # the toolkit reaching up to the loop, inside a function (how the circle used to be hidden)
    ("course.toolkit.checks", "from ..reference.train import start", "course.toolkit.checks:"),
    ("course.toolkit.preflight", "import course.reference.pipeline", "course.toolkit.preflight:"),
    # the reference reaching a lesson (the old pipeline -> amp) or the exercises
    ("course.reference.pipeline", "from ..lessons import amp", "course.reference.pipeline:"),
    ("course.reference.train", "from course.exercises.grading import captured_warnings", "course.reference.train:"),
    # a lesson or a bug reaching the exercises
    ("course.lessons.amp", "from ..exercises import mystery", "course.lessons.amp:"),
    ("course.bugs.basic", "from ..exercises.grading import fires", "course.bugs.basic:"),
])
def test_a_planted_import_across_layers_fails(module, line, expected):
    problems = check_layout(_planted(module, line))
    assert any(p.startswith(expected) for p in problems), problems


@pytest.mark.parametrize("module, line", [
    # the old circle: checkpoint (imported by the pipeline) importing the loop inside a function
    ("course.reference.parts", "from .train import start"),
    ("course.reference.data", "from .pipeline import Pipeline"),
    ("course.toolkit.batch", "from .checks import check_batch"),
    ("course.lessons.harness", "from .generate import chain_score"),  # generate does not import harness: no cycle
])
def test_a_planted_cycle_fails(module, line):
    problems = check_layout(_planted(module, line))
    if module == "course.lessons.harness":
        assert problems == []  # the control of the control: an import that closes no cycle passes
    else:
        assert any(p.startswith("cycle:") for p in problems), problems


def test_a_planted_top_level_import_is_caught_too():
    problems = check_layout(_planted("course.toolkit.outputs", "from course.reference import model", at_top=True))
    assert any(p.startswith("course.toolkit.outputs:1 imports course.reference.model") for p in problems), problems


# ----- autograder: no import cycle (issue 37: grade_class and dask_grading imported each other) -----
def test_the_grader_has_no_import_cycle():
    graph = imports(sources(GRADER), top="autograder")
    assert "autograder.class_runner" in {t for t, _ in graph["autograder.dask_grading"]}
    assert cycles(graph) == []


@pytest.mark.parametrize("module, line", [
    # the old circle: the Dask runner building on the command line's module, which imports it
    ("autograder.dask_grading", "from autograder import grade_class"),
    # the library reaching its own command line (inside a function, where it used to hide)
    ("autograder.class_runner", "from autograder import grade_class"),
])
def test_a_planted_cycle_in_the_grader_fails(module, line):
    srcs = dict(sources(GRADER))
    src, is_pkg = srcs[module]
    srcs[module] = (src + f"\n\ndef _planted():\n    {line}\n", is_pkg)
    assert any(p.startswith("cycle:") for p in cycles(imports(srcs, top="autograder"))), line
