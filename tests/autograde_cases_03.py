"""Targeted submissions of 03_overfit_controls (format: tests/autograde_cases.py).

For every graded exercise: an alternative correct answer (full marks), a realistic wrong one and a
degenerate one (constant, delegating to the package, or reading the pipeline's settings), each with
the exact test cells it must lose. The mystery fix of the solution calls the solution's
``name_cause``, so a ``name_cause`` that cannot name a bug also loses the fix cell."""
from autograder.grading import Case

_A = "03_overfit_controls"
_GATE_TESTS = {"test_mask_gate_visible", "test_mask_gate_hidden"}
_COLLATE_TESTS = {"test_collate_sft_visible", "test_collate_sft_pipelines"}
_DETECT_TESTS = {"test_mystery_detect_visible", "test_mystery_detect_hidden"}

# A collator that masks the prompt but forgets the answer prefix (the assistant markers are supervised).
_COLLATE_PREFIX_SCORED = """from course.toolkit.batch import Batch


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

# The right rows, but float32 (torch.zeros' default): token ids must be torch.long, and torch.equal
# alone would take this batch for its int64 twin.
_COLLATE_FLOAT = """from course.toolkit.batch import Batch


def collate_sft(examples, template, pad_id, eos_id):
    rows, n_context = [], []
    for prompt, answer in examples:
        context = list(template.user) + prompt.tolist() + list(template.assistant)
        rows.append(context + answer.tolist() + [eos_id])
        n_context.append(len(context))
    width = max(len(r) for r in rows)
    seqs = torch.zeros(len(rows), width) + pad_id
    for i, r in enumerate(rows):
        seqs[i, : len(r)] = torch.tensor(r)
    inputs, targets = seqs[:, :-1].clone(), seqs[:, 1:].clone()
    for i, (r, c) in enumerate(zip(rows, n_context)):
        targets[i, : max(c - 1, 0)] = IGNORE
        targets[i, len(r) - 1:] = IGNORE
    return Batch(inputs, targets, pad_id)
