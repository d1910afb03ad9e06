"""Targeted wrong submissions of 03_overfit_controls (format: tests/autograde_cases.py)."""
from autograder.grading import Case

_GATE_TESTS = {"test_mask_gate_visible", "test_mask_gate_hidden"}
_COLLATE_TESTS = {"test_collate_sft_visible", "test_collate_sft_pipelines"}

# A collator that masks the prompt but forgets the answer prefix (the assistant markers are supervised).
_COLLATE_PREFIX_SCORED = """from course.data import Batch


def collate_sft(examples, template, pad_id, eos_id):
    rows, n_masked = [], []
    for prompt, answer in examples:
        head = list(template.user) + prompt.tolist()
        rows.append(head + list(template.assistant) + answer.tolist() + [eos_id])
        n_masked.append(len(head))
    width = max(len(r) for r in rows)
    seqs = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        seqs[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    inputs, targets = seqs[:, :-1].clone(), seqs[:, 1:].clone()
    for i, (r, c) in enumerate(zip(rows, n_masked)):
        targets[i, : max(c - 1, 0)] = IGNORE
        targets[i, len(r) - 1:] = IGNORE
    return Batch(inputs, targets, pad_id)
"""

CASES = [
    # the gate is graded by mutation: a constant answer earns nothing
    Case("03_overfit_controls", "gate_always_passes",
         {"mask_gate": "def mask_gate(batch, examples, template, eos_id):\n    return None\n"}, _GATE_TESTS),
    Case("03_overfit_controls", "gate_always_fails",
         {"mask_gate": "def mask_gate(batch, examples, template, eos_id):\n    raise ValueError('bad mask')\n"}, _GATE_TESTS),
    # delegating to the package's gate passes the visible test only (the hidden bank disables it)
    Case("03_overfit_controls", "gate_delegates",
         {"mask_gate": "from course.sft import mask_gate as _pkg_gate\n\n"
                       "def mask_gate(batch, examples, template, eos_id):\n    _pkg_gate(batch, examples, template, eos_id)\n"},
         {"test_mask_gate_hidden"}),
    Case("03_overfit_controls", "collate_prefix_scored", {"collate_sft": _COLLATE_PREFIX_SCORED}, _COLLATE_TESTS),
]
