"""Targeted submissions for 01_baselines (see tests/autograde_cases.py for the format).

Every graded exercise has an alternative correct answer (written another way: full marks), a
realistic wrong one and a degenerate one (a constant, a delegation to the package, or one that reads
the pipeline's settings), each with the exact test cells it must lose. A replacement of an answer
cell replaces the whole cell, so each keeps the names that later cells use (``logit_changes`` in the
``detect`` cell, ``name_cause`` for ``fix``).
"""
from autograder.grading import Case

# ----- exercise 1: baselines ------------------------------------------------------------------------
_ENTROPY_FLOAT32 = """def masked_unigram_entropy(targets):
    scored = targets[targets != IGNORE]
    if scored.numel() == 0:
        return float("nan")
    c = torch.bincount(scored).float()
    p = c[c > 0] / c.sum()
    return -(p * p.log()).sum()
"""
_ENTROPY_COUNTS_IGNORED = """def masked_unigram_entropy(targets):
    p = torch.bincount(targets.flatten() % 1000).double()
    p = p[p > 0] / p.sum()
    return -(p * p.log()).sum().item()
"""

# ----- exercise 2: the batch check ------------------------------------------------------------------
_CHECK_BATCH_WITHOUT_TYPES = """def check_batch(batch, vocab_size):
    x, y, pad = batch.inputs, batch.targets, batch.pad_id
    scored = y != IGNORE
    if not scored.any():
        raise ValueError("no target is scored")
    if (y[scored] == pad).any():
        raise ValueError("padding scored")
    real_next = x[:, 1:] != pad
    if ((y[:, :-1] != x[:, 1:]) & scored[:, :-1] & real_next).any():
        raise ValueError("targets are not the inputs shifted by one")
    if (real_next & ~scored[:, :-1]).any():
        raise ValueError("a target before a real token is not scored")
"""
_CHECK_BATCH_ASSERTS = """def check_batch(batch, vocab_size):
    x, y = batch.inputs, batch.targets
    assert x.dtype == torch.int64 and y.dtype == torch.int64, "ids must be int64"
    assert x.ndim == 2 and x.shape == y.shape, "inputs and targets must be (B, T) of one shape"
    assert ((x >= 0) & (x < vocab_size)).all(), "an input id is out of range"
    m = y != IGNORE
    assert m.any(), "nothing is scored"
    assert ((y[m] >= 0) & (y[m] < vocab_size) & (y[m] != batch.pad_id)).all(), "a scored target is out of range or PAD"
    nxt = x[:, 1:]
    real = nxt != batch.pad_id
    assert torch.equal(m[:, :-1] & real, real), "a target before a real token is not scored"
    assert (y[:, :-1][real] == nxt[real]).all(), "targets are not the next inputs"
"""

# ----- exercise 3a: detect (the probes in logit_changes are kept as in the solution) -----------------
_LOGIT_CHANGES = """def logit_changes(pipe, seed=0):
    model = pipe.build_model(seed)
    S = pipe.language().n_symbols
    ids = torch.randint(0, S, (8, 8), generator=torch.Generator().manual_seed(seed))
    base = logits_at(model, ids)
    future = ids.clone()
    future[:, -1] = (future[:, -1] + 1) % S
    past = ids.clone()
    past[:, :-1] = (past[:, :-1] + 1) % S
    return {"future": (logits_at(model, future)[:, :-1] - base[:, :-1]).abs().max().item(),
            "past": (logits_at(model, past)[:, -1] - base[:, -1]).abs().max().item(),
            "position": (logits_at(model, ids, start=8) - base).abs().max().item()}

"""
_DETECT_OTHER_WAY = _LOGIT_CHANGES + """def detect(pipe, seed=0):
    try:  # a pipeline that crashes under the test is broken (the exercise's rule)
        b = batch_at(pipe, seed, 0)
        ch = logit_changes(pipe, seed)
        run, before = one_step(pipe, seed)
    except Exception:
        return True
    if (b.targets[:, :-1] != b.inputs[:, 1:]).any():
        return True
    if ch["future"] != 0 or min(ch["past"], ch["position"]) < 1e-4:
        return True
    now = {n: p.detach() for n, p in run.model.named_parameters()}
    if any(torch.equal(before[n], now[n]) for n in now):
        return True
    delta = torch.cat([(now[n] - before[n]).flatten() for n in now]).norm()
    return bool(delta < 1e-6 * torch.cat([t.flatten() for t in before.values()]).norm())
"""
# realistic: only the model probes and the shift, no update test (misses the "no updates" family)
_DETECT_NO_UPDATE_TEST = _LOGIT_CHANGES + """def detect(pipe, seed=0):
    b = batch_at(pipe, seed, 0)
    if not torch.equal(b.targets[:, :-1], b.inputs[:, 1:]):
        return True
    ch = logit_changes(pipe, seed)
    return ch["future"] > 1e-6 or ch["past"] < 1e-6 or ch["position"] < 1e-6
"""
# degenerate: delegates to the package's probes and update report
_DETECT_DELEGATES = _LOGIT_CHANGES + """from course.toolkit.checks import update_report, future_sensitivity

def detect(pipe, seed=0):
    model, V = pipe.build_model(seed), pipe.language().vocab_size
    return future_sensitivity(model, V) > 0 or not one_step_report(pipe, seed).ok
"""

