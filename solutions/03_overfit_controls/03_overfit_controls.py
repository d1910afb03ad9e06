# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 03 · Overfit and shuffled-label controls: "can my pipeline learn at all?"
#
# **What you learn.**
# * Run a tiny-batch overfit **with its negative control** (the same run without `optimizer.step()`),
#   and see what a pass certifies: shuffled labels fit just as well; conflicting labels cannot go
#   below the floor the batch itself sets (ln 2).
# * Test the popular "8 samples, loss < 0.05 within 35 steps" rule on the course model, and watch it
#   misfire on runs with no bug.
# * Detect three wrong-gradient bugs with one cheap test each: a parameter left out of the optimizer,
#   a forgotten `zero_grad`, a loss that broadcasts to the wrong shape.
# * Write a supervised fine-tuning collator and the **mask gate** that checks it (graded).
# * Freeze a base model under a low-rank adapter and prove the base stays bit-identical.
# * Read per-layer telemetry against each layer's own history, and run a reusable pre-flight check.
#
# **Time.** About 40 seconds of computation on a laptop CPU. **GPU:** not needed anywhere.

# %%
import copy
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)

# %% [markdown]
# ## Overfit eight examples, with a negative control
#
# Take the first 8 windows of the first training batch and train on nothing else. The fit can only be
# judged against the lowest loss *these* examples allow: `fit_floor` groups targets by their whole
# prefix, and where two rows share a prefix but not the next token, no model can do better than the
# entropy of those tokens.

# %%
from course import Pipeline, IGNORE
from course.bugs import inject
from course.train import batch_at
from course.overfit import tiny_batch, fit_floor, overfit_pipe, overfit_rule

pipe = Pipeline()
lang = pipe.language()
V = lang.vocab_size
tiny = tiny_batch(batch_at(pipe, seed=0, step=0), 8)
print(f"{tiny.inputs.shape[0]} examples x {tiny.inputs.shape[1]} targets, ln(V) = {math.log(V):.4f}, "
      f"lowest possible loss on them = {fit_floor(tiny):.4f}")

# %% [markdown]
# The fit uses the pipeline's own optimizer, loss, clipping and update, at a constant learning rate.
# The negative control is the **same run with the `missing-step` bug**: gradients computed, never applied.

# %%
STEPS = 100
fits = {
    "reference": overfit_pipe(pipe, tiny, STEPS),
    "missing-step (negative control)": overfit_pipe(inject(pipe, "missing-step"), tiny, STEPS),
}
for name, losses in fits.items():
    print(f"{name:>32}: loss {losses[0]:.4f} -> {losses[-1]:.4f} after {STEPS} steps")

# %% [markdown]
# ## A fit certifies nothing about meaning
#
# Now the same eight inputs with **shuffled labels** (every row gets another row's targets, so the
# pairs are wrong but consistent) and with **conflicting labels** (each row twice, the copy with every
# target changed: identical inputs, two labels each). The first fits; the second cannot go below
# its floor, which is ln 2 plus whatever the batch's own repeated prefixes add.

# %%
from course.overfit import shuffled_labels, conflicting_labels

shuffled = shuffled_labels(tiny, seed=1)
conflict = conflicting_labels(tiny, V)
fits["shuffled labels"] = overfit_pipe(pipe, shuffled, STEPS)
fits["conflicting labels"] = overfit_pipe(pipe, conflict, STEPS)
print(f"shuffled labels:    floor {fit_floor(shuffled):.4f}, reached {fits['shuffled labels'][-1]:.4f}")
print(f"conflicting labels: ln 2 = {math.log(2):.4f}, floor {fit_floor(conflict):.4f}, reached {fits['conflicting labels'][-1]:.4f}")

# %%
fig, ax = plt.subplots(figsize=(7, 3.8))
for name, losses in fits.items():
    ax.plot(losses, label=name)
