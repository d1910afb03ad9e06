"""Targeted submissions for 00_start_here (see tests/autograde_cases.py for the format).

Listed in the order ``autograder.grading.pack`` groups them: first every alternative correct
answer, then one wrong answer per exercise in each later group. A wrong
``name_cause`` also costs ``test_fix`` and ``test_diagnosis_record``: the reference fix and record
are built on ``name_cause``, as a learner's would be.
"""
from autograder.grading import Case

A = "00_start_here"
T_STUCK, T_DETECT, T_NAME, T_FIX, T_RECORD = ("test_loss_is_stuck", "test_detect", "test_name_cause",
                                              "test_fix", "test_diagnosis_record")
NAME_CASCADE = {T_NAME, T_FIX, T_RECORD}

# ----- loss_is_stuck --------------------------------------------------------------------------------
STUCK_ALT = ("import statistics\n\n"
             "def loss_is_stuck(losses, window=20, min_drop=0.05):\n"
             "    drop = statistics.mean(losses[:window]) - statistics.mean(losses[len(losses) - window:])\n"
             "    return not drop >= min_drop\n")
STUCK_ABS = ("def loss_is_stuck(losses, window=20, min_drop=0.05):\n"   # a rising loss counts as moving
             "    first = sum(losses[:window]) / window\n"
             "    last = sum(losses[-window:]) / window\n"
             "    return abs(first - last) < min_drop\n")
STUCK_FIXED_DROP = ("def loss_is_stuck(losses, window=20, min_drop=0.05):\n"   # ignores min_drop
                    "    first = sum(losses[:window]) / window\n"
                    "    last = sum(losses[-window:]) / window\n"
                    "    return first - last < 0.05\n")
STUCK_REVERSED = ("def loss_is_stuck(losses, window=20, min_drop=0.05):\n"
                  "    return sum(losses[-window:]) / window - sum(losses[:window]) / window < min_drop\n")
STUCK_ALWAYS = "def loss_is_stuck(losses, window=20, min_drop=0.05):\n    return True\n"

# ----- detect ---------------------------------------------------------------------------------------
DETECT_ALT = ("import warnings\n"   # two real steps of the training loop, schedule included
              "from course.reference.train import start, train_steps\n\n"
              "def detect(pipe):\n"
              "    try:\n"   # a pipeline that crashes under the test is broken (the exercise's rule)
              "        run = start(pipe, seed=3)\n"
              "        before = [p.detach().clone() for p in run.model.parameters()]\n"
              "        with warnings.catch_warnings():\n"
              "            warnings.simplefilter('ignore')\n"
              "            train_steps(run, 2, eval_every=0)\n"
              "    except Exception:\n"
              "        return True\n"
              "    return min(float((p.detach() - b).abs().max()) for p, b in zip(run.model.parameters(), before)) < 1e-6\n")
DETECT_ALL = ("def detect(pipe):\n"   # fires only when *no* tensor moves: misses a single stuck tensor
              "    s = one_step(pipe)\n"
              "    return all((s.after[n] - s.before[n]).abs().max().item() <= 1e-5 for n in s.before)\n")
DETECT_LOSS = ("def detect(pipe):\n"   # the symptom, not the test: misses a pipeline whose loss still falls
               "    return loss_is_stuck(train(pipe, seed=0, eval_every=0).history['loss'], window=10)\n")
DETECT_SETTINGS = ("def detect(pipe):\n"   # reads the settings, which are the healthy ones in every draw
                   "    return pipe.lr == 0 or (pipe.clip is not None and pipe.clip < 1e-6)\n")
DETECT_DELEGATES = ("def detect(pipe):\n"   # the package's update_report is switched off while graded
                    "    return not one_step_report(pipe).ok\n")