# ----- exercise 3b: name_cause -----------------------------------------------------------------------
_NAME_OTHER_WAY = """def name_cause(pipe, seed=0):
    b = batch_at(pipe, seed, 0)
    if (b.targets[:, :-1] != b.inputs[:, 1:]).any():
        return "targets-misaligned"
    ch = logit_changes(pipe, seed)
    for name, fired in (("future-visible", ch["future"] != 0), ("context-masked", ch["past"] == 0),
                        ("positions-unused", ch["position"] == 0)):
        if fired:
            return name
    run, _ = one_step(pipe, seed)
    opt = run.optimizer
    params = dict(run.model.named_parameters())
    if all(not p.requires_grad for p in params.values()):
        return "requires-grad-off"
    in_opt = [id(p) for g in opt.param_groups for p in g["params"]]
    if not all(id(p) in in_opt for p in params.values()):
        return "not-in-optimizer"
    if all(g["lr"] == 0.0 for g in opt.param_groups):
        return "lr-zero"
    if all(len(opt.state[p]) == 0 for p in params.values()):
        return "no-step"
    grads = [p.grad.flatten() for p in params.values() if p.grad is not None]
    if torch.linalg.vector_norm(torch.cat(grads).double()) < 1e-8:
        return "grads-vanish"
    return "healthy"
"""
# realistic: forgets the vanishing-gradient case (clip-to-zero is only among the hidden draws)
_NAME_NO_VANISH = """def name_cause(pipe, seed=0):
    batch = batch_at(pipe, seed, 0)
    if not torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:]):
        return "targets-misaligned"
    ch = logit_changes(pipe, seed)
    if ch["future"] > 1e-6:
        return "future-visible"
    if ch["past"] < 1e-6:
        return "context-masked"
    if ch["position"] < 1e-6:
        return "positions-unused"
    run, before = one_step(pipe, seed)
    params = list(run.model.parameters())
    if not any(p.requires_grad for p in params):
        return "requires-grad-off"
    held = {id(p) for group in run.optimizer.param_groups for p in group["params"]}
    if any(id(p) not in held for p in params):
        return "not-in-optimizer"
    if max(group["lr"] for group in run.optimizer.param_groups) == 0:
        return "lr-zero"
    if not run.optimizer.state:
        return "no-step"
    return "healthy"
"""
# degenerate: reads the pipeline's settings (which show the healthy values on every draw)
_NAME_READS_SETTINGS = """def name_cause(pipe, seed=0):
    if pipe.lr == 0:
        return "lr-zero"
    if not pipe.model.use_positions:
        return "positions-unused"
    return "healthy"
"""

