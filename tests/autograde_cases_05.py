"""Targeted submissions for 05_validation_gap (see tests/autograde_cases.py for the format).

Every graded exercise has an alternative correct answer (full marks), a realistic wrong answer and a
degenerate one (a constant, a delegation to the package function that is switched off, or one that
reads the pipeline's settings), each with the exact test cells it must lose. ``fix`` calls the
learner's ``name_cause``, so a wrong ``name_cause`` loses the fix cell too.
"""
from autograder.grading import Case

A = "05_validation_gap"
DETECT, CAUSE, FIX = "test_mystery_detect", "test_mystery_cause", "test_mystery_fix"

# ----- shingle_jaccard -----------------------------------------------------------------------------
_JACCARD_UNFOLD = """def shingle_jaccard(a, b, n):
    def grams(seq):
        t = torch.as_tensor(seq, dtype=torch.long).flatten()
        if len(t) < n:
            return set()
        return set(map(tuple, t.unfold(0, n, 1).tolist()))
    sa, sb = grams(a), grams(b)
    if not sa and not sb:
        return 0.0
    return len(sa.intersection(sb)) / len(sa.union(sb))
"""

# ----- group_split ---------------------------------------------------------------------------------
# Correct, and copies a tensor with torch.tensor(tensor): torch warns on stderr, which must not cost
# the cell (the test runs learner code under captured_warnings).
_GROUP_SPLIT_WARNS = """def group_split(groups, val_fraction, seed):
    groups = torch.tensor(groups)
    ids = sorted(set(groups.tolist()))
    k = min(len(ids) - 1, max(1, round(val_fraction * len(ids))))
    g = torch.Generator().manual_seed(seed)
    chosen = {ids[i] for i in torch.randperm(len(ids), generator=g)[:k].tolist()}
    in_val = torch.tensor([int(x) in chosen for x in groups.tolist()])
    idx = torch.arange(len(groups))
    return idx[~in_val], idx[in_val]
"""

# ----- detect --------------------------------------------------------------------------------------
# Another order, other thresholds, like with like on the trained model, all flags computed.
_DETECT_ALT = """def detect(pipe):
    try:  # a pipeline that crashes under the test is broken (the exercise's rule)
        return _flags(pipe)
    except Exception:
        return True


def _flags(pipe):
    run = valgap.trained(pipe)
    probe = valgap.training_probe(pipe, 32)
    values = [evaluate(run.model, probe) for _ in range(2)] + [valgap.reference_loss(run.model, probe, "val")]
    eval_bug = max(values) - min(values) > 1e-7
    tw = pipe.windows("train")
    a = overlap.audit(tw, pipe.windows("val"))
    f = overlap.audit(tw, valgap.fresh(pipe).windows("val"))
    leak = (a.near - f.near) > 0.2 or (a.exact - f.exact) > 0.2
    fresh_loss = valgap.reference_loss(run.model, valgap.fresh(pipe), "val")
    overfit = fresh_loss - valgap.seen_loss(run, k=4) > 0.25
    shifted = valgap.reference_loss(run.model, pipe, "val") - fresh_loss > 0.08
    return bool(eval_bug or leak or overfit or shifted)
"""

# Realistic wrong: losses only, no overlap audit. Copies score like fresh windows on a model that has
# not memorised them, so leakage goes unseen.
_DETECT_NO_AUDIT = """def detect(pipe):
    model = pipe.build_model(0)
    probe = valgap.training_probe(pipe, 64)
    first, again = evaluate(model, probe), evaluate(model, probe)
    if first != again or abs(first - valgap.reference_loss(model, probe, "val")) > 1e-6:
        return True
    run = valgap.trained(pipe)
    fresh_loss = valgap.reference_loss(run.model, valgap.fresh(pipe), "val")
    return fresh_loss - valgap.seen_loss(run) > 0.3 or valgap.reference_loss(run.model, pipe, "val") - fresh_loss > 0.1
"""