ax.axhline(math.log(V), color="grey", linestyle=":", label="ln(V)")
ax.axhline(math.log(2), color="black", linestyle="--", label="ln 2 (conflicting labels' floor)")
ax.axhline(0.05, color="red", linestyle=":", label="0.05 (the rule below)")
ax.set_yscale("log")
ax.set_xlabel("step (the same 8 examples every step)")
ax.set_ylabel("training loss (nats, log scale)")
ax.set_title("Overfitting 8 examples: what fits and what cannot")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## The "8 samples, loss < 0.05 within 35 steps" rule
#
# This rule circulates attributed to Karpathy. His "A Recipe for Training Neural Networks" (2019) says
# to overfit a single batch of as few as two examples, increase capacity if needed, and check that
# you reach the lowest achievable loss; it gives no sample count, no step budget and no threshold
# (the CS231n notes gave the same advice earlier). The numbers are someone's policy. Here is what
# that policy says about the course model, with **no bug anywhere**:

# %%
import dataclasses
from course.data import Batch
from course.overfit import smoothed_cross_entropy

small_model = dataclasses.replace(pipe.model, d_model=8, n_head=1, n_layer=1, d_mlp=8)
no_bug_runs = {
    "reference, LR 1e-2": (pipe, tiny),
    "reference, 16 tokens per example": (pipe, Batch(tiny.inputs[:, :16], tiny.targets[:, :16], tiny.pad_id)),
    "LR 1e-4": (pipe.replace(lr=1e-4), tiny),
    "dropout 0.1": (pipe.replace(model=dataclasses.replace(pipe.model, dropout=0.1)), tiny),
    "label smoothing 0.1": (pipe.replace(loss_fn=smoothed_cross_entropy(0.1)), tiny),
    "weight decay 1.0": (pipe.replace(weight_decay=1.0), tiny),
    "low capacity (d_model 8)": (pipe.replace(model=small_model), tiny),
    "conflicting labels": (pipe, conflict),
}
rule_results = {}
for name, (p, b) in no_bug_runs.items():
    rule_results[name] = overfit_rule(overfit_pipe(p, b, 35), threshold=0.05, steps=35)
    print(f"{name:>34}: {rule_results[name]}")

# %% [markdown]
# Every one of these pipelines is healthy; most miss the rule, and the reference itself passes or
# misses depending on how long the examples are. Treat the threshold and the step budget as a
# knob you set for *your* model and data, compared with the lowest loss the batch allows, never as
# proof of a defect. Explore it: the output below reruns one short overfit for each setting.

# %%
# NBVAL_IGNORE_OUTPUT
from course.overfit import rule_explorer

explorer = rule_explorer(pipe, tiny_batch(batch_at(pipe, 0, 0), 16))
explorer

# %% [markdown]
# ## Three wrong gradients, three cheap tests
#
# ### A parameter left out of the optimizer
#
# The loss still falls (every other tensor learns), so the curve hides it. One step and a comparison
# by identity does not: `update_report` lists the tensors the optimizer does not hold.

# %%
from course.checks import update_report
from course.train import start, train_steps
from course.grading import quiet


def one_step(p):
    run = start(p, 0)
    with quiet():
        return update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))


for name in ("reference", "embedding-not-in-optimizer"):
    r = one_step(pipe if name == "reference" else inject(pipe, name))
    print(f"{name:>28}: cause {r.cause()!r}, not in optimizer {r.not_in_optimizer}, unchanged {r.unchanged}")

# %% [markdown]
# ### A forgotten `zero_grad`
#
# `backward()` *adds* into `.grad`. Without `zero_grad`, the second backward on the same batch at the
# same parameters gives exactly twice the first gradient. Learning rate 0 keeps the parameters still, so
# the two steps are comparable.

# %%
def grad_after_two_backwards(p):
    model = p.build_model(0)
    opt = p.make_optimizer(model, p)
    grads = []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        p.loss_fn(model(tiny.inputs), tiny).backward()
        grads.append(model.head.weight.grad.clone())
    return grads


for name in ("reference", "zero-grad-forgotten"):
    g1, g2 = grad_after_two_backwards(pipe if name == "reference" else inject(pipe, name))
    print(f"{name:>20}: |grad| step 1 {g1.norm():.5f}, step 2 {g2.norm():.5f}, ratio {g2.norm() / g1.norm():.3f}, "
          f"step 2 == 2 x step 1 exactly: {torch.equal(g2, 2 * g1)}")

