"""Targeted submissions for 11_capstone (see tests/autograde_cases.py for the format).

The capstone's draw is keyed by the nbgrader student id (``course.exercises.identity``), and cases packed into
one submission are graded as "pack_<names>", another id and so another draw. So every case here is
``alone=True``, submitted under its own student name, and (except the copied one) each name was
chosen so that its draw has the same bug as the draw of "solution" (resume: data-cursor-reset):
``capstone._choice(f"{stem}_{i}")[:2] == capstone._choice("solution")[:2]`` for the first such i,
searched from 1 (``_same_bug`` below checks it at import). Each case also types its id into MY_NAME,
as a learner would. Each alone case costs one notebook execution, so there are ten, each testing
something different; the last draws another family (see its comment).
"""
from autograder.grading import Case
from course.exercises import capstone

A = "11_capstone"
NAME, NAME_H = "test_my_name", "test_my_name_hidden"
DIAG, DIAG_H = "test_diagnosis", "test_diagnosis_hidden"
DETECT, DETECT_H = "test_detect", "test_detect_hidden"
FIX, FIX_H = "test_fix", "test_fix_hidden"


def _same_bug(student: str) -> str:
    assert capstone._choice(student)[:2] == capstone._choice("solution")[:2], \
        f"{student} does not draw the solution's bug: pick another name"
    return student


def _name(student: str) -> str:
    return f'MY_NAME = "{student}"\n'


# ----- alternative correct answers (full marks) ----------------------------------------------------
# Another record (same family), a detector that looks at the batch the first resumed step trains on
# instead of comparing whole runs, and a fix that wraps the broken restore and puts the cursor back.
_ALT_DIAGNOSIS = '''def my_diagnosis():
    seen = []
    run = train_steps(start(mine, 1), 5, eval_every=0)
    buf = io.BytesIO()
    from course.reference.train import save_checkpoint
    save_checkpoint(run, buf)
    train_steps(resume(mine, io.BytesIO(buf.getvalue())), 1, eval_every=0,
                on_step=lambda r, s, b: seen.append(b))
    same = torch.equal(seen[0].inputs, batch_at(mine, 1, 5).inputs)
    return Diagnosis(
        symptom="a resumed run is not the unbroken run",
        hypotheses=["batches after the resume are not the ones the unbroken run trains on",
                    "the optimizer or scheduler state is lost"],
        test="compare the first resumed batch with the batch of the same step in an unbroken run",
        prediction="a lost cursor gives another batch; lost state gives the same batch",
        result=f"same batch: {same}",
    )


def my_family():
    return "resume"
'''

_ALT_DETECT = '''def detect(pipe):
    from course.reference.train import save_checkpoint
    run = train_steps(start(pipe, 2), 6, eval_every=0)
    buf = io.BytesIO()
    save_checkpoint(run, buf)
    seen = []
    train_steps(resume(pipe, io.BytesIO(buf.getvalue())), 1, eval_every=0,
                on_step=lambda r, s, b: seen.append(b.inputs))
    return not torch.equal(seen[0], batch_at(pipe, 2, 6).inputs)
'''

_ALT_FIX = '''def fix(pipe):
    broken = pipe.restore

    def restore(run, ckpt):
        broken(run, ckpt)
        run.data_offset = ckpt["data_offset"]  # the cursor, which the broken restore rewinds

    return pipe.replace(restore=restore)
'''

# ----- wrong and degenerate answers -----------------------------------------------------------------
# The family of one's own draw is a fixed word anything in the kernel can read (here: off the
# settings, which differ by family, at the top level). Its hidden points need the learner's detect
# to back it, so each case below whose detect fails also loses test_diagnosis_hidden.
_READS_SETTINGS = _ALT_DIAGNOSIS.replace('''def my_family():
    return "resume"
''', '''_BY_RECIPE = {capstone._recipe(f.base): f.name for f in capstone.FAMILIES.values()}
_MINE = _BY_RECIPE[capstone._recipe(mine)]  # read off the settings, at the top level


def my_family():
    return _MINE
''')
assert _READS_SETTINGS != _ALT_DIAGNOSIS
_ALWAYS = "def detect(pipe):\n    return True\n"
_NEVER = "def detect(pipe):\n    return False\n"
_FRESH = "from course import Pipeline\n\ndef fix(pipe):\n    return Pipeline()\n"
# Delegation to the package: the family's own check as the detector, the grader's answer as the fix.
# Both are switched off while learner code is graded (capstone.PACKAGE_CHECKS, SWITCHED_OFF).
_DELEGATES = {"detect": "def detect(pipe):\n    return capstone.resume_symptom(pipe) is not None\n",
              "fix": "def fix(pipe):\n    return capstone.reference_fix(pipe)\n"}
# Realistic wrong: a restore written from scratch with plain load_state_dict. It restores the cursor,
# but also the checkpoint's learning rates: a run resumed with a new lr trains at the old one.
_NAIVE_RESTORE = '''def fix(pipe):
    def restore(run, ckpt):
        run.model.load_state_dict(ckpt["model"])
        run.optimizer.load_state_dict(ckpt["optimizer"])
        run.scheduler.load_state_dict(ckpt["scheduler"])
        torch.set_rng_state(ckpt["torch_rng"])
        run.step, run.data_offset = ckpt["step"], ckpt["data_offset"]
        run.history, run.val = ckpt["history"], ckpt["val"]

    return pipe.replace(restore=restore)
'''
_WRONG_FAMILY = '''def my_diagnosis():
    return Diagnosis(symptom="the loss jumps after the resume", hypotheses=["a bad batch", "a bad optimizer step"],
                     test="replay from the last checkpoint on other data",
                     prediction="a bad batch: no spike on other data; a bad optimizer step: the spike again",
                     result="spike on other data")


def my_family():
    return "late-spike"
'''