# ----- name_cause -----------------------------------------------------------------------------------
NAME_ALT = ("import course.reference.train\n\n"
            "def name_cause(pipe):\n"
            "    model = pipe.build_model(1)\n"
            "    params = list(model.parameters())\n"
            "    if any(not p.requires_grad for p in params):\n"
            "        return 'prepare'\n"
            "    opt = pipe.make_optimizer(model, pipe)\n"
            "    held = [p for g in opt.param_groups for p in g['params']]\n"
            "    if len(held) != len(params) or not all(any(h is p for h in held) for p in params):\n"
            "        return 'make_optimizer'\n"
            "    if opt.param_groups[0]['lr'] == 0.0:\n"
            "        return 'optimizer_factory'\n"
            "    batch = course.reference.train.batch_at(pipe, 1, 0)\n"
            "    pipe.loss_fn(model(batch.inputs), batch).backward()\n"
            "    before = [p.detach().clone() for p in params]\n"
            "    pipe.update(opt)\n"
            "    if min((p.detach() - b).abs().max().item() for p, b in zip(params, before)) < 1e-6:\n"
            "        return 'update'\n"
            "    return 'healthy'\n")
NAME_NO_MEMBERSHIP = ("def name_cause(pipe):\n"   # never asks which tensors the optimizer holds
                      "    s = one_step(pipe)\n"
                      "    if not all(p.requires_grad for p in s.model.parameters()):\n"
                      "        return 'prepare'\n"
                      "    if all((s.after[n] - s.before[n]).abs().max().item() > 1e-5 for n in s.before):\n"
                      "        return 'healthy'\n"
                      "    if s.optimizer.param_groups[0]['lr'] == 0:\n"
                      "        return 'optimizer_factory'\n"
                      "    return 'update'\n")
NAME_SETTINGS = ("def name_cause(pipe):\n"   # reads pipe.lr, the healthy setting, instead of the optimizer's
                 "    s = one_step(pipe)\n"
                 "    params = list(s.model.parameters())\n"
                 "    if not all(p.requires_grad for p in params):\n"
                 "        return 'prepare'\n"
                 "    held = [p for g in s.optimizer.param_groups for p in g['params']]\n"
                 "    if {id(p) for p in held} != {id(p) for p in params}:\n"
                 "        return 'make_optimizer'\n"
                 "    if pipe.lr == 0:\n"
                 "        return 'optimizer_factory'\n"
                 "    if any((s.after[n] - s.before[n]).abs().max().item() <= 1e-5 for n in s.before):\n"
                 "        return 'update'\n"
                 "    return 'healthy'\n")

# ----- fix ------------------------------------------------------------------------------------------
FIX_ALT = ("import course.reference.pipeline as reference\n\n"
           "def fix(pipe):\n"
           "    part = name_cause(pipe)\n"
           "    if part == 'prepare':\n"
           "        return pipe.replace(prepare=reference.prepare_model)\n"
           "    if part == 'make_optimizer':\n"
           "        return pipe.replace(make_optimizer=reference.build_optimizer)\n"
           "    if part == 'optimizer_factory':\n"
           "        return pipe.replace(optimizer_factory=reference.adamw)\n"
           "    if part == 'update':\n"
           "        return pipe.replace(update=reference.apply_update)\n"
           "    return pipe\n")
FIX_SHOTGUN = ("from course.reference.pipeline import prepare_model, build_optimizer, adamw, apply_update\n\n"
               "def fix(pipe):\n"   # replaces every suspect part: works, but changes parts that were not broken
               "    return pipe.replace(prepare=prepare_model, make_optimizer=build_optimizer,\n"
               "                        optimizer_factory=adamw, update=apply_update)\n")
FIX_NOTHING = "def fix(pipe):\n    return pipe\n"
# Red team, 2026-12-07: no test of the pipeline. In the graded call's process no frame holds the
# touched fields, so the pipeline comes back unchanged; in the kernel's re-run the test's frame
# says which fields the bug touched, and a stand-in that puts itself back when called made the two
# choices look the same (2 of 2 before the verdict was taken from the choice made apart). Since
# 2026-12-07 nothing of the fix runs in the kernel: the broken draws fail on the choice made apart,
# and on the healthy draw the stand-ins it installs in the graded call's process are a package
# change the fix's check finds before the symptom trains.
FIX_READS_THE_TEST = ("import sys\n"
                      "import course.exercises.mystery as _M\n"
                      "from course.reference.pipeline import healthy_twin\n\n"
                      "def fix(pipe):\n"
                      "    try:\n"
                      "        seen = sys._getframe(1).f_locals\n"
                      "    except Exception:\n"
                      "        return pipe\n"
                      "    allowed = seen.get('allowed') or ()\n"
                      "    for name in ('_frozen', '_kept_verdict'):\n"
                      "        real = _M.__dict__.get(name)\n"
                      "        if real is not None:\n"
                      "            def once(*a, _real=real, _name=name, **k):\n"
                      "                setattr(_M, _name, _real)\n"
                      "                return seen.get('apart') if _name == '_frozen' else ()\n"
                      "            setattr(_M, name, once)\n"
                      "    twin = healthy_twin(pipe)\n"
                      "    return pipe.replace(**{f: getattr(twin, f) for f in allowed})\n")
