"""Targeted wrong submissions for notebook 02 (collected by tests/autograde_cases.py)."""
from autograder.grading import Case

A = "02_nan_decision_tree"
STAGE_TESTS = {"test_first_stage_visible", "test_first_stage_forward", "test_first_stage_updates"}

CASES = [
    # a diagnosis that always names the same stage scores nothing: every cell mixes answers
    Case(A, "stage_always_softmax",
         {"first_stage": "def first_nonfinite_stage(p, steps=20, seed=0):\n    return ('softmax', 0)\n"},
         STAGE_TESTS),
    # calling the package's locator passes the visible cell, and no hidden one (it is disabled there)
    Case(A, "stage_delegates",
         {"first_stage": "def first_nonfinite_stage(p, steps=20, seed=0):\n"
                         "    f = locate(p, steps, seed)\n"
                         "    return None if f is None else (f.stage, f.step)\n"},
         {"test_first_stage_forward", "test_first_stage_updates"}),
    # the naive loss: inf on (1000, -1000)
    Case(A, "loss_log_softmax",
         {"stable_loss": "def stable_token_loss(logits, targets):\n"
                         "    logits, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)\n"
                         "    keep = targets != IGNORE\n"
                         "    p = torch.softmax(logits[keep], dim=-1)\n"
                         "    return -torch.log(p.gather(-1, targets[keep].unsqueeze(-1))).mean()\n"},
         {"test_stable_loss"}),
    # one where: right values, NaN gradient at 0
    Case(A, "safe_log_single_where",
         {"safe_log": "def safe_log(p):\n    return torch.where(p > 0, p.log(), torch.zeros_like(p))\n"},
         {"test_safe_log"}),
]