# ----- exercise 3c: fix -------------------------------------------------------------------------------
_FIX_OWN_PARTS = """def fix(pipe):
    cause = name_cause(pipe)
    if cause == "targets-misaligned":
        def collate(windows, pad_id):  # full windows: inputs, and the same windows one step on
            return Batch(windows[:, :-1].clone(), windows[:, 1:].clone(), pad_id)
        return pipe.replace(collate=collate)
    if cause in ("positions-unused", "context-masked", "future-visible"):
        return pipe.replace(prepare=lambda model: model)
    return pipe
"""
# realistic: "reset everything that could be the cause": replaces parts that were not broken too
_FIX_BOTH_PARTS = """import course.reference.pipeline

def fix(pipe):
    return pipe.replace(collate=next_token_batch, prepare=course.reference.pipeline.prepare_model)
"""

CHECK_BATCH_TESTS = {"test_check_batch_visible", "test_check_batch_types", "test_check_batch_mask"}
NAME_TESTS = {"test_name_cause_visible", "test_name_cause_hidden"}

CASES = [
    # 01, exercise 1: a wrong formula, an alternative correct one and a delegation for each baseline.
    Case("01_baselines", "log2_uniform_float32_entropy",
         {"baselines": "def uniform_loss(V):\n    return math.log2(V)\n\n" + _ENTROPY_FLOAT32},
         {"test_uniform_loss"}),
    Case("01_baselines", "tensor_uniform_entropy_counts_ignored",
         {"baselines": "def uniform_loss(V):\n    return torch.tensor(V, dtype=torch.float64).log()\n\n"
                       + _ENTROPY_COUNTS_IGNORED},
         {"test_masked_unigram_entropy"}),
    Case("01_baselines", "baselines_delegate",
         {"baselines": "from course.toolkit.baselines import uniform_loss\n"
                       "from course.toolkit.baselines import unigram_entropy as masked_unigram_entropy\n"},
         {"test_uniform_loss", "test_masked_unigram_entropy"}),
    # 01, exercise 2: the batch check graded by mutation: always raising earns nothing, a delegation
    # to the package's check fails every cell (switched off, visible cell too), a check without the
    # dtype/shape/range clauses loses the visible cell (int32 inputs) and the hidden cell of those
    # clauses, an assert-based check passes.
    Case("01_baselines", "check_always_raises",
         {"check_batch": "def check_batch(batch, vocab_size):\n    raise ValueError('bug')\n"},
         CHECK_BATCH_TESTS),
    Case("01_baselines", "check_delegates",
         {"check_batch": "from course.toolkit.checks import check_batch as _pkg_check\n\n"
                         "def check_batch(batch, vocab_size):\n    _pkg_check(batch, vocab_size)\n"},
         CHECK_BATCH_TESTS),
    Case("01_baselines", "check_without_types", {"check_batch": _CHECK_BATCH_WITHOUT_TYPES},
         {"test_check_batch_visible", "test_check_batch_types"}),
    Case("01_baselines", "check_with_asserts", {"check_batch": _CHECK_BATCH_ASSERTS}, set()),
    # 01, exercise 3a: the falsifying test.
    Case("01_baselines", "detect_other_way", {"detect": _DETECT_OTHER_WAY}, set()),
    Case("01_baselines", "detect_without_update_test", {"detect": _DETECT_NO_UPDATE_TEST}, {"test_detect"}),
    Case("01_baselines", "detect_delegates", {"detect": _DETECT_DELEGATES}, {"test_detect"}),
    # 01, exercise 3b: the cause. A namer that reads settings names nothing (and the fix built on it
    # leaves the broken part alone); one that forgets vanishing gradients loses only the hidden cell.
    Case("01_baselines", "name_other_way", {"name_cause": _NAME_OTHER_WAY}, set()),
    Case("01_baselines", "name_without_vanishing_grads", {"name_cause": _NAME_NO_VANISH},
         {"test_name_cause_hidden"}),
    Case("01_baselines", "name_reads_settings", {"name_cause": _NAME_READS_SETTINGS},
         NAME_TESTS | {"test_fix"}),
    # 01, exercise 3c: the fix, graded by training the fixed pipeline.
    Case("01_baselines", "fix_own_parts", {"fix": _FIX_OWN_PARTS}, set()),
    Case("01_baselines", "fix_replaces_both_parts", {"fix": _FIX_BOTH_PARTS}, {"test_fix"}),
    Case("01_baselines", "fix_noop", {"fix": "def fix(pipe):\n    return pipe\n"}, {"test_fix"}),
]