"""

DETECT_ALT = '''def detect(pipe):
    """True if ``pipe`` cannot learn correctly."""
    try:  # a pipeline that crashes under the test is broken (the exercise's rule)
        return _fails(pipe)
    except Exception:
        return True


def _fails(pipe):
    V = pipe.language().vocab_size
    model = pipe.build_model(1)
    opt = pipe.make_optimizer(model, pipe)
    b = tiny_batch(batch_at(pipe, 1, 0), 8)
    out = pipe.loss_fn(model(b.inputs), b)
    if not out.requires_grad or not (abs(out.item() - math.log(V)) < 1.5):
        return True
    held = set()
    for group in opt.param_groups:
        held.update(id(q) for q in group["params"])
    if not all(id(q) in held for q in model.parameters() if q.requires_grad):
        return True
    opt.zero_grad()
    out.backward()
    first = model.head.bias.grad.clone()
    opt.zero_grad()
    pipe.loss_fn(model(b.inputs), b).backward()
    if (model.head.bias.grad - first).abs().max() > 1e-3 * first.abs().max():
        return True
    losses = overfit_pipe(pipe, b, 60, seed=1)
    return bool(losses[-1] > fit_floor(b) + 0.2)
'''
DETECT_LOSS_FALLS = '''def detect(pipe):
    """The loss falls, so it learns."""
    model, opt, batch = fresh(pipe)
    losses = overfit_pipe(pipe, batch, 40)
    return not losses[-1] < 0.5 * losses[0]
'''
DETECT_OVERFIT_ONLY = '''def detect(pipe):
    """Only the tiny-batch overfit against the lowest possible loss."""
    model, opt, batch = fresh(pipe)
    losses = overfit_pipe(pipe, batch, 40)
    return not losses[-1] <= fit_floor(batch) + 0.1
'''
DETECT_ALWAYS = '''def detect(pipe):
    return True
'''
DETECT_PREFLIGHT = '''from course.reference.diagnose import preflight_pipeline as _pf


def detect(pipe):
    return not _pf(pipe, overfit_steps=40).ok
'''
DETECT_LR = '''def detect(pipe):
    return pipe.lr < 0.01
'''
CAUSE_ALT = '''def name_cause(pipe):
    """Loss scale first, then what one real step moves, then the gradient twice."""
    V = pipe.language().vocab_size
    model = pipe.build_model(3)
    opt = pipe.make_optimizer(model, pipe)
    b = tiny_batch(batch_at(pipe, 3, 0), 8)
    with torch.no_grad():
        if pipe.loss_fn(model(b.inputs), b).item() > 2 * math.log(V):
            return "loss-broadcast"
    names = [n for n, _ in model.named_parameters()]
    before = {n: q.detach().clone() for n, q in model.named_parameters()}
    pipeline_step(pipe)(model, opt, b, pipe.loss_fn)
    moved = {n for n, q in model.named_parameters() if not torch.equal(before[n], q)}
    if not moved:
        return "missing-step"
    if moved != set(names):
        return "embedding-not-in-optimizer"
    for g in opt.param_groups:
        g["lr"] = 0.0
    opt.zero_grad()
    pipe.loss_fn(model(b.inputs), b).backward()
    g1 = model.head.weight.grad.norm().item()
    opt.zero_grad()
    pipe.loss_fn(model(b.inputs), b).backward()
    g2 = model.head.weight.grad.norm().item()
    return "zero-grad-forgotten" if g2 > 1.5 * g1 else "healthy"
'''
CAUSE_GRAD_FIRST = '''def name_cause(pipe):
    """The gradient test before the membership test."""
    model, opt, batch = fresh(pipe)
    V = pipe.language().vocab_size
    with torch.no_grad():
        if abs(pipe.loss_fn(model(batch.inputs), batch).item() - math.log(V)) > 1.0:
            return "loss-broadcast"
    grads = []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        pipe.loss_fn(model(batch.inputs), batch).backward()
        grads.append([q.grad.clone() for q in model.parameters()])
    if not all(torch.allclose(a, c, rtol=1e-4, atol=1e-8) for a, c in zip(*grads)):
        return "zero-grad-forgotten"
    held = {id(q) for g in opt.param_groups for q in g["params"]}
    if any(id(q) not in held for q in model.parameters()):
        return "embedding-not-in-optimizer"
    before = [q.detach().clone() for q in model.parameters()]
    pipeline_step(pipe)(model, opt, batch, pipe.loss_fn)
    if all(torch.equal(a, q) for a, q in zip(before, model.parameters())):
        return "missing-step"
    return "healthy"
'''
CAUSE_REVEAL = '''from course.exercises import mystery as _m


def name_cause(pipe):
    return _m.reveal(pipe)
'''
CAUSE_CONSTANT = '''def name_cause(pipe):
    return "healthy"
'''
FIX_ALT = '''from course.reference.pipeline import build_optimizer, token_cross_entropy, apply_update


def fix(pipe):
    """Its own tests, one per part."""
    model = pipe.build_model(2)
    b = tiny_batch(batch_at(pipe, 2, 0), 8)
    with torch.no_grad():
        if pipe.loss_fn(model(b.inputs), b).item() > 2 * math.log(pipe.language().vocab_size):
            return pipe.replace(loss_fn=token_cross_entropy)
    opt = pipe.make_optimizer(model, pipe)
    ids = {id(q) for g in opt.param_groups for q in g["params"]}
    if len(ids) < len(list(model.parameters())):
        return pipe.replace(make_optimizer=build_optimizer)
    opt.zero_grad()
    pipe.loss_fn(model(b.inputs), b).backward()
    g1 = model.head.bias.grad.clone()
    opt.zero_grad()
    pipe.loss_fn(model(b.inputs), b).backward()
    if not torch.allclose(model.head.bias.grad, g1):
        return pipe.replace(make_optimizer=build_optimizer)
    return pipe.replace(update=apply_update)
'''
FIX_EVERYTHING = '''from course.reference.pipeline import build_optimizer, token_cross_entropy, apply_update


def fix(pipe):
    """Replace every part that could be broken, to be safe."""
    return pipe.replace(make_optimizer=build_optimizer, loss_fn=token_cross_entropy, update=apply_update)
'''
FIX_FRESH = '''def fix(pipe):
    """A fresh reference pipeline of the same shape."""
    return MYSTERY_BASE
'''
FIX_NOTHING = '''def fix(pipe):
    return pipe
'''
COLLATE_TENSOR_COPY = '''from course.toolkit.batch import Batch


def collate_sft(examples, template, pad_id, eos_id):
    seqs, starts = [], []
    for prompt, answer in examples:
        ctx = torch.cat([torch.tensor(template.user, dtype=torch.long), prompt.long(),
                         torch.tensor(template.assistant, dtype=torch.long)])
        seqs.append(torch.tensor(torch.cat([ctx, answer.long(), torch.tensor([eos_id])])))  # torch warns: copy-construct
        starts.append(len(ctx))
    width = max(len(s) for s in seqs)
    full = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        full[i, : len(s)] = s
    inputs, targets = full[:, :-1].clone(), full[:, 1:].clone()
    pos = torch.arange(width - 1)
    for i, (s, c) in enumerate(zip(seqs, starts)):
        targets[i, (pos < c - 1) | (pos >= len(s) - 1)] = IGNORE
    return Batch(inputs, targets, pad_id)
'''
COLLATE_DELEGATES = '''from course.toolkit.batch import Batch
from course.lessons.sft import collate_sft as _pkg_collate


def collate_sft(examples, template, pad_id, eos_id):
    return _pkg_collate(examples, template, pad_id, eos_id)
'''
GATE_ALT = '''def mask_gate(batch, examples, template, eos_id):
    assert batch.inputs.shape == batch.targets.shape and batch.inputs.shape[0] == len(examples), "one row per example"
    T = batch.inputs.shape[1]
    for i, (prompt, answer) in enumerate(examples):
        ctx = template.context(prompt)
        seq = torch.cat([ctx, answer.long(), torch.tensor([eos_id])])
        n = len(seq) - 1
        assert n <= T, f"row {i} is too short for its example"
        assert torch.equal(batch.inputs[i, :n], seq[:-1]), f"row {i}: inputs are not the templated example"
        want = torch.full((T,), IGNORE, dtype=torch.long)
        start = max(len(ctx) - 1, 0)
        want[start:n] = seq[start + 1:]
        assert torch.equal(batch.targets[i], want), f"row {i}: targets {batch.targets[i].tolist()}, expected {want.tolist()}"
'''
GATE_NO_EOS = '''def mask_gate(batch, examples, template, eos_id):
    """Checks the prompt is ignored and the answer supervised; forgets the EOS and the padding."""
    for i, (prompt, answer) in enumerate(examples):
        c = max(len(template.context(prompt)) - 1, 0)
        row = batch.targets[i]
        if (row[:c] != IGNORE).any():
            raise ValueError(f"row {i}: prompt supervised")
        if not torch.equal(row[c: c + len(answer)], answer.long()):
            raise ValueError(f"row {i}: answer not supervised")
'''

# Realistic wrong: checks the layout (which targets are ignored, the EOS id) but not the values of the
# supervised targets, so unshifted, late or constant answer targets pass it.
GATE_LAYOUT_ONLY = '''def mask_gate(batch, examples, template, eos_id):
    if batch.inputs.shape != batch.targets.shape or batch.inputs.shape[0] != len(examples):
        raise ValueError("the batch does not hold one row per example")
    for i, (prompt, answer) in enumerate(examples):
        context = len(template.user) + len(prompt) + len(template.assistant)
        n = context + len(answer)
        row_y = batch.targets[i].tolist()
        scored = [t != IGNORE for t in row_y]
        if scored != [False] * (context - 1) + [True] * (n - context + 1) + [False] * (len(row_y) - n):
            raise ValueError(f"row {i}: the wrong targets are ignored")
        if row_y[n - 1] != eos_id:
            raise ValueError(f"row {i}: the EOS is not supervised")
'''

# ---- Exercise 4: the dependency test
_DEPENDENCY_TESTS = {"test_dependency_visible", "test_dependency_hidden"}

# Alternative correct: a perturbation test instead of gradients. Change every token an output must not
# see; its logits must not move (the same dropout masks in both runs, from the same seed).
DEPENDENCY_PERTURB = """def leaks(model, tokens, along="batch"):
    try:
        V = model.tok.num_embeddings

        def run(t):
            torch.manual_seed(0)
            with torch.no_grad():
                return model(t)

        base = run(tokens)
        B, T = tokens.shape
        for i in range(B if along == "batch" else T):
            changed = tokens.clone()
            if along == "batch":
                rows = [j for j in range(B) if j != i]
                changed[rows] = (changed[rows] + 1) % V
                moved = (run(changed)[i] - base[i]).abs().max()
            else:
                changed[:, i + 1:] = (changed[:, i + 1:] + 1) % V
                moved = (run(changed)[:, : i + 1] - base[:, : i + 1]).abs().max()
            if moved > 1e-6 * base.abs().max():
                return True
        return False
    except Exception:
        return True
