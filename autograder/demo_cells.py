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
into (``d[k] = v``, ``obj.x = v``); *reads* are the global names it loads, deletes or updates in place (``x += 1``): not a
function's parameters or locals, nor a comprehension's variables. A cell it cannot read (IPython magics or shell escapes,
a syntax error, a cell past the parser's or this walk's nesting limits, ``exec``/``eval``/``globals``/
``get_ipython``, a star import) counts as reading every name, so every demo before it runs.

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
# What ast.parse raises for a cell that is not Python it can read: a syntax error (IPython magics and
# shell escapes too), a null byte (ValueError), a cell past the parser's limits (RecursionError,
# MemoryError on ``"-" * 200_000 + "1"``). Read as unreadable here and in sandboxed_execute.
UNPARSEABLE = (SyntaxError, ValueError, RecursionError, MemoryError)
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
    except UNPARSEABLE:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.Name) and node.id in _OPAQUE_CALLS:
            return None
    return tree


def _stored(body) -> set[str]:
    """Names a function body assigns (its locals), not looking into nested scopes."""
    out, stack = set(), list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return out


def _free(node, local: frozenset) -> set[str]:
    """Names ``node`` reads that are not local to an enclosing function, lambda or comprehension
    (``local``): the parameter ``fixed`` of ``def check(fixed): ...`` does not read a global ``fixed``."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        outer = [*args.defaults, *(d for d in args.kw_defaults if d is not None),
                 *getattr(node, "decorator_list", []), *(a.annotation for a in
                 [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a and a.annotation)]
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
        body = node.body if isinstance(node.body, list) else [node.body]
        declared = {n for b in ast.walk(ast.Module(body=body, type_ignores=[]))
                    if isinstance(b, (ast.Global, ast.Nonlocal)) for n in b.names}
        inner = local | ((params | _stored(body)) - declared)
        return set().union(*(_free(n, local) for n in outer), *(_free(b, inner) for b in body))
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        targets = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        inner = local | targets
        first, rest = node.generators[0].iter, [c for c in ast.iter_child_nodes(node) if c is not node.generators[0].iter]
        return _free(first, local) | set().union(*(_free(c, inner) for c in rest))
    if isinstance(node, ast.Name):
        return set() if isinstance(node.ctx, ast.Store) or node.id in local else {node.id}
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id not in local:
        return {node.target.id} | _free(node.value, local)
    return set().union(*(_free(c, local) for c in ast.iter_child_nodes(node)))


def _names_of(target) -> set[str]:
    """The plain names a (possibly tuple) assignment target binds."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_names_of(t) for t in target.elts))
    if isinstance(target, ast.Starred):
        return _names_of(target.value)
    return set()


def _ordered(body, assigned: set) -> set[str]:
    """Reads of a statement list run in order: a name the cell has surely assigned by then (a plain
    assignment, import or def at this level; a for loop's variable inside its body) reads the
    cell's own value, not an earlier cell's. Anything conditional counts as not assigned."""
    out, assigned = set(), set(assigned)
    for stmt in body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            out |= set().union(*(_free(n, frozenset()) for n in [stmt.value, *targets] if n)) - assigned
            assigned |= set().union(*(_names_of(t) for t in targets))
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            out |= (_free(stmt.iter, frozenset()) | _free(stmt.target, frozenset())) - assigned
            out |= _ordered(stmt.body, assigned | _names_of(stmt.target)) | _ordered(stmt.orelse, assigned)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            assigned |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out |= _free(stmt, frozenset()) - assigned
            assigned.add(stmt.name)
        else:
            out |= _free(stmt, frozenset()) - assigned
    return out


def reads(source: str) -> set[str] | None:
    """The global names the cell reads (loads, deletes or updates in place) of values an earlier
    cell made, or None when the cell cannot be analysed. Not reads: a plain assignment (``fig, ax =
    ...`` needs no earlier ``fig``), a name the cell itself assigned before using it (a loop
    variable in its loop), a function's parameter or local variable."""
    tree = _tree(source)
    if tree is None:
        return None
    try:
        return _ordered(tree.body, set())
    except RecursionError:  # nested deeper than this walk can follow (x = 1+1+...+1, 500 deep)
        return None


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
