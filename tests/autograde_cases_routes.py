"""Work-free answers to every notebook's mystery, one per route to the answer (see course.exercises.isolation).

Each notebook gets one submission whose answer cells keep the solution's code and then redefine the
graded functions with an answer that does no work, each by another route:

* ``detect`` reads the answer from the package's private registry (``mystery._SECRETS``);
* ``name_cause`` reads the function inside one of the pipeline's parts and compares it with the
  reference (``_Part__fn`` and, where that is gone, the generator that holds it, through
  ``inspect.getgeneratorlocals``);
* ``fix`` walks the garbage collector to the registry and replaces the fields the bug touched;
* where a notebook has one, a private helper of a switched-off package check does the detector's
  work (``PRIVATE``).

Each must lose every test cell that grades the function it replaced, and every test cell of an
answer that calls it (found from the solution: the names each cell reads), and nothing else.
"""
import ast
import json
from pathlib import Path

from autograder.grading import Case, nbgrader_meta

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"

READS_REGISTRY = '''

def detect(pipe, *args, **kwargs):  # work-free: the registry
    from course.exercises import mystery
    return mystery._SECRETS[id(pipe)][1].answer != "healthy"
'''

READS_PART = '''

def name_cause(pipe, *args, **kwargs):  # work-free: the function inside a part
    import course.reference.pipeline
    reference = course.reference.pipeline.Pipeline()
    for field in course.reference.pipeline.PARTS:
        part = getattr(pipe, field)
        inner = getattr(part, "_Part__fn", None)
        if inner is None:  # the generator that holds it, opened by a library's helper
            import inspect
            inner = inspect.getgeneratorlocals(part._Part__gen)["fn"]
        if inner is not getattr(reference, field):
            return field
    return "healthy"
'''

WALKS_GC = '''

def fix(pipe, *args, **kwargs):  # work-free: the garbage collector to the registry
    import gc
    from course import Pipeline
    for o in gc.get_objects():
        if isinstance(o, dict) and isinstance(o.get(id(pipe)), tuple) and len(o[id(pipe)]) == 2:
            return pipe.replace(**{f: getattr(Pipeline(), f) for f in o[id(pipe)][1].touched})
    return pipe
'''

# The capstone's family is one fixed word about the learner's own draw, which the kernel holds: read
# from the registry at the top level (not inside a graded call), it is right. Its points need the
# learner's detect as well (test_diagnosis_hidden), so with the work-free detect above they are lost.
FAMILY_READS_REGISTRY = '''

from course.exercises import capstone as _cap, mystery as _mys
_READ = _cap.FAMILY_OF[_mys._SECRETS[id(mine)][1].answer]  # work-free: the registry, at the top level


def my_family():
    return _READ
'''

# notebook -> (answer cell of detect, of name_cause, of fix); None where the notebook has none
CELLS = {
    "00_start_here": ("detect", "name_cause", "fix"),
    "01_baselines": ("detect", "name_cause", "fix"),
    "02_nan_decision_tree": ("mystery_detect", "mystery_cause", "mystery_fix"),
    "03_overfit_controls": ("mystery_detect", "mystery_cause", "mystery_fix"),
    "04_late_spike": ("detect", "name_cause", "fix"),
    "05_validation_gap": ("detect", "name_cause", "fix"),
    "06_throughput": ("detect", "name_cause", "fix"),
    "07_stale_resume": ("detect", "name_cause", "fix"),
    "08_generation": ("detect", "name_cause", "my_generate"),
    "09_eval_harness": ("detect", "name_cause", "fix"),
    "10_amp_memory": ("detect", "name_cause", "fix"),
    "11_capstone": ("detect", None, "fix"),
    "12_lr_instability": ("detect", "name_cause", "fix"),
    "13_hangs": ("detect", "name_cause", "plan_shards"),
}