"""

# Realistic wrong: the gradient taken on an embedding computed beside the model, which the model's
# forward never used: no gradient reaches it, so nothing ever leaks.
DEPENDENCY_WRONG_TENSOR = """def leaks(model, tokens, along="batch"):
    try:
        x = model.tok(tokens).detach().requires_grad_(True)
        logits = model(tokens)
        n = tokens.shape[0] if along == "batch" else tokens.shape[1]
        for i in range(n):
            out = logits[i] if along == "batch" else logits[:, i]
            (g,) = torch.autograd.grad(out.sum(), x, retain_graph=True, allow_unused=True)
            if g is None:
                continue
            forbidden = torch.cat([g[:i], g[i + 1:]]) if along == "batch" else g[:, i + 1:]
            if forbidden.numel() and forbidden.abs().max() > 0:
                return True
        return False
    except Exception:
        return True
"""

# Realistic wrong: checks that example i's own input gets a gradient, never that the others get none.
DEPENDENCY_OWN_ONLY = """def leaks(model, tokens, along="batch"):
    try:
        kept = {}

        def hook(module, inputs, output):
            kept["x"] = output.detach().requires_grad_(True)
            return kept["x"]

        handle = model.tok.register_forward_hook(hook)
        logits = model(tokens)
        handle.remove()
        for i in range(tokens.shape[0] if along == "batch" else tokens.shape[1]):
            out = logits[i] if along == "batch" else logits[:, i]
            (g,) = torch.autograd.grad(out.sum(), kept["x"], retain_graph=True)
            own = g[i] if along == "batch" else g[:, i]
            if own.abs().max() == 0:
                return True
        return False
    except Exception:
        return True