# ----- name_cause ----------------------------------------------------------------------------------
_NAME_ALT = """def name_cause(pipe):
    tw = pipe.windows("train")
    a = overlap.audit(tw, pipe.windows("val"))
    f = overlap.audit(tw, valgap.fresh(pipe).windows("val"))
    leak = (a.near - f.near) > 0.2
    m = pipe.build_model(1)
    probe = valgap.training_probe(pipe, 32)
    values = {evaluate(m, probe), evaluate(m, probe), valgap.reference_loss(m, probe, "val")}
    if len(values) > 1:
        return "eval-bug"
    if leak:
        return "leakage"
    run = valgap.trained(pipe)
    seen = valgap.seen_loss(run, k=4)
    fresh_loss = valgap.reference_loss(run.model, valgap.fresh(pipe), "val")
    val = valgap.reference_loss(run.model, pipe, "val")
    gaps = {"overfitting": fresh_loss - seen - 0.25, "shift": val - fresh_loss - 0.08}
    worst = max(gaps, key=gaps.get)
    return worst if gaps[worst] > 0 else "healthy"
"""

# Realistic wrong: scores the pipeline's *settings'* training windows (training_probe) instead of the
# batches the run trained on. A training set shrunk inside the batch stream is invisible to that.
_NAME_PROBE_NOT_SEEN = """def name_cause(pipe):
    model = pipe.build_model(0)
    probe = valgap.training_probe(pipe, 64)
    first, again = evaluate(model, probe), evaluate(model, probe)
    if first != again or abs(first - valgap.reference_loss(model, probe, "val")) > 1e-6:
        return "eval-bug"
    tw, honest = pipe.windows("train"), valgap.fresh(pipe)
    shared, chance = overlap.audit(tw, pipe.windows("val")), overlap.audit(tw, honest.windows("val"))
    if shared.exact > chance.exact + 0.1 or shared.near > chance.near + 0.1:
        return "leakage"
    run = valgap.trained(pipe)
    train_loss = valgap.reference_loss(run.model, valgap.training_probe(pipe), "val")
    fresh_loss = valgap.reference_loss(run.model, honest, "val")
    if fresh_loss - train_loss > 0.3:
        return "overfitting"
    if valgap.reference_loss(run.model, pipe, "val") - fresh_loss > 0.1:
        return "shift"
    return "healthy"
"""

# Degenerate: reads the pipeline's settings and reprs (what the old exercise allowed). Every part is
# an opaque <part> and every setting is the healthy one, so this says "healthy" (or guesses).
_NAME_READS_SETTINGS = """def name_cause(pipe):
    if isinstance(pipe.val_source, (valgap.OtherSource,)):
        return "shift"
    if isinstance(pipe.val_source, (valgap.TrainCopies, valgap.TrainContinuations)):
        return "leakage"
    if pipe.eval_loss_fn is not None and "Smoothed" in repr(pipe.eval_loss_fn):
        return "eval-bug"
    if pipe.n_train < 1000:
        return "overfitting"
    return ["healthy", "shift"][len(repr(pipe)) % 2]
"""

# ----- fix -----------------------------------------------------------------------------------------
_FIX_ALT = """from course.reference.pipeline import set_eval_mode

def fix(pipe):
    cause = name_cause(pipe)
    if cause == "healthy":
        return pipe
    if cause == "overfitting":
        return pipe.replace(batches=None)
    if cause != "eval-bug":
        return pipe.replace(val_source=valgap.SameSource(pipe.val_seed))
    m = pipe.build_model(2)
    probe = valgap.training_probe(pipe, 32)
    with_loss = probe.replace(eval_loss_fn=pipe.loss_fn)
    a, b = evaluate(m, with_loss), evaluate(m, with_loss)
    if a == b and abs(a - valgap.reference_loss(m, probe, "val")) < 1e-9:
        return pipe.replace(eval_loss_fn=pipe.loss_fn)
    return pipe.replace(eval_mode=set_eval_mode)
"""