# %% [markdown]
# Gradient clipping can hide it: when the gradient is above the clip norm, clipping scales a doubled
# gradient back to the same norm and the same direction. With the pipeline's clip at 1.0:

# %%
from course.overfit import pipeline_step

for name in ("reference", "zero-grad-forgotten"):
    p = pipe if name == "reference" else inject(pipe, name)
    model = p.build_model(0)
    opt = p.make_optimizer(model, p)
    for g in opt.param_groups:
        g["lr"] = 0.0
    norms = []
    for _ in range(2):
        pipeline_step(p)(model, opt, tiny, p.loss_fn)
        norms.append(torch.linalg.vector_norm(torch.cat([q.grad.flatten() for q in model.parameters()])).item())
    print(f"{name:>20}: clipped grad norm step 1 {norms[0]:.4f}, step 2 {norms[1]:.4f}")

# %% [markdown]
# ### A loss that broadcasts
#
# A regression head returns shape `(N, 1)`, the targets are `(N,)`. Their difference broadcasts to
# `(N, N)`: every prediction is compared with every target. PyTorch's `mse_loss` warns about it (the
# warning is caught and printed below).

# %%
import warnings

x = torch.linspace(-1, 1, 64).unsqueeze(1)
y = 3 * x.squeeze(1) + 0.5  # shape (64,)
lin = torch.nn.Linear(1, 1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loss = F.mse_loss(lin(x), y)
print(f"prediction {tuple(lin(x).shape)}, target {tuple(y.shape)}, difference {tuple((lin(x) - y).shape)}")
print(f"warning: {caught[0].message if caught else 'none'}")

# %% [markdown]
# The broadcast loss is minimised by predicting the *mean* target for every input, so the model fits
# a flat line and the loss goes down all the same:

# %%
def fit_line(loss_fn, steps=300):
    torch.manual_seed(0)
    m = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(m(x), y).backward()
        opt.step()
    return m.weight.item(), m.bias.item()


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    print("broadcast (N,1) vs (N,):  slope %.3f, intercept %.3f" % fit_line(F.mse_loss))
print("shapes matched (N,) (N,): slope %.3f, intercept %.3f  (true: 3, 0.5)" % fit_line(lambda p, t: F.mse_loss(p.squeeze(1), t)))

# %% [markdown]
# The catalogue's `loss-broadcast` does the same in the language model: a masked mean written with a
# `(N, 1)` mask over `(N,)` token losses returns their **sum**, with no warning. Two numbers expose it
# at step 0: the loss at initialisation is nowhere near ln(V), and stacking the batch twice doubles a
# sum where a mean would not move.

# %%
def loss_and_twice(p):
    model = p.build_model(0)
    twice = Batch(torch.cat([tiny.inputs] * 2), torch.cat([tiny.targets] * 2), tiny.pad_id)
    with torch.no_grad():
        return p.loss_fn(model(tiny.inputs), tiny).item(), p.loss_fn(model(twice.inputs), twice).item()


for name in ("reference", "loss-broadcast"):
    one, two = loss_and_twice(pipe if name == "reference" else inject(pipe, name))
    print(f"{name:>15}: loss at init {one:10.4f} (ln V {math.log(V):.4f}), batch stacked twice {two:10.4f}")

# %% [markdown]
# ## Supervised fine-tuning: which tokens may the loss see?
#
# In supervised fine-tuning each example is a prompt and an answer, wrapped in a template:
#
# `user markers + prompt + assistant markers + answer + EOS`
#
# The model must learn to produce the answer and to stop, so the loss supervises **the answer tokens
# and the EOS**, and nothing else: not the user markers, not the prompt, not the assistant markers
# (the answer prefix), not the padding. The markers are ordinary token ids; here the course's
# default template uses the symbols 0 and 1 before the prompt, 2 and 3 before the answer.

# %%
from course.sft import Template, DEFAULT_TEMPLATE, sft_pipeline, examples_at

sft = sft_pipeline(pipe)
examples = examples_at(sft, 0, 0)
prompt, answer = examples[0]
print(f"template: user {DEFAULT_TEMPLATE.user}, assistant {DEFAULT_TEMPLATE.assistant}; PAD {lang.PAD}, EOS {lang.EOS}")
print(f"example 0: prompt {prompt.tolist()}, answer {answer.tolist()}")

# %% [markdown]
# ## Exercise 1: the collator
#
# Write `collate_sft(examples, template, pad_id, eos_id)`. It returns a `Batch` of next-token
# inputs and targets for the sequences `template.user + prompt + template.assistant + answer + [eos_id]`,
# right-padded with `pad_id` to the longest one: `inputs` are each padded sequence but its last
# position, `targets` the sequence shifted left by one, with `IGNORE` wherever the target is a marker,
# a prompt token or padding. Do not use the package's `course.data.prompt_answer_batch` or
# `course.sft.collate_sft` (the grader disables them while it runs yours). Markers, prompts and
# answers can have any length, including zero markers; the hidden tests try other templates,
# lengths and ids.

# %% nbgrader={"grade": false, "grade_id": "collate_sft", "locked": false, "schema_version": 3, "solution": true}
from course.data import Batch


def collate_sft(examples, template, pad_id, eos_id):
    ### BEGIN SOLUTION
    rows, n_context = [], []
    for prompt, answer in examples:
        context = list(template.user) + prompt.tolist() + list(template.assistant)
        rows.append(context + answer.tolist() + [eos_id])
        n_context.append(len(context))
    width = max(len(r) for r in rows)
    seqs = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        seqs[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    inputs, targets = seqs[:, :-1].clone(), seqs[:, 1:].clone()
    for i, (r, c) in enumerate(zip(rows, n_context)):
        targets[i, : max(c - 1, 0)] = IGNORE  # targets that are still markers or prompt
        targets[i, len(r) - 1:] = IGNORE  # padding after the EOS
    return Batch(inputs, targets, pad_id)
    ### END SOLUTION

# %% [markdown]
# The visible test: one example, written out by hand.

# %% nbgrader={"grade": true, "grade_id": "test_collate_sft_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_tpl = Template(user=(0,), assistant=(2, 3))
_b = collate_sft([(torch.tensor([7, 8]), torch.tensor([9, 5])), (torch.tensor([6]), torch.tensor([4]))], _tpl, pad_id=16, eos_id=17)
# row 0: 0 7 8 2 3 9 5 17 ; row 1: 0 6 2 3 4 17 16 16
assert _b.inputs.tolist() == [[0, 7, 8, 2, 3, 9, 5], [0, 6, 2, 3, 4, 17, 16]], f"inputs {_b.inputs.tolist()}"
_I = IGNORE
assert _b.targets[0].tolist() == [_I, _I, _I, _I, 9, 5, 17], \
    f"row 0 targets {_b.targets[0].tolist()}: markers and prompt ignored, answer 9 5 and EOS 17 supervised"
assert _b.targets[1].tolist() == [_I, _I, _I, 4, 17, _I, _I], f"row 1 targets {_b.targets[1].tolist()}: padding must be ignored"
### BEGIN HIDDEN TESTS
import course.sft as _sft
import course.data as _data
_g = torch.Generator().manual_seed(3)
_cases = []
for _tpl in (Template(), Template(user=(5, 6, 7), assistant=(1,)), Template(assistant=(4, 4, 4, 4))):
    _ex = [(torch.randint(0, 12, (int(torch.randint(0, 6, (1,), generator=_g)),), generator=_g),
            torch.randint(0, 12, (int(torch.randint(0, 5, (1,), generator=_g)),), generator=_g)) for _ in range(5)]
    _cases.append((_ex, _tpl, _sft.collate_sft(_ex, _tpl, 13, 14)))
_saved = (_sft.collate_sft.__code__, _data.prompt_answer_batch.__code__)
_sft.collate_sft.__code__ = (lambda examples, template, pad_id, eos_id: None).__code__
_data.prompt_answer_batch.__code__ = (lambda prompts, answers, pad_id, eos_id: None).__code__
try:
    for _ex, _tpl, _want in _cases:
        _got = collate_sft(_ex, _tpl, 13, 14)
        assert torch.equal(_got.inputs, _want.inputs) and torch.equal(_got.targets, _want.targets), f"wrong batch for template {_tpl}"
finally:
    _sft.collate_sft.__code__, _data.prompt_answer_batch.__code__ = _saved
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the package's pipelines, other seeds, a long answer prefix.

# %% nbgrader={"grade": true, "grade_id": "test_collate_sft_pipelines", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.sft as _sft
import course.data as _data
_cases = []
for _tpl, _seed in ((Template(user=(0, 1), assistant=(2, 3)), 5), (Template(user=(9,), assistant=(8, 7, 6)), 6)):
    _p = _sft.sft_pipeline(pipe, _tpl, min_len=6)
    _ex = examples_at(_p, _seed, 1)
    _cases.append((_ex, _tpl, batch_at(_p, _seed, 1)))
_saved = (_sft.collate_sft.__code__, _data.prompt_answer_batch.__code__)
_sft.collate_sft.__code__ = (lambda examples, template, pad_id, eos_id: None).__code__
_data.prompt_answer_batch.__code__ = (lambda prompts, answers, pad_id, eos_id: None).__code__
try:
    for _ex, _tpl, _want in _cases:
        _got = collate_sft(_ex, _tpl, lang.PAD, lang.EOS)
        assert torch.equal(_got.inputs, _want.inputs) and torch.equal(_got.targets, _want.targets), f"wrong batch for template {_tpl}"
finally:
    _sft.collate_sft.__code__, _data.prompt_answer_batch.__code__ = _saved
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2: the mask gate
#
# A collator is one implementation; the gate is the test any collator's batches must pass (yours, a
# library's, one with a bug). Write `mask_gate(batch, examples, template, eos_id)`: raise an exception
# (a `ValueError` or `AssertionError` whose message names the problem) unless the batch supervises
# exactly the answer tokens and the EOS of each example, with the right ids, and ignores the markers,
# the prompt and the padding; return normally otherwise. It is graded like a test suite: it must accept
# healthy batches (other templates, lengths, seeds) and reject broken ones, including variants you
# have not seen. A gate that always passes, or always fails, earns nothing. (The package has
# `course.sft.mask_gate`; the hidden tests disable it while they run yours.)

# %% nbgrader={"grade": false, "grade_id": "mask_gate", "locked": false, "schema_version": 3, "solution": true}
def mask_gate(batch, examples, template, eos_id):
    ### BEGIN SOLUTION
    if batch.inputs.shape != batch.targets.shape or batch.inputs.shape[0] != len(examples):
        raise ValueError("the batch does not hold one row per example")
    for i, (prompt, answer) in enumerate(examples):
        context = list(template.user) + prompt.tolist() + list(template.assistant)
        seq = context + answer.tolist() + [eos_id]
        n = len(seq) - 1
        row_x, row_y = batch.inputs[i].tolist(), batch.targets[i].tolist()
        if n > len(row_x) or row_x[:n] != seq[:-1]:
            raise ValueError(f"row {i}: the inputs are not the templated example")
        expected = [IGNORE] * max(len(context) - 1, 0) + seq[max(len(context), 1):] + [IGNORE] * (len(row_y) - n)
        if row_y != expected:
            raise ValueError(f"row {i}: supervised {row_y}, expected {expected}")
    ### END SOLUTION

# %% [markdown]
# The visible test: healthy batches of the SFT pipeline pass; the catalogue's inverted mask and masked
# EOS fail.

# %% nbgrader={"grade": true, "grade_id": "test_mask_gate_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.grading import assert_detector, fires

def _gate_case(p, seed, tpl=DEFAULT_TEMPLATE):
    return batch_at(p, seed, 0), examples_at(p, seed, 0), tpl

_healthy = {f"seed {s}": _gate_case(sft, s) for s in (0, 1)}
_broken = {n: _gate_case(inject(sft, n), 0) for n in ("prompt-answer-mask-inverted", "eos-masked")}
assert_detector(lambda c: fires(mask_gate, c[0], c[1], c[2], lang.EOS), _healthy, _broken, what="mask gate")
### BEGIN HIDDEN TESTS
_tpl2 = Template(user=(5,), assistant=(6, 7, 8))
_sft2 = sft_pipeline(pipe.replace(seq_len=20, model=dataclasses.replace(pipe.model, n_ctx=20)), _tpl2, min_len=5)
assert_detector(lambda c: fires(mask_gate, c[0], c[1], c[2], lang.EOS),
                {f"template 2, seed {s}": _gate_case(_sft2, s, _tpl2) for s in (3, 4)},
                {n: _gate_case(inject(_sft2, n), 3, _tpl2) for n in ("prompt-answer-mask-inverted", "eos-masked")},
                what="mask gate")
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: off-by-one masks, a scored answer prefix, scored padding, a wrong EOS id, on other
# templates.

# %% nbgrader={"grade": true, "grade_id": "test_mask_gate_hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.sft as _sft
from course.data import next_token_batch as _ntb, pad_sequences as _pad


def _bank(tpl, seed):
    g = torch.Generator().manual_seed(seed)
    ex = [(torch.randint(0, 12, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g),
           torch.randint(0, 12, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g)) for _ in range(6)]
    good = _sft.collate_sft(ex, tpl, 13, 14)
    everything = _ntb(_pad([torch.cat([tpl.context(p), a]) for p, a in ex], 13, 14), 13)  # every target scored
    ctx = [len(tpl.context(p)) for p, _ in ex]
    ends = [len(tpl.context(p)) + len(a) for p, a in ex]  # target index of the EOS
    def variant(edit):
        t = good.targets.clone()
        for i in range(len(ex)):
            edit(t, i)
        return Batch(good.inputs.clone(), t, 13)
    broken = {
        "prefix scored": variant(lambda t, i: t[i].__setitem__(slice(0, ctx[i] - 1), everything.targets[i, : ctx[i] - 1])),
        "last prompt target scored": variant(lambda t, i: t[i].__setitem__(ctx[i] - 2, everything.targets[i, ctx[i] - 2])),
        "first answer token ignored": variant(lambda t, i: t[i].__setitem__(ctx[i] - 1, IGNORE)),
        "EOS target is padding": variant(lambda t, i: t[i].__setitem__(ends[i] - 1, 13)),
        "padding scored": Batch(good.inputs, torch.where(good.inputs.roll(-1, 1) == 13, torch.full_like(good.targets, 13), good.targets), 13),
    }
    return (good, ex, tpl), {k: (b, ex, tpl) for k, b in broken.items()}


_healthy, _broken = {}, {}
for _k, (_tpl, _seed) in enumerate(((Template(user=(0, 1), assistant=(2,)), 21), (Template(user=(9, 9), assistant=(3, 4, 5)), 22))):
    _h, _b = _bank(_tpl, _seed)
    _healthy[f"template {_k}"] = _h
    _broken.update({f"{n} (template {_k})": c for n, c in _b.items()})
_saved = _sft.mask_gate.__code__
_sft.mask_gate.__code__ = (lambda batch, examples, template, eos_id: {}).__code__
try:
    assert_detector(lambda c: fires(mask_gate, c[0], c[1], c[2], 14), _healthy, _broken, what="mask gate")
finally:
    _sft.mask_gate.__code__ = _saved
### END HIDDEN TESTS

# %% [markdown]
# The package's gate on the SFT pipeline and the two catalogue bugs, with the fraction of each part
# of the sequence that is supervised:

# %%
from course.sft import mask_gate as package_gate, MaskGateError

for name in ("healthy", "prompt-answer-mask-inverted", "eos-masked"):
    p = sft if name == "healthy" else inject(sft, name)
    try:
        fractions = package_gate(batch_at(p, 0, 0), examples_at(p, 0, 0), DEFAULT_TEMPLATE, lang.EOS)
        print(f"{name:>28}: passes, supervised fraction per part {fractions}")
    except MaskGateError as err:
        print(f"{name:>28}: FAILS: {err}")

# %% [markdown]
# ## Per-layer telemetry, against each layer's own history
#
# Guides quote a "healthy gradient norm" band (0.1 to 3, or 5). No source supports one: the global
# norm depends on the number of parameters, on the loss's reduction and on the token count. The same
# healthy model at initialisation, measured three ways:

# %%
def global_grad_norm(model_cfg, reduction):
    model = pipe.replace(model=model_cfg).build_model(0)
    logits = model(tiny.inputs)
    F.cross_entropy(logits.flatten(0, 1), tiny.targets.flatten(), reduction=reduction).backward()
    return torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()])).item(), model.num_params()


