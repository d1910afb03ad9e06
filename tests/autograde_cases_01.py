"""Targeted submissions for 01_baselines (see tests/autograde_cases.py for the format)."""
from autograder.grading import Case

# Each replacement keeps the solution's function name and signature, so it is exactly one wrong answer.
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

_DIAGNOSE_UPDATES_FIRST = """def diagnose(p, seed=0):
    V = p.language().vocab_size
    if fires(reference_check_batch, batch_at(p, seed, 0), V):
        return "targets-misaligned"
    cause = one_step_report(p, seed).cause()
    if cause != "ok":
        return cause
    model = p.build_model(seed)
    if future_sensitivity(model, V) > 0:
        return "future-visible"
    if past_sensitivity(model, V) == 0:
        return "context-masked"
    if position_sensitivity(model, V) == 0:
        return "positions-unused"
    return "ok"
"""

CHECK_BATCH_TESTS = {"test_check_batch_visible", "test_check_batch_types", "test_check_batch_mask"}
DIAGNOSE_TESTS = {"test_diagnose_visible", "test_diagnose_updates", "test_diagnose_context"}

CASES = [
    # 01: one wrong formula per baseline.
    Case("01_baselines", "log2_uniform",
         {"baselines": "import math\n\ndef uniform_loss(V):\n    return math.log2(V)\n\n"
                       "from course.baselines import unigram_entropy as masked_unigram_entropy\n"},
         {"test_uniform_loss"}),
    Case("01_baselines", "entropy_counts_ignored",
         {"baselines": "import math\n\ndef uniform_loss(V):\n    return math.log(V)\n\n"
                       "def masked_unigram_entropy(targets):\n"
                       "    p = torch.bincount(targets.flatten() % 1000).double()\n"
                       "    p = p[p > 0] / p.sum()\n"
                       "    return -(p * p.log()).sum().item()\n"},
         {"test_masked_unigram_entropy"}),
    # 01: the batch check graded by mutation: always raising or never raising earns nothing there,
    # and a check without the dtype/shape/range clauses loses only the cell that tests them.
    Case("01_baselines", "check_always_raises",
         {"check_batch": "def check_batch(batch, vocab_size):\n    raise ValueError('bug')\n"},
         CHECK_BATCH_TESTS),
    Case("01_baselines", "check_never_raises",
         {"check_batch": "def check_batch(batch, vocab_size):\n    return None\n"},
         CHECK_BATCH_TESTS),
    Case("01_baselines", "check_delegates",
         {"check_batch": "from course.checks import check_batch as _pkg_check\n\n"
                         "def check_batch(batch, vocab_size):\n    _pkg_check(batch, vocab_size)\n"},
         {"test_check_batch_types", "test_check_batch_mask"}),
    Case("01_baselines", "check_without_types", {"check_batch": _CHECK_BATCH_WITHOUT_TYPES},
         {"test_check_batch_types"}),
    # 01: a namer that always answers "ok", and one that runs the update test first (so a model whose
    # position embedding gets no gradient is called "no-grad", not "positions-unused").
    Case("01_baselines", "diagnose_always_ok",
         {"diagnose": "def diagnose(p, seed=0):\n    return 'ok'\n"}, DIAGNOSE_TESTS),
    Case("01_baselines", "diagnose_updates_first", {"diagnose": _DIAGNOSE_UPDATES_FIRST},
         {"test_diagnose_context"}),
]