# Work-free: the package's first view of the family, printed for the draw and for its healthy twin,
# compared as text. In the kernel it tells the solution's resume draws from healthy ones (checked by
# running it there); graded, ``show`` is switched off (capstone.PACKAGE_CHECKS) and it raises.
_SHOW_COMPARE = """def detect(pipe):
    import contextlib
    import io

    def seen(p):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            capstone.show(p)
        return buf.getvalue()

    return seen(pipe) != seen(capstone.healthy_twin(pipe))
"""

# Work-free (red team 14): notebook 02's check of a fixed pipeline, ``finite_and_falling``, decides the
# detector and is the oracle of a fix that swaps each part for its default until the check is quiet.
# It told every bug of two families (no-updates, non-finite) from their healthy draws and was not
# switched off: 11/11 against 3/11 for the same notebook with the family's own (switched-off)
# symptom. Graded under a name that draws non-finite (loss-scaled-in-fp16, a name the notebook's
# own printouts never show: the feedback test looks for drawn bugs' names); now in
# capstone.PACKAGE_CHECKS, it raises.
_FINITE_ORACLE = {"diagnosis": _WRONG_FAMILY.replace('"late-spike"', '"non-finite"'),
                  "detect": """from course.reference.diagnose import finite_and_falling as _check

def detect(pipe):
    return _check(pipe) is not None
""",
                  "fix": """import dataclasses as _dc
from course import Pipeline as _Pipeline
from course.reference.pipeline import PARTS as _PARTS

_REFERENCE = {f.name: f.default for f in _dc.fields(_Pipeline) if f.name in _PARTS}


def fix(pipe):
    if _check(pipe) is None:
        return pipe
    for field, ref in _REFERENCE.items():
        if ref is None or getattr(pipe, field) is ref:
            continue
        try:
            if _check(pipe.replace(**{field: ref})) is None:
                return pipe.replace(**{field: ref})
        except Exception:
            pass
    return pipe
"""}
_FINITE_ORACLE_ID = "cap_finite_oracle_13"
assert capstone._choice(_FINITE_ORACLE_ID)[:2] == ("non-finite", "loss-scaled-in-fp16")

_ALT, _ALWAYS_ID, _NEVER_ID = _same_bug("cap_alt_detect_49"), _same_bug("cap_always_fires_5"), _same_bug("cap_never_fires_25")
_FRESH_ID, _NAIVE_ID, _FAMILY_ID = _same_bug("cap_fresh_pipeline_96"), _same_bug("cap_wrong_fix_6"), _same_bug("cap_wrong_family_18")
_DELEGATES_ID = _same_bug("cap_delegates_83")
_SHOW_ID = _same_bug("cap_show_compare_26")
# Copied from a classmate: the solution notebook, untouched (MY_NAME still "solution"), handed in
# under an id whose draw is another family: cap_copied_4 draws validation: val-overlaps-train (the
# first cap_copied_<i> outside the resume family whose draw is cheap to run).
_COPIED = "cap_copied_4"
assert capstone._choice(_COPIED)[0] != capstone._choice("solution")[0]

CASES = [
    Case(A, _ALT, {"my_name": _name(_ALT), "diagnosis": _ALT_DIAGNOSIS, "detect": _ALT_DETECT, "fix": _ALT_FIX},
         expect_lost=set(), alone=True),
    Case(A, _ALWAYS_ID, {"my_name": _name(_ALWAYS_ID), "detect": _ALWAYS}, expect_lost={DIAG_H, DETECT, DETECT_H},
         alone=True),
    Case(A, _NEVER_ID, {"my_name": _name(_NEVER_ID), "diagnosis": _READS_SETTINGS, "detect": _NEVER},
         expect_lost={DIAG_H, DETECT, DETECT_H}, alone=True),
    Case(A, _FRESH_ID, {"my_name": _name(_FRESH_ID), "fix": _FRESH}, expect_lost={FIX, FIX_H}, alone=True),
    Case(A, _NAIVE_ID, {"my_name": _name(_NAIVE_ID), "fix": _NAIVE_RESTORE}, expect_lost={FIX, FIX_H}, alone=True),
    Case(A, _FAMILY_ID, {"my_name": _name(_FAMILY_ID), "diagnosis": _WRONG_FAMILY}, expect_lost={DIAG_H}, alone=True),
    Case(A, _COPIED, {}, expect_lost={NAME_H, DIAG_H, DETECT, DETECT_H, FIX, FIX_H}, alone=True),
    Case(A, _DELEGATES_ID, {"my_name": _name(_DELEGATES_ID), **_DELEGATES},
         expect_lost={DIAG_H, DETECT, DETECT_H, FIX, FIX_H},
         alone=True),
    Case(A, _SHOW_ID, {"my_name": _name(_SHOW_ID), "detect": _SHOW_COMPARE}, expect_lost={DIAG_H, DETECT, DETECT_H},
         alone=True),
    Case(A, _FINITE_ORACLE_ID, {"my_name": _name(_FINITE_ORACLE_ID), **_FINITE_ORACLE},
         expect_lost={DIAG_H, DETECT, DETECT_H, FIX, FIX_H}, alone=True),
]