for d in (16, 48, 128):
    cfg = dataclasses.replace(pipe.model, d_model=d, d_mlp=3 * d)
    (g_mean, n), (g_sum, _) = global_grad_norm(cfg, "mean"), global_grad_norm(cfg, "sum")
    print(f"d_model {d:>3} ({n:>6} parameters): global grad norm, mean loss {g_mean:.3f}; summed loss {g_sum:.1f}")

# %% [markdown]
# So compare each layer with its own recent past instead. `record` trains the reference pipeline and
# records per-layer statistics at every step; after step 80 the run's learning rate is raised 20-fold
# (a config change mid-run), and the run continues for 40 steps.

# %%
from course.telemetry import record, robust_z

run, tel_before = record(pipe, 80, seed=0, progress=True)
base_model = copy.deepcopy(run.model)  # kept for the adapter section below
run.scheduler.base_lrs = [20 * lr for lr in run.scheduler.base_lrs]
run, tel_after = record(pipe, 40, run=run, progress=True)
names = tel_before.names
rel = torch.cat([tel_before.table("rel_update"), tel_after.table("rel_update")])
z = robust_z(rel)
print(f"{len(names)} layers x {rel.shape[0]} steps recorded")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
im0 = axes[0].imshow(rel.log10().clamp(-4, 0).T, aspect="auto", cmap="viridis")  # zero-init biases: huge at step 0
axes[0].set_title("log10 relative update per layer (clipped to [-4, 0])")
im1 = axes[1].imshow(z.abs().clamp(max=50).T, aspect="auto", cmap="magma")
axes[1].set_title("|robust z| against the layer's last 20 steps")
for ax, im in zip(axes, (im0, im1)):
    ax.axvline(80, color="white", linestyle="--")
    ax.set_xlabel("step (dashed: LR raised 20x)")
    fig.colorbar(im, ax=ax)