# Realistic wrong: an eval bug "fixed" by replacing both evaluation parts without testing which one
# is broken (and overfitting treated with weight decay, a setting): changes what was not broken.
_FIX_BOTH_EVAL_PARTS = """import course.reference.pipeline

def fix(pipe):
    cause = name_cause(pipe)
    if cause == "eval-bug":
        return pipe.replace(eval_mode=course.reference.pipeline.set_eval_mode, eval_loss_fn=None)
    if cause in ("shift", "leakage"):
        return pipe.replace(val_source=None)
    if cause == "overfitting":
        return pipe.replace(weight_decay=0.1)
    return pipe
"""

# Degenerate: a fresh reference pipeline of the same size (loses the draw's own configuration).
_FIX_FRESH_PIPELINE = """def fix(pipe):
    return MBASE
"""

CASES = [
    # shingle_jaccard
    Case(A, "jaccard_unfold", {"shingle_jaccard": _JACCARD_UNFOLD}, set()),
    Case(A, "jaccard_of_tokens",  # Jaccard of token sets instead of n-token shingle sets
         {"shingle_jaccard": "def shingle_jaccard(a, b, n):\n"
                             "    sa, sb = {int(t) for t in a}, {int(t) for t in b}\n"
                             "    return len(sa & sb) / len(sa | sb) if sa | sb else 0.0\n"},
         {"test_shingle_jaccard"}),
    Case(A, "jaccard_delegates",  # the package function, kept by reference: switched off all the same
         {"shingle_jaccard": "_pkg = overlap.shingle_jaccard\n\n"
                             "def shingle_jaccard(a, b, n):\n    return _pkg(a, b, n)\n"},
         {"test_shingle_jaccard"}),
    # group_split
    Case(A, "split_copies_tensor_with_warning", {"group_split": _GROUP_SPLIT_WARNS}, set()),
    Case(A, "split_items_not_groups",  # a random split of items, blind to groups
         {"group_split": "def group_split(groups, val_fraction, seed):\n"
                         "    perm = torch.randperm(len(groups), generator=torch.Generator().manual_seed(seed))\n"
                         "    k = round(val_fraction * len(groups))\n"
                         "    return perm[k:].sort().values, perm[:k].sort().values\n"},
         {"test_group_split"}),
    Case(A, "split_delegates",
         {"group_split": "def group_split(groups, val_fraction, seed):\n"
                         "    return overlap.group_split(groups, val_fraction, seed)\n"},
         {"test_group_split"}),
    # detect
    Case(A, "detect_other_thresholds", {"detect": _DETECT_ALT}, set()),
    Case(A, "detect_without_audit", {"detect": _DETECT_NO_AUDIT}, {DETECT}),
    Case(A, "detect_always_true", {"detect": "def detect(pipe):\n    return True\n"}, {DETECT}),
    Case(A, "detect_delegates",
         {"detect": "def detect(pipe):\n    return bool(valgap.problems(pipe))\n"}, {DETECT}),
    # name_cause (fix calls it)
    Case(A, "cause_other_order", {"name_cause": _NAME_ALT}, set()),
    Case(A, "cause_probe_not_seen", {"name_cause": _NAME_PROBE_NOT_SEEN}, {CAUSE, FIX}),
    Case(A, "cause_reads_settings", {"name_cause": _NAME_READS_SETTINGS}, {CAUSE, FIX}),
    Case(A, "cause_delegates",
         {"name_cause": "def name_cause(pipe):\n"
                        "    c = valgap.eval_path_check(valgap.trained(pipe).model, pipe)\n"
                        "    return 'healthy' if c.agrees else 'eval-bug'\n"},
         {CAUSE, FIX}),
    # fix
    Case(A, "fix_other_references", {"fix": _FIX_ALT}, set()),
    Case(A, "fix_both_eval_parts", {"fix": _FIX_BOTH_EVAL_PARTS}, {FIX}),
    Case(A, "fix_returns_pipe", {"fix": "def fix(pipe):\n    return pipe\n"}, {FIX}),
    Case(A, "fix_fresh_pipeline", {"fix": _FIX_FRESH_PIPELINE}, {FIX}),
]
