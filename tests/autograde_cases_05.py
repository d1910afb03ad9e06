"""Targeted submissions for 05_validation_gap (see tests/autograde_cases.py for the format)."""
from autograder.grading import Case

DIAGNOSE_TESTS = {"test_diagnose_visible", "test_diagnose_eval_bugs", "test_diagnose_data"}

# Reads the gaps with the eval path alone: an eval bug inflates train, fresh and validation alike,
# so it is called "ok" or "shift", never "eval-bug". Everything else is the solution's logic.
_DIAGNOSE_WITHOUT_LIKE_WITH_LIKE = """def diagnose(model, pipe):
    train_windows = pipe.windows("train")
    fresh_pipe = valgap.fresh(pipe)
    val_audit = overlap.audit(train_windows, pipe.windows("val"))
    chance = overlap.audit(train_windows, fresh_pipe.windows("val"))
    if val_audit.exact > 0 or val_audit.near > chance.near + 0.1:
        return "leakage"
    train_loss = evaluate(model, valgap.training_probe(pipe))
    fresh_loss, val_loss = evaluate(model, fresh_pipe), evaluate(model, pipe)
    if fresh_loss - train_loss > 0.1:
        return "overfitting"
    if val_loss - fresh_loss > 0.1:
        return "shift"
    return "ok"
"""

CASES = [
    # always the same answer earns nothing in any diagnosis cell
    Case("05_validation_gap", "diagnose_always_overfitting",
         {"diagnose": "def diagnose(model, pipe):\n    return 'overfitting'\n"}, DIAGNOSE_TESTS),
    # no like-with-like test: loses exactly the cells that hold eval bugs
    Case("05_validation_gap", "diagnose_without_like_with_like", {"diagnose": _DIAGNOSE_WITHOUT_LIKE_WITH_LIKE},
         {"test_diagnose_visible", "test_diagnose_eval_bugs"}),
    # Jaccard of token sets instead of n-token shingle sets
    Case("05_validation_gap", "jaccard_of_tokens",
         {"shingle_jaccard": "def shingle_jaccard(a, b, n):\n"
                             "    sa, sb = {int(t) for t in a}, {int(t) for t in b}\n"
                             "    return len(sa & sb) / len(sa | sb) if sa | sb else 0.0\n"},
         {"test_shingle_jaccard"}),
    # a random split of items, blind to groups
    Case("05_validation_gap", "split_items_not_groups",
         {"group_split": "def group_split(groups, val_fraction, seed):\n"
                         "    perm = torch.randperm(len(groups), generator=torch.Generator().manual_seed(seed))\n"
                         "    k = round(val_fraction * len(groups))\n"
                         "    return perm[k:].sort().values, perm[:k].sort().values\n"},
         {"test_group_split"}),
]