axes[0].set_yticks(range(len(names)), names, fontsize=6)
axes[0].set_ylabel("parameter tensor")
plt.show()

# %% [markdown]
# The negative control is the first 80 steps of the same run: the largest score there, against the
# largest after the change (the threshold is a knob, here 15):

# %%
print(f"max |z| steps 0-79 (healthy): {z[:80].abs().max():.1f}; steps 80-119 (LR x20): {z[80:].abs().max():.1f}")
flagged = [(s, names[l]) for s, l in (z.abs() > 15).nonzero().tolist()]
print(f"cells above 15: {len(flagged)}, first at step {min(s for s, _ in flagged) if flagged else None}")
print(f"layers flagged: {len({n for _, n in flagged})} of {len(names)}")

# %% [markdown]
# ## An adapter on a frozen base
#
# Take the model trained for 80 steps above as the base. `add_lora` wraps linear layers in a
# low-rank update `B @ A` (rank 4) and freezes every base tensor. `B` starts at zero, so the adapted
# model starts exactly where the base is; and because `A`'s gradient passes through `B`, **`A`
# gets an exactly zero gradient at the first step**, while `B` gets a nonzero one.

# %%
from course.adapters import add_lora, linear_names, base_snapshot, changed_base_tensors

def adapted(freeze=True):
    model = copy.deepcopy(base_model)
    params = add_lora(model, linear_names(model), rank=4, freeze=freeze)
    return model, params