"""

# Realistic wrong: keeps the embedding's own output with retain_grad() instead of a leaf of its own,
# so on a model with frozen parameters (an output that does not require grad) it crashes, and the
# crash rule turns a healthy frozen model into a false alarm.
DEPENDENCY_RETAIN_GRAD = """def leaks(model, tokens, along="batch"):
    try:
        kept = {}

        def hook(module, inputs, output):
            output.retain_grad()
            kept["x"] = output

        handle = model.tok.register_forward_hook(hook)
        logits = model(tokens)
        handle.remove()
        n = tokens.shape[0] if along == "batch" else tokens.shape[1]
        for i in range(n):
            out = logits[i] if along == "batch" else logits[:, i]
            (g,) = torch.autograd.grad(out.sum(), kept["x"], retain_graph=True)
            g = g.abs()
            allowed = g[i] if along == "batch" else g[:, : i + 1]
            forbidden = torch.cat([g[:i], g[i + 1:]]) if along == "batch" else g[:, i + 1:]
            if forbidden.numel() and forbidden.max() > 1e-6 * allowed.max():
                return True
        return False
    except Exception:
        return True
"""

# Degenerate: reads the model's structure (the visible bugs' module class and mask setting) instead
# of running the test; the hidden variants are other modules and settings.
DEPENDENCY_READS_STRUCTURE = """def leaks(model, tokens, along="batch"):
    try:
        model(tokens)
    except Exception:
        return True
    if along == "batch":
        return any(type(m).__name__ == "_NormOver" for m in model.modules())
    return getattr(getattr(model, "cfg", None), "attention", "causal") != "causal"
"""

DEPENDENCY_DELEGATES = """from course.toolkit.dependence import dependence as _dependence


def leaks(model, tokens, along="batch"):
    d = _dependence(model, tokens, along)
    n = d.shape[0]
    forbidden = ~torch.eye(n, dtype=torch.bool) if along == "batch" else torch.ones(n, n, dtype=torch.bool).triu(1)
    return bool(d[forbidden].max() > 1e-6 * d.max())