# Work-free: a setting of a class whose metaclass hook, run when the grader describes the class
# after the fix returned, reads the touched fields from the test's frames and writes the reference
# parts (and the setting back) into the pipeline about to be checked and trained (2 of 2 through
# nbgrader before check_fix changed). It now fails on the choice made apart (a setting that is not
# broken changed); since 2026-12-07 the class is described and trained only in the graded call's
# process, where no frame holds the touched fields, and tests/test_course_mystery.py pins that
# describing it runs no hook. Its control, FIX_HOOK_UNUSED, is the same hook beside the
# solution's fix, its class never returned.
_FIX_HOOK = ("import sys\n"
             "import course\n\n"
             "class _Rewrites(type):\n"
             "    def __getattribute__(cls, name):\n"
             "        if name.startswith('__dataclass'):\n"
             "            try:\n"
             "                f = sys._getframe(0)\n"
             "                while f is not None and not {'fixed', 'allowed', 'pipe'} <= set(f.f_locals):\n"
             "                    f = f.f_back\n"
             "                if f is not None:\n"
             "                    seen, reference = f.f_locals, course.Pipeline()\n"
             "                    object.__setattr__(seen['fixed'], 'lr', seen['pipe'].lr)\n"
             "                    for field in seen['allowed']:\n"
             "                        part = object.__getattribute__(reference, field)\n"
             "                        object.__setattr__(seen['fixed'], field, part)\n"
             "            except Exception:\n"
             "                pass\n"
             "        return type.__getattribute__(cls, name)\n\n"
             "class _Setting(metaclass=_Rewrites):\n"
             "    pass\n\n")
FIX_HOOK = _FIX_HOOK + "def fix(pipe):\n    return pipe.replace(lr=_Setting())\n"
FIX_HOOK_UNUSED = _FIX_HOOK + FIX_ALT

# ----- diagnosis_record -----------------------------------------------------------------------------
_RECORD_HEAD = ("from course.exercises.record import Diagnosis\n\n"
                "def diagnosis_record(pipe):\n"
                "    return Diagnosis(\n"
                "        symptom='loss flat for 40 steps',\n"
                "        hypotheses=['no signal', 'a part of the update is broken'],\n"
                "        test='one step, then the parts one by one',\n"
                "        prediction='no signal: every tensor moves',\n")
RECORD_ALT = ("from course.exercises.record import Diagnosis\n\n"   # its own checks, not name_cause
              "def diagnosis_record(pipe):\n"
              "    s = one_step(pipe)\n"
              "    params = list(s.model.parameters())\n"
              "    held = {id(p) for g in s.optimizer.param_groups for p in g['params']}\n"
              "    checks = [('prepare', any(not p.requires_grad for p in params)),\n"
              "              ('make_optimizer', held != {id(p) for p in params}),\n"
              "              ('optimizer_factory', s.optimizer.param_groups[0]['lr'] == 0),\n"
              "              ('update', detect(pipe))]\n"
              "    found = next((name for name, failed in checks if failed), 'healthy')\n"
              "    return Diagnosis('flat loss', ['nothing learnable in the targets', 'no update'],\n"
              "                     'four checks on one step', 'exactly one check fails if no update', found)\n")
RECORD_CONSTANT = _RECORD_HEAD + "        result='make_optimizer',\n    )\n"   # right for the own mystery only
RECORD_REVEAL = _RECORD_HEAD + ("        result=__import__('course.exercises.mystery').exercises.mystery.reveal(pipe),\n"
                                "    )\n")   # switched off while graded