model, adapter_params = adapted()
snapshot = base_snapshot(model)
with torch.no_grad():
    print(f"adapted == base at step 0: {torch.equal(model(tiny.inputs), base_model(tiny.inputs))}")
F.cross_entropy(model(tiny.inputs).flatten(0, 1), tiny.targets.flatten()).backward()
a_grads = [p.grad.abs().max().item() for p in adapter_params[0::2]]
b_grads = [p.grad.abs().max().item() for p in adapter_params[1::2]]
print(f"{len(a_grads)} adapters; largest |grad A| {max(a_grads)}, smallest largest-|grad B| {min(b_grads):.2e}")

# %% [markdown]
# Train only the adapters on the 8 examples, then compare every base tensor with its snapshot,
# bit for bit. The negative control forgets to freeze the base (and hands every parameter to the
# optimizer): the same comparison must then find changed tensors.

# %%
from course.overfit import overfit, plain_step

model.zero_grad(set_to_none=True)
lora_losses = overfit(model, torch.optim.AdamW(adapter_params, lr=1e-2), tiny, 35)
print(f"adapters only, 35 steps: {overfit_rule(lora_losses)}")
print(f"base tensors changed after training the adapters: {changed_base_tensors(model, snapshot)}")

unfrozen, _ = adapted(freeze=False)
unfrozen_snapshot = base_snapshot(unfrozen)
overfit(unfrozen, torch.optim.AdamW(unfrozen.parameters(), lr=1e-2), tiny, 5)
print(f"negative control (base not frozen), tensors changed: {len(changed_base_tensors(unfrozen, unfrozen_snapshot))} of {len(unfrozen_snapshot)}")

