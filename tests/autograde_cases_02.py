"""Targeted submissions for notebook 02 (collected by tests/autograde_cases.py).

For every graded exercise: an alternative correct answer (full marks), a realistic wrong one and a
degenerate one (a constant, a delegation to the package, or an answer read off the pipeline's
settings), each with the exact test cells it must lose. The mystery's (b) and (c) call the learner's
earlier answers (``first_nonfinite_stage``, ``name_cause``), so a wrong earlier answer also loses
the later cells that depend on it: those are listed too.
"""
from autograder.grading import Case

A = "02_nan_decision_tree"
STAGE_TESTS = {"test_first_stage_visible", "test_first_stage_forward", "test_first_stage_updates"}
DETECT_TESTS = {"test_mystery_detect_visible", "test_mystery_detect_hidden"}
CAUSE_TESTS = {"test_mystery_cause_visible", "test_mystery_cause_hidden"}
FIX_TESTS = {"test_mystery_fix_visible", "test_mystery_fix_hidden"}
MYSTERY_TESTS = DETECT_TESTS | CAUSE_TESTS | FIX_TESTS

_STAGE_ALT = """def first_nonfinite_stage(p, steps=20, seed=0):
    def bad(e):
        t = e.tensor
        if t.dtype.is_floating_point:
            return bool(t.isnan().any() or t.isinf().any())
        if e.limit is None or t.numel() == 0 or t.dtype == torch.bool:
            return False
        return bool(t.min() < 0 or t.max() >= e.limit)
    hits = [e for e in trace(p, steps, seed) if bad(e)]
    return (hits[0].stage, hits[0].step) if hits else None
"""

_STAGE_FLOATS_ONLY = """def first_nonfinite_stage(p, steps=20, seed=0):
    for e in trace(p, steps, seed):
        if e.tensor.is_floating_point() and not torch.isfinite(e.tensor).all():
            return (e.stage, e.step)
    return None
"""

_DETECT_OWN_LOOP = """def detect(pipe):
    try:  # a pipeline that crashes under the test is broken (the exercise's rule)
        return _own_loop(pipe)
    except Exception:
        return True


def _own_loop(pipe):
    run = start(pipe, 0)
    model, opt = run.model, run.optimizer
    params = list(model.parameters())
    model.train()
    for step in range(HORIZON):
        batch = batch_at(pipe, 0, step)
        logits = model(batch.inputs)
        loss = pipe.loss_fn(logits, batch)
        if not torch.isfinite(logits).all() or not torch.isfinite(loss).all():
            return True
        opt.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
        if any(q.grad is not None and not torch.isfinite(q.grad).all() for q in params):
            return True
        if pipe.clip is not None:
            torch.nn.utils.clip_grad_norm_(params, pipe.clip)
        pipe.update(opt)
        run.scheduler.step()
        if any(not torch.isfinite(q).all() for q in params):
            return True
    return False
"""

_DETECT_FIRST_LOSS_ONLY = """def detect(pipe):
    run = start(pipe, 0)
    batch = batch_at(pipe, 0, 0)
    loss = pipe.loss_fn(run.model(batch.inputs), batch)
    return not bool(torch.isfinite(loss))
"""

_CAUSE_HEAD = """def name_cause(pipe):
    found = first_nonfinite_stage(pipe, HORIZON, 0)
    if found is None:
        return "healthy"
    stage, step = found
"""

_CAUSE_ALT = _CAUSE_HEAD + """    table = {("embeddings", True): "embedding-scaled-by-inf", ("softmax", True): "causal-mask-strict",
             ("loss", True): "loss-scaled-in-fp16", ("grads", True): "log-guarded-by-where",
             ("params", True): "adam-eps-zero", ("optimizer", True): "adam-eps-zero"}
    return table.get((stage, step == 0), "lr-sign-typo")
"""

# the decision by stage alone: an overflow after some updates (a gradient) is named the where bug
_CAUSE_IGNORES_WHEN = _CAUSE_HEAD + """    return {"embeddings": "embedding-scaled-by-inf", "softmax": "causal-mask-strict",
            "loss": "loss-scaled-in-fp16", "grads": "log-guarded-by-where",
            "params": "adam-eps-zero", "optimizer": "adam-eps-zero"}[stage]
"""

_CAUSE_DELEGATES = _CAUSE_HEAD + """    from course.toolkit.nonfinite import advise, when_of
    return advise(when_of(step, stage), stage).examples[0]
"""

_FIX_BY_INTERVENTION = """def fix(pipe):
    for field in ("prepare", "loss_fn", "optimizer_factory", "collate", "update", "make_optimizer"):
        candidate = pipe.replace(**{field: REFERENCE_PARTS[field]})
        if first_nonfinite_stage(candidate, HORIZON, 0) is None:  # not detect: a case may break it
            return candidate
    return pipe
"""

_FIX_EVERYTHING = """def fix(pipe):
    return pipe.replace(prepare=REFERENCE_PARTS["prepare"], loss_fn=REFERENCE_PARTS["loss_fn"],
                        optimizer_factory=REFERENCE_PARTS["optimizer_factory"])
"""