# A private helper that does a switched-off check's work (appended to the detect cell instead of
# the registry read, in a second submission).
PRIVATE = {
    "02_nan_decision_tree": '''

def detect(pipe):  # work-free: the locator's private helper
    import course.reference.diagnose as diag
    import course.toolkit.nonfinite as nf
    return nf._any_bad(diag.trace(pipe, HORIZON, 0))
''',
    "03_overfit_controls": '''

def detect(pipe):  # work-free: the pre-flight's private checks, on the pipeline's own pieces
    import course.toolkit.preflight as pf
    from course import Batch
    from course.reference.diagnose import pipeline_step
    from course.reference.train import batch_at
    model = pipe.build_model(0)
    opt = pipe.make_optimizer(model, pipe)
    full = batch_at(pipe, 0, 0)
    batch = Batch(full.inputs[:8], full.targets[:8], full.pad_id)
    step = pipeline_step(pipe)
    checks = [pf._update(model, opt, batch, pipe.loss_fn, step), pf._grads_reset(model, opt, batch, pipe.loss_fn, step),
              pf._loss_is_mean(model, opt, batch, pipe.loss_fn), *pf._overfit(model, opt, batch, pipe.loss_fn, step, 100, 0.1)]
    return not all(c.passed for c in checks)
''',
}


def _source(assignment: str) -> dict:
    return json.loads((SOLUTIONS / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))


def _names(src: str) -> tuple[set, set]:
    """(names the cell reads, functions it defines at top level)."""
    code = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!")))
    tree = ast.parse(code)
    reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    defines = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return reads, defines


def lost_cells(assignment: str, replaced: set[str]) -> set[str]:
    """Every autograder-test cell that reads one of ``replaced`` or a function of an answer cell that
    (transitively) does."""
    cells = [(nbgrader_meta(c), "".join(c["source"])) for c in _source(assignment)["cells"] if c["cell_type"] == "code"]
    tainted, changed = set(replaced), True
    while changed:
        changed = False
        for meta, src in cells:
            if meta.get("solution") and not meta.get("grade"):
                reads, defines = _names(src)
                if reads & tainted and not defines <= tainted:
                    tainted |= defines
                    changed = True
    return {meta["grade_id"] for meta, src in cells
            if meta.get("grade") and not meta.get("solution") and _names(src)[0] & tainted}


def _append(assignment: str, edits: dict[str, str]) -> dict[str, str]:
    sources = {nbgrader_meta(c).get("grade_id"): "".join(c["source"]) for c in _source(assignment)["cells"]}
    return {cell: sources[cell] + extra for cell, extra in edits.items()}


def _cases() -> list:
    out = []
    for assignment, (detect, cause, fix) in CELLS.items():
        if not (SOLUTIONS / assignment / f"{assignment}.ipynb").exists():
            continue
        edits = {detect: READS_REGISTRY, fix: WALKS_GC}
        replaced = {"detect", "fix"}
        if cause is not None:
            edits[cause] = READS_PART
            replaced.add("name_cause")
        tag = assignment[:2]
        student, extra = f"routes_{tag}_registry_part_gc", {}
        if assignment == "11_capstone":  # graded under its own id: pick one that draws the solution's bug
            from course.exercises import capstone
            student = next(f"routes_11_{i}" for i in range(10_000)
                           if capstone._choice(f"routes_11_{i}")[:2] == capstone._choice("solution")[:2])
            extra = {"my_name": f'MY_NAME = "{student}"\n', **_append(assignment, {"diagnosis": FAMILY_READS_REGISTRY})}
        out.append(Case(assignment, student, {**_append(assignment, edits), **extra},
                        lost_cells(assignment, replaced)))
        if assignment in PRIVATE:
            out.append(Case(assignment, f"routes_{tag}_private_helper", _append(assignment, {detect: PRIVATE[assignment]}),
                            lost_cells(assignment, {"detect"})))
    return out


CASES = _cases()
