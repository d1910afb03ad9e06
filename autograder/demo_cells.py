"""Which cells autograde may leave unrun: untouched demonstrations that nothing run later needs.

Most of a notebook's running time is demonstrations (training runs, plots, widgets) that no graded
cell uses; each autograde submission pays for them again. The instructor tags such a cell ``demo``
in the solution (jupytext: ``# %% tags=["demo"]``). While grading (``SandboxedExecute``), a
submission's code cell is not run when all of these hold:

- its source is, character for character, the source of a ``demo``-tagged code cell of the
  assignment's source notebook that has no nbgrader role (the submission's own tags and metadata
  are not trusted: a learner who edits a demo gets it run, one who tags a cell gains nothing);
- it has no nbgrader role in the submission either;
- no cell that is run after it reads a name it binds (a backward liveness pass with ``ast`` over
  the submission as submitted, so a learner's edit anywhere is taken into account).

A skipped cell still runs its top-level import statements (cheap, and later cells may use what
they import), and its output is one line saying it was not run. What the analysis sees of a cell:
*binds* are the names it assigns, deletes or defines, and the base name of anything it assigns
into (``d[k] = v``, ``obj.x = v``); *reads* are the names it loads, deletes or updates in place (``x += 1``). A cell it cannot read (IPython magics or shell escapes,
a syntax error, ``exec``/``eval``/``globals``/``get_ipython``, a star import) counts as reading
every name, so every demo before it runs.

The contract of the tag (the analysis cannot see it; ``tests/test_autograde.py`` checks the result
end to end, every notebook graded with its demos skipped): a demo changes no state that a later
cell reads other than through the names it assigns: no method that mutates an object a later cell
uses (``run.history.clear()``), no global RNG draws a later cell relies on unseeded, no module
settings, no files. ``tests/test_notebook_sources.py`` checks that every tagged cell of the
untouched solution is in fact skipped (a tag on a cell something needs is a mistake).
"""
from __future__ import annotations

import ast

TAG = "demo"
NOTE = ("[autograder] not run while grading: a demonstration that no graded cell needs "
        "(run the notebook to see it)\n")
# Calls that reach names without naming them: a cell using one reads everything.
_OPAQUE_CALLS = {"exec", "eval", "globals", "locals", "vars", "get_ipython", "__import__"}


def _role(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return any(meta.get(k) for k in ("grade", "solution", "locked", "task"))


def demo_sources(source_nb) -> set[str]:
    """The sources of the ``demo``-tagged code cells of a source notebook that have no nbgrader role."""
    return {c.source for c in source_nb.cells
            if c.cell_type == "code" and TAG in c.get("metadata", {}).get("tags", []) and not _role(c)}


def _tree(source: str):
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics and shell escapes land here too
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.Name) and node.id in _OPAQUE_CALLS:
            return None
    return tree


def reads(source: str) -> set[str] | None:
    """Every name the cell reads (loads, deletes or updates in place), or None when the cell
    cannot be analysed. A plain assignment is not a read: ``fig, ax = ...`` needs no earlier ``fig``."""
    tree = _tree(source)
    if tree is None:
        return None
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
    out |= {n.target.id for n in ast.walk(tree)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    return out


def _base(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def binds(source: str) -> set[str] | None:
    """The names the cell rebinds or changes by assignment (see the module docstring), or None.
    Its import statements are not counted: a skipped cell's imports still run (``imports``)."""
    tree = _tree(source)
    if tree is None:
        return None
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(_base(node))
    out.discard(None)
    return out


def imports(source: str) -> str:
    """The cell's top-level import statements, as code: what a skipped cell still runs, so the
    names it imports exist for the cells after it."""
    tree = _tree(source)
    if tree is None:
        return ""
    return "\n".join(ast.get_source_segment(source, n) for n in tree.body
                     if isinstance(n, (ast.Import, ast.ImportFrom)))


def skippable(cells, demos: set[str]) -> set[int]:
    """Indices of the code cells of ``cells`` (a submission) that grading may leave unrun."""
    needed: set[str] = set()
    everything = False
    skip = set()
    for i in range(len(cells) - 1, -1, -1):
        cell = cells[i]
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if not everything and cell.source in demos and not _role(cell):
            bound = binds(cell.source)
            if bound is not None and not (bound & needed):
                skip.add(i)
                continue
        used = reads(cell.source)
        if used is None:
            everything = True
        else:
            needed |= used
    return skip