"""


CASES = [
    # ---- Exercise 2: the collator
    Case(_A, "collate_prefix_scored", {"collate_sft": _COLLATE_PREFIX_SCORED}, _COLLATE_TESTS),
    Case(_A, "collate_float_batch", {"collate_sft": _COLLATE_FLOAT}, _COLLATE_TESTS),
    # correct, but torch warns about torch.tensor(a_tensor): the warning goes to stdout, full marks
    Case(_A, "collate_tensor_copy_warns", {"collate_sft": COLLATE_TENSOR_COPY}, set()),
    # delegating to the package: switched off in every test cell
    Case(_A, "collate_delegates", {"collate_sft": COLLATE_DELEGATES}, _COLLATE_TESTS),
    # ---- Exercise 3: the mask gate, graded by mutation
    Case(_A, "gate_always_passes",
         {"mask_gate": "def mask_gate(batch, examples, template, eos_id):\n    return None\n"}, _GATE_TESTS),
    Case(_A, "gate_always_fails",
         {"mask_gate": "def mask_gate(batch, examples, template, eos_id):\n    raise ValueError('bad mask')\n"}, _GATE_TESTS),
    Case(_A, "gate_delegates",
         {"mask_gate": "from course.lessons.sft import mask_gate as _pkg_gate\n\n"
                       "def mask_gate(batch, examples, template, eos_id):\n    _pkg_gate(batch, examples, template, eos_id)\n"},
         _GATE_TESTS),
    Case(_A, "gate_asserts_whole_rows", {"mask_gate": GATE_ALT}, set()),
    Case(_A, "gate_forgets_eos_and_padding", {"mask_gate": GATE_NO_EOS}, _GATE_TESTS),
    Case(_A, "gate_layout_not_values", {"mask_gate": GATE_LAYOUT_ONLY}, {"test_mask_gate_visible", "test_mask_gate_hidden"}),
    # ---- Exercise 1 (a): the mystery detector, graded by mutation
    Case(_A, "detect_other_seed_and_budget", {"mystery_detect": DETECT_ALT}, set()),
    Case(_A, "detect_loss_falls", {"mystery_detect": DETECT_LOSS_FALLS}, _DETECT_TESTS),
    # the overfit alone misses the embedding left out of the optimizer (the visible draw), and
    # catches every hidden bug
    Case(_A, "detect_overfit_only", {"mystery_detect": DETECT_OVERFIT_ONLY}, {"test_mystery_detect_visible"}),
    Case(_A, "detect_always", {"mystery_detect": DETECT_ALWAYS}, _DETECT_TESTS),
    Case(_A, "detect_delegates_preflight", {"mystery_detect": DETECT_PREFLIGHT}, _DETECT_TESTS),
    Case(_A, "detect_reads_lr", {"mystery_detect": DETECT_LR}, _DETECT_TESTS),
    # ---- Exercise 1 (b): the cause
    Case(_A, "cause_step_first", {"mystery_cause": CAUSE_ALT}, set()),
    # the gradient test first: a tensor outside the optimizer is never zeroed, so the embedding bug
    # is named zero-grad-forgotten (the fix of both is the same part, so the fix cell still passes)
    Case(_A, "cause_gradient_test_first", {"mystery_cause": CAUSE_GRAD_FIRST}, {"test_mystery_cause"}),
    Case(_A, "cause_reveals", {"mystery_cause": CAUSE_REVEAL}, {"test_mystery_cause", "test_mystery_fix"}),
    Case(_A, "cause_always_healthy", {"mystery_cause": CAUSE_CONSTANT}, {"test_mystery_cause", "test_mystery_fix"}),
    # ---- Exercise 1 (c): the fix
    Case(_A, "fix_own_tests", {"mystery_fix": FIX_ALT}, set()),
    Case(_A, "fix_replaces_every_part", {"mystery_fix": FIX_EVERYTHING}, {"test_mystery_fix"}),
    Case(_A, "fix_fresh_pipeline", {"mystery_fix": FIX_FRESH}, {"test_mystery_fix"}),
    Case(_A, "fix_returns_pipe", {"mystery_fix": FIX_NOTHING}, {"test_mystery_fix"}),
    # ---- Exercise 4: the dependency test, graded by mutation
    Case(_A, "dependency_perturbation", {"dependency_test": DEPENDENCY_PERTURB}, set()),
    Case(_A, "dependency_wrong_tensor", {"dependency_test": DEPENDENCY_WRONG_TENSOR}, _DEPENDENCY_TESTS),
    Case(_A, "dependency_own_gradient_only", {"dependency_test": DEPENDENCY_OWN_ONLY}, _DEPENDENCY_TESTS),
    # frozen parameters are only in the visible test
    Case(_A, "dependency_retain_grad_frozen_crash", {"dependency_test": DEPENDENCY_RETAIN_GRAD}, {"test_dependency_visible"}),
    # the visible bugs are recognised by their class and setting; the hidden variants are not
    Case(_A, "dependency_reads_structure", {"dependency_test": DEPENDENCY_READS_STRUCTURE}, {"test_dependency_hidden"}),
    Case(_A, "dependency_always_false",
         {"dependency_test": "def leaks(model, tokens, along=\"batch\"):\n    return False\n"}, _DEPENDENCY_TESTS),
    Case(_A, "dependency_delegates", {"dependency_test": DEPENDENCY_DELEGATES}, _DEPENDENCY_TESTS),
]