# %% [markdown]
# ## A reusable pre-flight check
#
# `course.preflight.preflight(model, optimizer, batch, loss_fn, step_fn)` runs every cheap test of
# this notebook on **copies** of your model and optimizer, and reports what each pass can and cannot
# prove. `preflight_pipeline(pipe)` does it for a course pipeline. On the reference:

# %%
from course.preflight import preflight_pipeline

healthy_report = preflight_pipeline(pipe, overfit_steps=60)
print(healthy_report.explain())

# %% [markdown]
# Each check must fail on the bug it targets (and the healthy column above is the negative control).
# The SFT pipeline passes its gate (bound to the examples) as the mask check:

# %%
def sft_gate_for(p):
    ex = examples_at(p, 0, 0)[:8]
    return lambda b: package_gate(b, ex, DEFAULT_TEMPLATE, lang.EOS)


checks = [c.name for c in healthy_report.checks]
cases = {name: (inject(pipe, name), None) for name in ("missing-step", "embedding-not-in-optimizer",
                                                      "zero-grad-forgotten", "loss-broadcast")}
cases["sft, healthy"] = (sft, sft_gate_for(sft))
cases["sft, eos-masked"] = (inject(sft, "eos-masked"), sft_gate_for(inject(sft, "eos-masked")))
print(f"{'pipeline':>27} | " + " | ".join(f"{c[:11]:>11}" for c in checks))
with quiet():
    for name, (p, gate) in cases.items():
        report = preflight_pipeline(p, overfit_steps=60, mask_check=gate)
        print(f"{name:>27} | " + " | ".join(f"{'pass' if report[c].passed else 'FAIL':>11}" for c in checks))

