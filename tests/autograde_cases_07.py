"""Targeted submissions for 07_stale_resume (see tests/autograde_cases.py for the format).

Every graded exercise has an alternative correct answer (full marks), a realistic wrong answer and a
degenerate one (a constant, a delegation to the package function that is switched off, or one that
reads the pipeline's reprs), each with the exact test cells it must lose. The four answer cells are
independent (``fix`` does not call ``name_cause``), so the cases pack into a few submissions.
"""
from autograder.grading import Case

A = "07_stale_resume"
DIFF, DETECT, CAUSE, FIX = "test_manifest_diff", "test_mystery_detect", "test_mystery_cause", "test_mystery_fix"

# ----- manifest_diff -------------------------------------------------------------------------------
# Another way: the symmetric difference of the (name, value) pairs; empty components kept as [].
_DIFF_ALT = """def manifest_diff(old, new):
    out = {}
    for c in ("code", "config", "data", "environment"):
        pairs = set(old[c].items()) ^ set(new[c].items())
        out[c] = sorted({name for name, _ in pairs})
    return out
"""

# Realistic wrong: walks the old manifest's entries only, so an entry the new one added is missed.
_DIFF_OLD_KEYS_ONLY = """def manifest_diff(old, new):
    out = {}
    for c in manifest.COMPONENTS:
        names = sorted(k for k, v in old[c].items() if new[c].get(k) != v)
        if names:
            out[c] = names
    return out
"""

# Realistic wrong: every top-level block, the run block included (it differs for every run).
_DIFF_WITH_RUN = """def manifest_diff(old, new):
    out = {}
    for c in old:
        a, b = old[c], new.get(c, {})
        names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if names:
            out[c] = names
    return out
"""

# ----- detect --------------------------------------------------------------------------------------
# Another way: inspect the restored state itself instead of training on after the resume.
_DETECT_STATE = """def detect(pipe):
    try:  # a pipeline that crashes under the test is broken (the exercise's rule)
        return _restored_wrongly(pipe)
    except Exception:
        return True


def _restored_wrongly(pipe):
    from course.reference.train import save_checkpoint
    run = train_steps(start(pipe, 1), 5, eval_every=0)
    rng = torch.get_rng_state()
    buf = io.BytesIO()
    save_checkpoint(run, buf)
    new_lr = pipe.lr * 3
    back = resume(pipe.replace(lr=new_lr), io.BytesIO(buf.getvalue()))
    if not torch.equal(torch.get_rng_state(), rng):
        return True
    if back.step != run.step or back.data_offset != run.data_offset:
        return True
    a, b = run.optimizer.state_dict()["state"], back.optimizer.state_dict()["state"]
    if a.keys() != b.keys() or any(not torch.equal(a[i][k], b[i][k]) for i in a for k in a[i]):
        return True
    sched = back.scheduler
    if sched.last_epoch != run.scheduler.last_epoch or sched.base_lrs != [new_lr]:
        return True
    want = new_lr * warmup_then_linear(sched.last_epoch, pipe.warmup, pipe.steps)
    return abs(back.optimizer.param_groups[0]["lr"] - want) > 1e-12 * want
"""

# Realistic wrong: split against unbroken only. A stale learning rate needs a changed config to show.
_DETECT_SPLIT_ONLY = """def detect(pipe):
    unbroken = train_steps(start(pipe, 0), 16, eval_every=0)
    resumed, _ = checkpoint.split_run(pipe, 0, 8, 8)
    return bool(checkpoint.differences(unbroken, resumed))
"""

# ----- name_cause ----------------------------------------------------------------------------------
# Another way: the batch the first resumed step trains on tells the data cursor from the RNG.
_NAME_ALT = """from course.reference.train import batch_at

def name_cause(pipe):
    seed = 2
    unbroken = train_steps(start(pipe, seed), 12, eval_every=0)
    resumed, data = checkpoint.split_run(pipe, seed, 6, 6)
    if resumed.history["lr"] != unbroken.history["lr"]:
        return "scheduler"
    seen = []
    again = resume(pipe, io.BytesIO(data))
    train_steps(again, 1, eval_every=0, on_step=lambda run, step, batch: seen.append(batch.inputs.clone()))
    if not torch.equal(seen[0], batch_at(pipe, seed, 6).inputs):
        return "data-cursor"
    if resumed.history["loss"][6] != unbroken.history["loss"][6]:
        return "rng"
    if checkpoint.differences(unbroken, resumed):
        return "optimizer-state"
    new = pipe.replace(lr=pipe.lr * 2)
    fresh = train_steps(start(new, seed), 12, eval_every=0)
    moved = train_steps(resume(new, io.BytesIO(data)), 6, eval_every=0)
    return "stale-lr" if moved.history["lr"][6:] != fresh.history["lr"][6:] else "healthy"
"""