# Realistic wrong: compares the first and last single losses, not the windows' means: one noisy step
# decides.
STUCK_ENDPOINTS = ("def loss_is_stuck(losses, window=20, min_drop=0.05):\n"
                   "    return losses[0] - losses[-1] < min_drop\n")
# Realistic wrong: a record of junk text: every field filled, nothing in it refers to anything.
RECORD_JUNK = ("from course.exercises.record import Diagnosis\n\n"
               "def diagnosis_record(pipe):\n"
               "    return Diagnosis('x', ['a', 'b'], 't', 'p', name_cause(pipe))\n")
RECORD_UNRELATED = ("from course.exercises.record import Diagnosis\n\n"
                    "def diagnosis_record(pipe):\n"
                    "    return Diagnosis('lorem ipsum dolor', ['sit amet', 'consectetur adipiscing'],\n"
                    "                     'sed eiusmod tempor', 'incididunt labore magna', name_cause(pipe))\n")

CASES = [
    # group 1: every alternative correct answer
    Case(A, "stuck_alt_statistics", {"loss_is_stuck": STUCK_ALT}, set()),
    Case(A, "detect_alt_two_real_steps", {"detect": DETECT_ALT}, set()),
    Case(A, "name_alt_own_probes", {"name_cause": NAME_ALT}, set()),
    Case(A, "fix_alt_if_chain", {"fix": FIX_ALT}, set()),
    Case(A, "record_alt_own_checks", {"diagnosis_record": RECORD_ALT}, set()),
    # group 2
    Case(A, "stuck_abs_rising_not_stuck", {"loss_is_stuck": STUCK_ABS}, {T_STUCK}),
    Case(A, "detect_all_tensors", {"detect": DETECT_ALL}, {T_DETECT}),
    Case(A, "name_no_membership", {"name_cause": NAME_NO_MEMBERSHIP}, NAME_CASCADE),
    # group 3
    Case(A, "stuck_ignores_min_drop", {"loss_is_stuck": STUCK_FIXED_DROP}, {T_STUCK}),
    Case(A, "detect_loss_curve", {"detect": DETECT_LOSS}, {T_DETECT}),
    Case(A, "name_reads_settings", {"name_cause": NAME_SETTINGS}, NAME_CASCADE),
    # group 4
    Case(A, "stuck_reversed", {"loss_is_stuck": STUCK_REVERSED}, {T_STUCK}),
    Case(A, "detect_reads_settings", {"detect": DETECT_SETTINGS}, {T_DETECT}),
    Case(A, "fix_shotgun", {"fix": FIX_SHOTGUN}, {T_FIX}),
    Case(A, "record_result_pasted", {"diagnosis_record": RECORD_CONSTANT}, {T_RECORD}),
    # group 5
    Case(A, "stuck_always", {"loss_is_stuck": STUCK_ALWAYS}, {T_STUCK}),
    Case(A, "detect_delegates", {"detect": DETECT_DELEGATES}, {T_DETECT}),
    Case(A, "fix_returns_pipe", {"fix": FIX_NOTHING}, {T_FIX}),
    Case(A, "fix_setting_class_rewrites", {"fix": FIX_HOOK}, {T_FIX}),
    Case(A, "fix_reads_the_test", {"fix": FIX_READS_THE_TEST}, {T_FIX}),
    Case(A, "fix_hook_beside_a_real_fix", {"fix": FIX_HOOK_UNUSED}, set()),
    Case(A, "record_reads_reveal", {"diagnosis_record": RECORD_REVEAL}, {T_RECORD}),
    # group 6: realistic wrong answers found in review
    Case(A, "stuck_compares_endpoints", {"loss_is_stuck": STUCK_ENDPOINTS}, {T_STUCK}),
    Case(A, "record_junk_text", {"diagnosis_record": RECORD_JUNK}, {T_RECORD}),
    Case(A, "record_fields_unrelated", {"diagnosis_record": RECORD_UNRELATED}, {T_RECORD}),
]