# %% [markdown]
# ## What these tests can and cannot prove
#
# * **Overfitting a tiny batch** proves the model, loss and loop can fit *those examples*. It needs
#   its negative control (the same run without `step()`), and it proves nothing about the labels:
#   shuffled labels fit as well. Missing a fixed threshold is not a defect: conflicting labels have a
#   floor (ln 2), and small learning rates, short budgets, dropout, label smoothing, weight decay and
#   low capacity all miss "< 0.05 within 35 steps" with no bug. Compare with `fit_floor`, not 0.
# * **The update report** proves every trainable tensor moves and is held by the optimizer, by
#   identity; not that it moves well.
# * **Two backwards at LR 0** prove gradients do not accumulate between steps; clipping can hide the
#   doubling, so measure before clipping (or with a small loss).
# * **Loss at init near ln(V) and stacking the batch twice** prove the loss is a per-token mean of the
#   right scale; not that it is taken over the right tokens.
# * **The mask gate** proves exactly the answer and EOS tokens are supervised, with the right ids; not
#   that the answers are good.
# * **Bit-identical base tensors** prove the adapter left the base alone; with `B = 0` the first
#   step cannot move `A`.
# * **Telemetry against a layer's own history** shows *when* a layer changed behaviour; no band says
#   what is healthy, and a flag is a hypothesis to test, not a diagnosis.