# Realistic wrong: a departure at the first resumed loss is always blamed on the RNG.
_NAME_ALWAYS_RNG = """def name_cause(pipe):
    unbroken = train_steps(start(pipe, 0), 16, eval_every=0)
    resumed, data = checkpoint.split_run(pipe, 0, 8, 8)
    d = checkpoint.differences(unbroken, resumed)
    if "lr" in d:
        return "scheduler"
    if d.get("loss") == 8:
        return "rng"
    if d:
        return "optimizer-state"
    new = pipe.replace(lr=pipe.lr / 2)
    moved = train_steps(resume(new, io.BytesIO(data)), 8, eval_every=0)
    wanted = [new.lr * warmup_then_linear(s, new.warmup, new.steps) for s in range(8, 16)]
    return "stale-lr" if moved.history["lr"][8:] != wanted else "healthy"
"""

# Degenerate: reads the part's repr (every part is an opaque <part>).
_NAME_READS_REPR = """def name_cause(pipe):
    text = repr(pipe.restore)
    for key, cause in (("stale", "stale-lr"), ("rng", "rng"), ("cursor", "data-cursor"),
                       ("scheduler", "scheduler"), ("optimizer", "optimizer-state")):
        if key in text:
            return cause
    return "healthy"
"""

# ----- fix -----------------------------------------------------------------------------------------
# Another way: edit the checkpoint's state dicts before loading them.
_FIX_ALT = """import copy

def restore_keeping_config(run, ckpt):
    mine = run.optimizer.state_dict()["param_groups"]
    opt_sd = copy.deepcopy(ckpt["optimizer"])
    for saved, conf in zip(opt_sd["param_groups"], mine):
        saved.update({k: v for k, v in conf.items() if k not in ("params", "lr")})
    sched_sd = dict(ckpt["scheduler"])
    sched_sd["base_lrs"] = [g["initial_lr"] for g in mine]
    run.model.load_state_dict(ckpt["model"])
    run.optimizer.load_state_dict(opt_sd)
    run.scheduler.load_state_dict(sched_sd)
    sched = run.scheduler
    lrs = [b * f(sched.last_epoch) for b, f in zip(sched.base_lrs, sched.lr_lambdas)]
    for g, lr in zip(run.optimizer.param_groups, lrs):
        g["lr"] = lr
    torch.set_rng_state(ckpt["torch_rng"])
    run.step, run.data_offset = ckpt["step"], ckpt.get("data_offset", 0)
    run.history, run.val = ckpt["history"], ckpt["val"]


def fix(pipe):
    return pipe.replace(restore=restore_keeping_config)
"""

# Realistic wrong: the quick fix (current lr from the config, base rates left stale).
_FIX_QUICK = """def restore_keeping_config(run, ckpt):
    run.model.load_state_dict(ckpt["model"])
    run.optimizer.load_state_dict(ckpt["optimizer"])
    run.scheduler.load_state_dict(ckpt["scheduler"])
    for g, fn in zip(run.optimizer.param_groups, run.scheduler.lr_lambdas):
        g["lr"] = run.pipe.lr * fn(run.scheduler.last_epoch)
    torch.set_rng_state(ckpt["torch_rng"])
    run.step, run.data_offset = ckpt["step"], ckpt["data_offset"]
    run.history, run.val = ckpt["history"], ckpt["val"]


def fix(pipe):
    return pipe.replace(restore=restore_keeping_config)
"""

# Realistic wrong: "never load stale optimizer state": the learning rate is right, the moments are gone.
_FIX_FRESH_OPTIMIZER = """def restore_keeping_config(run, ckpt):
    run.model.load_state_dict(ckpt["model"])
    sched = run.scheduler
    sched.last_epoch = ckpt["scheduler"]["last_epoch"]
    for g, fn, base in zip(run.optimizer.param_groups, sched.lr_lambdas, sched.base_lrs):
        g["lr"] = base * fn(sched.last_epoch)
    torch.set_rng_state(ckpt["torch_rng"])
    run.step, run.data_offset = ckpt["step"], ckpt["data_offset"]
    run.history, run.val = ckpt["history"], ckpt["val"]


def fix(pipe):
    return pipe.replace(restore=restore_keeping_config)
"""

# Degenerate: the package's reference restore (switched off while the fixed pipeline resumes).
_FIX_DELEGATES = """def restore_keeping_config(run, ckpt):
    checkpoint.restore_state(run, ckpt)


def fix(pipe):
    return pipe.replace(restore=checkpoint.restore_state)
"""