CASES = [
    # Exercise 1: a stable loss
    Case(A, "loss_cross_entropy",
         {"stable_loss": "def stable_token_loss(logits, targets):\n"
                         "    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),\n"
                         "                           ignore_index=IGNORE)\n"},
         set()),
    Case(A, "loss_log_softmax",  # the naive loss: inf on (1000, -1000)
         {"stable_loss": "def stable_token_loss(logits, targets):\n"
                         "    logits, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)\n"
                         "    keep = targets != IGNORE\n"
                         "    p = torch.softmax(logits[keep], dim=-1)\n"
                         "    return -torch.log(p.gather(-1, targets[keep].unsqueeze(-1))).mean()\n"},
         {"test_stable_loss"}),
    Case(A, "loss_2d_only",  # right on (N, V) logits only: the visible test now tries (..., V) and IGNORE
         {"stable_loss": "def stable_token_loss(logits, targets):\n    return F.cross_entropy(logits, targets)\n"},
         {"test_stable_loss"}),
    Case(A, "loss_constant",
         {"stable_loss": "def stable_token_loss(logits, targets):\n    return torch.tensor(2000.0)\n"},
         {"test_stable_loss"}),
    # Exercise 2: a safe log
    Case(A, "safe_log_masked_fill",
         {"safe_log": "def safe_log(p):\n    return p.masked_fill(p <= 0, 1.0).log()\n"},
         set()),
    Case(A, "safe_log_single_where",  # one where: right values, NaN gradient at 0
         {"safe_log": "def safe_log(p):\n    return torch.where(p > 0, p.log(), torch.zeros_like(p))\n"},
         {"test_safe_log"}),
    Case(A, "safe_log_nan_to_num",  # right values, NaN gradient at 0
         {"safe_log": "def safe_log(p):\n    return torch.log(p).nan_to_num(neginf=0.0)\n"},
         {"test_safe_log"}),
    Case(A, "safe_log_zeros",
         {"safe_log": "def safe_log(p):\n    return torch.zeros_like(p)\n"},
         {"test_safe_log"}),
    # Exercise 3: the first non-finite stage (the mystery's (a)-(c) build on it)
    Case(A, "stage_alternative", {"first_stage": _STAGE_ALT}, set()),
    Case(A, "stage_floats_only", {"first_stage": _STAGE_FLOATS_ONLY},
         {"test_first_stage_visible", "test_first_stage_forward"}),
    # a diagnosis that always names the same stage scores nothing, and breaks what builds on it
    Case(A, "stage_always_softmax",
         {"first_stage": "def first_nonfinite_stage(p, steps=20, seed=0):\n    return ('softmax', 0)\n"},
         STAGE_TESTS | MYSTERY_TESTS),
    # calling the package's locator: switched off in every test cell, visible ones too
    Case(A, "stage_delegates",
         {"first_stage": "def first_nonfinite_stage(p, steps=20, seed=0):\n"
                         "    f = locate(p, steps, seed)\n"
                         "    return None if f is None else (f.stage, f.step)\n"},
         STAGE_TESTS | MYSTERY_TESTS),
    # Mystery (a): detect
    Case(A, "detect_own_loop", {"mystery_detect": _DETECT_OWN_LOOP}, set()),
    Case(A, "detect_first_loss_only", {"mystery_detect": _DETECT_FIRST_LOSS_ONLY}, DETECT_TESTS),
    Case(A, "detect_always", {"mystery_detect": "def detect(pipe):\n    return True\n"}, DETECT_TESTS),
    Case(A, "detect_reads_lr", {"mystery_detect": "def detect(pipe):\n    return pipe.lr > 0.01\n"}, DETECT_TESTS),
    Case(A, "detect_delegates_locate",
         {"mystery_detect": "def detect(pipe):\n    return locate(pipe, HORIZON, 0) is not None\n"}, DETECT_TESTS),
    Case(A, "detect_delegates_train",
         {"mystery_detect": "def detect(pipe):\n"
                            "    from course.reference.train import train\n"
                            "    return train(pipe, HORIZON, 0, eval_every=0).stopped is not None\n"}, DETECT_TESTS),
    # Mystery (b): name the cause (the fix calls it, so a wrong name loses the fix cells too)
    Case(A, "cause_alternative", {"mystery_cause": _CAUSE_ALT}, set()),
    Case(A, "cause_ignores_when", {"mystery_cause": _CAUSE_IGNORES_WHEN}, CAUSE_TESTS | FIX_TESTS),
    Case(A, "cause_constant", {"mystery_cause": "def name_cause(pipe):\n    return 'healthy'\n"},
         CAUSE_TESTS | FIX_TESTS),
    Case(A, "cause_delegates_tree", {"mystery_cause": _CAUSE_DELEGATES}, CAUSE_TESTS | FIX_TESTS),
    # Mystery (c): the fix
    Case(A, "fix_by_intervention", {"mystery_fix": _FIX_BY_INTERVENTION}, set()),
    Case(A, "fix_everything", {"mystery_fix": _FIX_EVERYTHING}, FIX_TESTS),
    Case(A, "fix_lower_lr", {"mystery_fix": "def fix(pipe):\n    return pipe.replace(lr=pipe.lr / 10)\n"}, FIX_TESTS),
    Case(A, "fix_identity", {"mystery_fix": "def fix(pipe):\n    return pipe\n"}, FIX_TESTS),
    Case(A, "fix_fresh_pipeline", {"mystery_fix": "def fix(pipe):\n    return MYSTERY_BASE\n"}, FIX_TESTS),
]