# Realistic wrong: keeps the configured learning rate (and its schedule's base) but loads every other
# hyperparameter (weight decay, betas) from the checkpoint: a new weight decay is lost.
_FIX_LR_ONLY = """def restore_keeping_config(run, ckpt):
    opt, sched = run.optimizer, run.scheduler
    run.model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    sched.base_lrs = [run.pipe.lr for _ in opt.param_groups]
    for g, fn, base in zip(opt.param_groups, sched.lr_lambdas, sched.base_lrs):
        g["initial_lr"] = base
        g["lr"] = base * fn(sched.last_epoch)
    sched._last_lr = [g["lr"] for g in opt.param_groups]
    torch.set_rng_state(ckpt["torch_rng"])
    run.step, run.data_offset = ckpt["step"], ckpt["data_offset"]
    run.history, run.val = ckpt["history"], ckpt["val"]


def fix(pipe):
    return pipe.replace(restore=restore_keeping_config)
"""

# Red team, 2026-12-07: the stale restore itself, which, run inside the fix's check in the graded
# call's process, rebinds ``builtins.abs`` to answer 0 to the notebook's comparisons (it tells them by
# a refused frame read), so every tolerance of the symptom passed: 2 of 2. The check now compares
# ``builtins`` after the fix's code ran, and the rebinding fails the draw. Its control defines the
# same stand-in beside the notebook's own fix and never installs it.
_ABS_STAND_IN = """import builtins as _builtins
import sys as _sys

_real_abs = _builtins.abs


def _no_difference(x):  # 0 when the caller is notebook code (the test's check), else abs
    try:
        _sys._getframe(1)
    except Exception:
        return 0.0
    return _real_abs(x)

"""
_FIX_REBINDS_ABS = _ABS_STAND_IN + """
def restore_keeping_config(run, ckpt):
    run.model.load_state_dict(ckpt["model"])
    run.optimizer.load_state_dict(ckpt["optimizer"])  # the stale resume itself
    run.scheduler.load_state_dict(ckpt["scheduler"])
    _builtins.abs = _no_difference
    torch.set_rng_state(ckpt["torch_rng"])
    run.step, run.data_offset = ckpt["step"], ckpt["data_offset"]
    run.history, run.val = ckpt["history"], ckpt["val"]


def fix(pipe):
    return pipe.replace(restore=restore_keeping_config)
"""

CASES = [
    # manifest_diff
    Case(A, "diff_symmetric_pairs", {"manifest_diff": _DIFF_ALT}, set()),
    Case(A, "diff_old_keys_only", {"manifest_diff": _DIFF_OLD_KEYS_ONLY}, {DIFF}),
    Case(A, "diff_with_run_block", {"manifest_diff": _DIFF_WITH_RUN}, {DIFF}),
    Case(A, "diff_constant", {"manifest_diff": "def manifest_diff(old, new):\n    return {'config': ['lr']}\n"}, {DIFF}),
    Case(A, "diff_delegates",
         {"manifest_diff": "def manifest_diff(old, new):\n    return manifest.diff(old, new)\n"}, {DIFF}),
    # detect
    Case(A, "detect_restored_state", {"detect": _DETECT_STATE}, set()),
    Case(A, "detect_split_only", {"detect": _DETECT_SPLIT_ONLY}, {DETECT}),
    Case(A, "detect_always_true", {"detect": "def detect(pipe):\n    return True\n"}, {DETECT}),
    Case(A, "detect_delegates",
         {"detect": "def detect(pipe):\n    return bool(checkpoint.resume_check(pipe))\n"}, {DETECT}),
    # name_cause
    Case(A, "cause_batch_seen", {"name_cause": _NAME_ALT}, set()),
    Case(A, "cause_always_rng", {"name_cause": _NAME_ALWAYS_RNG}, {CAUSE}),
    Case(A, "cause_reads_repr", {"name_cause": _NAME_READS_REPR}, {CAUSE}),
    # fix
    Case(A, "fix_edits_state_dicts", {"fix": _FIX_ALT}, set()),
    Case(A, "fix_quick", {"fix": _FIX_QUICK}, {FIX}),
    Case(A, "fix_keeps_only_the_lr", {"fix": _FIX_LR_ONLY}, {FIX}),
    Case(A, "fix_fresh_optimizer", {"fix": _FIX_FRESH_OPTIMIZER}, {FIX}),
    Case(A, "fix_delegates", {"fix": _FIX_DELEGATES}, {FIX}),
    Case(A, "fix_returns_pipe", {"fix": "def restore_keeping_config(run, ckpt):\n    pass\n\n\ndef fix(pipe):\n    return pipe\n"},
         {FIX}),
    Case(A, "fix_rebinds_abs", {"fix": _FIX_REBINDS_ABS}, {FIX}),
    Case(A, "fix_abs_beside_a_real_fix", {"fix": _ABS_STAND_IN + _FIX_ALT}, set()),
]
