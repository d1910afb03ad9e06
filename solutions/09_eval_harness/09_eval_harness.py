# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 09 · The evaluation harness: what a multiple-choice score measures
#
# **What you learn.**
# * A multiple-choice score is the output of a small program, the **harness**: a prompt template, a
#   target delimiter, `num_fewshot` examples, truncation to the model's window, the sum of each
#   option's token log-probabilities, and `acc` or the length-normalised `acc_norm`. Each stage can be
#   wrong while the model is fine.
# * Test the model, the task and the harness separately: the held-out likelihood, the exact answer of
#   a task built from a known language, and what the harness really feeds the model.
# * The conventions of lm-evaluation-harness, stated precisely: the scored continuation is
#   `target_delimiter + choice` (default `" "`), `acc` takes the option with the highest summed
#   log-likelihood, `acc_norm` divides each sum by the choice's **character** length, and the few-shot
#   count is a setting of the run (`--num_fewshot`), whose examples take room in the context.
# * Read results item by item, with bootstrap intervals, and judge "B is better than A" with a
#   **paired** bootstrap; check evaluation items against training text with an n-gram test whose n you
#   state, against a control.
# * Debug a **mystery harness** yourself: write the falsifying test, name the stage and fix it.
#
# **Time.** Under 40 seconds of computation on a laptop CPU (`make bench` times every notebook on
# yours). **GPU:** not needed anywhere.

# %%
import torch
import matplotlib.pyplot as plt

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## A text with known answers, and a model trained on it
#
# The text is a first-order Markov chain over 16 pseudo-words (`course.lessons.harness.WORDS`), written with
# one space between words and one document per line. The tokenizer works like a BPE tokenizer: a word
# inside a line is one token *with its leading space* (`" ka"`), and a word at the start of a line is
# another token without it (`"ka"`). The newline and the two template words `"Question"` and
# `"Answer"` are tokens too (`harness.VOCAB`); any other printable character is a token of its own.

# %%
from course import Pipeline
from course.lessons import harness
from course.exercises import mystery
from course.bugs import inject
from course.exercises.record import reveal

lang = harness.language()
line = harness.corpus(1, seed=7).strip()
print("a training document:", repr(line))
print("its tokens:         ", [harness.VOCAB[i] for i in harness.encode(line)])

# %% [markdown]
# One small model (one layer, a 16-token window), trained once here in a few seconds and used
# everywhere below. It keeps a copy of its weights after 20 and 200 steps for later comparisons.

# %%
model = harness.train_model(steps=250, keep=(20, 200))
heldout = harness.heldout_loss(model)
print(f"held-out loss {heldout:.3f} nats per token; floor of the chain {harness.token_floor():.3f} nats per token")

# %% [markdown]
# A model that ignores context can do no better than the entropy of the unigram distribution, and
# that number has a unit. Per *word* (16 words, the chain's stationary distribution) it is
# `lang.unigram_entropy`; per *token*, the unit of the loss and of the floor, the distribution also
# holds the newline and the start-of-line form of every word (`harness.token_unigram_entropy()`).
# The last line counts the corpus's tokens to check the per-token figure.

# %%
ids = harness.corpus_tokens()
freq = torch.bincount(ids, minlength=len(harness.VOCAB)).double() / len(ids)
print(f"no context, per word:  {lang.unigram_entropy:.3f} nats (over the 16 words)")
print(f"no context, per token: {harness.token_unigram_entropy():.3f} nats (words, start-of-line forms and the newline)")
print(f"counted on the corpus: {float(-(freq[freq > 0] * freq[freq > 0].log()).sum()):.3f} nats per token")

# %% [markdown]
# The loss curve, with the two reference lines in the same unit, nats per token: the loss of the
# best model that ignores context and the floor of the chain itself (the floor assumes each line seen from its start; training windows
# start anywhere in a line, so a good model sits a little above it).

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(model.history, lw=1, label="training loss")
ax.axhline(harness.token_unigram_entropy(), color="grey", ls="--", label="no context (token unigram entropy)")
ax.axhline(harness.token_floor(), color="black", ls=":", label="floor of the chain")
ax.set_xlabel("step")
ax.set_ylabel("loss (nats per token)")
ax.set_ylim(0, 5)
ax.legend(fontsize=8)
ax.set_title("The model used everywhere below")
plt.show()

# %% [markdown]
# ## The task: which continuation follows the question?
#
# Each item is a question of four words and four options of one to three words. The gold option is
# the chain's own continuation; the others are stretches of the chain that started elsewhere. Since
# the chain is known, so is every option's exact log-probability given the question
# (`harness.chain_logprob`), and the accuracy of ranking the options by it: a **reference** for these
# items, printed with its binomial standard error `sqrt(p(1 - p)/n)`. It is not a ceiling: the
# distractors are drawn independently of the question, so `argmax P(option | question)` is not the
# best rule. The rule that uses how the items were made divides by each option's own probability as
# a distractor, `P(option | question) / P(option)` (`harness.chain_prior_logprob`). In that ratio
# everything after an option's first word cancels, so options that start with the same word tie, and
# which of them `argmax` picks would depend on float rounding. `harness.credit_with_ties` scores ties
# explicitly: a k-way tie that includes gold counts 1/k. The last two lines give this rule's accuracy,
# how many items tie, and its paired difference from the first rule.

# %%
task = harness.make_task(200, seed=0)
item = task.items[0]
print("question:", repr(harness.render(item.question)), " options:", item.choices, " gold:", item.gold)
chain_lls, chain_lengths = harness.chain_scores(task)
gold = torch.tensor([it.gold for it in task.items])
chain_right, chain_right_norm = harness.correct_per_item(chain_lls, chain_lengths, gold)
def with_se(right):  # mean ± sd / sqrt(n): for 0/1 scores that is sqrt(p(1 - p)/n)
    x = right.double()
    return f"{x.mean().item():.3f} ± {(x.std(unbiased=False) / len(x) ** 0.5).item():.3f}"

print(f"the exact chain on these {len(task)} items (± one standard error): acc {with_se(chain_right)}, "
      f"acc_norm {with_se(chain_right_norm)} (chance 0.25)")
prior = torch.tensor([[harness.chain_prior_logprob(it, j) for j in range(len(it.choices))] for it in task.items],
                     dtype=torch.float64)
bayes_credit, tied = harness.credit_with_ties(chain_lls - prior, gold)
print(f"ranked by P(option | question) / P(option), ties shared: acc {with_se(bayes_credit)}; "
      f"{int(tied.sum())} items tie at the top, gold among the tied in {int(bayes_credit[tied].gt(0).sum())}")
gain = bayes_credit - chain_right.double()
print(f"this rule minus the first: {gain.mean().item():+.3f} ± {(gain.std() / len(gain) ** 0.5).item():.3f} (one paired standard error)")

# %% [markdown]
# lm-evaluation-harness reports `acc_stderr` as the sample standard deviation of the per-item scores
# over `sqrt(n)` (`mean_stderr` in its `lm_eval/api/metrics.py`): for 0/1 scores that is
# `sqrt(p(1 - p)/(n - 1))`, a factor `sqrt(n/(n - 1))` above the binomial error printed here. At 200
# items the two differ in the fourth decimal:

# %%
p_chain = chain_right.double().mean().item()
print(f"this harness: {(p_chain * (1 - p_chain) / len(task)) ** 0.5:.4f}; lm-eval's acc_stderr: "
      f"{chain_right.double().std(unbiased=True).item() / len(task) ** 0.5:.4f}")

# %% [markdown]
# ## A colleague's evaluation
#
# A colleague evaluates the same model with a harness set up for another task (three-shot, as their
# leaderboard does). `HEALTHY` is the reference pipeline: its `eval_*` parts are the harness stages
# described in `course.lessons.harness`.
#
# **Predict.** The model's held-out loss (printed above) is well below the no-context loss and a
# little above the chain's floor. What `acc` will the colleague's harness report?

# %%
prediction = None  # your guess: acc between 0 and 1 (chance is 0.25; the exact chain's is printed above)

# %%
HEALTHY = Pipeline()
theirs = inject(HEALTHY, "template-differs-from-training")  # a template copied from a QA task
reported = harness.run(model, theirs, task, num_fewshot=3)
reveal("acc reported by the colleague's harness", prediction, round(reported.acc, 3))

# %% [markdown]
# Three hypotheses give this number: the model is bad at the task (likelihood and task skill can
# differ), the task cannot be solved from the question, or the harness asks the model something else.
# Each has a cheap test. The held-out loss already speaks against the first; the exact chain's
# accuracy against the second (the items are solvable). The third needs no model at all: **read what
# the harness feeds the model**.

# %% tags=["demo"]
print("what the colleague's harness scores the options after (item 0, end of the context):")
print(repr(reported.contexts[0]))
print("a training document, for comparison:", repr(line))

# %% [markdown]
# The template writes `Question:` and `Answer:`, words the training text never contains, and puts a
# newline, which in this text only ever ends a document, between the question and the answer. The
# model reads the options as the start of a new document. We come back to this run once the
# harness's stages have been checked one by one.
#
# ## Exercise 1: score an option, with its delimiter
#
# Write `option_logprob(model, context, choice, delimiter=" ")`: the sum of the log-probabilities
# (natural log) of the tokens of `delimiter + choice`, each given the context and the option's earlier
# tokens. Tokenize the two parts **separately**, `harness.encode(context)` and
# `harness.encode(delimiter + choice)` (this harness's rule; lm-evaluation-harness's differs, see
# after the exercise), feed the model their
# concatenation without its last token (a `(1, L)` long tensor; the logits are `(1, L, vocab)`), and
# sum the log-softmax at the continuation's positions. The inputs fit the model's window (no
# truncation). Return a Python float (a 0-d tensor is accepted); compared with the reference to
# 1e-4. `harness.score_continuations` and `harness.run` are switched off while this is graded.

# %% nbgrader={"grade": false, "grade_id": "option_logprob", "locked": false, "schema_version": 3, "solution": true}
import torch.nn.functional as F

def option_logprob(model, context, choice, delimiter=" "):
    ctx = harness.encode(context)  # token ids (a list) of the context
    cont = harness.encode(delimiter + choice)  # token ids of the continuation that is scored
    ### BEGIN SOLUTION
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = F.log_softmax(model(ids[:, :-1]), dim=-1)[0]
    positions = torch.arange(len(ctx) - 1, len(ctx) + len(cont) - 1)
    return logp[positions, torch.tensor(cont)].sum().item()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_option_logprob", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.lessons import harness as _h
from course.exercises.grading import graded_calls as _graded_calls

_model = _h.train_model(steps=250)  # the notebook's `model`, trained here (seeded: the same weights)
_cases = [("o dorn vex", "ka", " "), ("o dorn vex", "ka rup", " "), ("mun sel", "glint o", "")]
# each call runs apart, where this cell's data does not exist: a case brings its model along
_got = _graded_calls(lambda _c: float(option_logprob(*_c)), [(_model, *_c) for _c in _cases],
                     off=(_h.score_continuations, _h.run))
_want = [_h.score_continuations(_model, [_h.encode(_x)], [_h.encode(_d + _y)])[0] for _x, _y, _d in _cases]
assert abs(_got[0] - _want[0]) < 1e-4, "one-token option: the log-probability of ' ka' after the context"
assert abs(_got[1] - _want[1]) < 1e-4, "two-token option: sum the log-probabilities of both tokens (' ka', ' rup')"
assert abs(_got[2] - _want[2]) < 1e-4, "with delimiter='' the continuation is the bare choice: 'glint', then ' o'"
### BEGIN HIDDEN TESTS
import random as _random
from course.exercises.grading import hidden_seed as _hidden_seed

_rng = _random.Random(_hidden_seed("h-09-olp"))
_hc, _kinds = [], []
for _i in range(12):
    _nc, _nw = _rng.randint(1, 6), _rng.randint(1, 3)
    _ctx = " ".join(_rng.choice(_h.WORDS) for _ in range(_nc))
    _ch = " ".join(_rng.choice(_h.WORDS) for _ in range(_nw))
    _hc.append((_ctx, _ch, _rng.choice([" ", " ", ""])))
    _kinds.append(f"random case {_i + 1} ({_nc}-word context, {_nw}-word choice, delimiter {_hc[-1][2]!r})")
_hc.append(("o\nka", "ti", " "))
_kinds.append("a context with a newline ('o\\nka'), choice 'ti', delimiter ' '")
_hg = _graded_calls(lambda _c: float(option_logprob(*_c)), [(_model, *_c) for _c in _hc],
                    off=(_h.score_continuations, _h.run))
_hw = [_h.score_continuations(_model, [_h.encode(_x)], [_h.encode(_d + _y)])[0] for _x, _y, _d in _hc]
for _k, _w, _g in zip(_kinds, _hw, _hg):
    assert abs(_g - _w) < 1e-4, f"wrong log-probability for {_k}: you gave {_g:.4f}"
### END HIDDEN TESTS

# %% [markdown]
# The delimiter is not cosmetic. Without it the option's first token is the start-of-line form of the
# word, which the model has only ever seen after a newline:

# %% tags=["demo"]
ctx = harness.render(item.question)
for choice in item.choices:
    print(f"{choice!r:>18}: with ' ' {option_logprob(model, ctx, choice):7.2f}   without {option_logprob(model, ctx, choice, ''):7.2f}"
          f"   tokens {[harness.VOCAB[i] for i in harness.encode(' ' + choice)]} vs {[harness.VOCAB[i] for i in harness.encode(choice)]}")

# %% [markdown]
# Where the context ends and the continuation starts is a convention too. This harness (and
# Exercise 1) encodes the two parts separately. lm-evaluation-harness, for decoder-only models
# (`_encode_pair`, in `lm_eval/api/model.py`; earlier in `lm_eval/models/huggingface.py`), moves the
# context's trailing whitespace to the front of the continuation, encodes context + continuation
# whole, and scores the tokens after the (stripped) context's encoding; it encodes the parts
# separately only for seq2seq models. `harness.encode_pair_lm_eval` is that rule with this tokenizer.
# The first line checks that the two rules agree on every option of every healthy three-shot context;
# the next two show where they differ: a context that ends with a space, the `template-trailing-space`
# bug.

# %% tags=["demo"]
def split_here(context, continuation):
    return harness.encode(context), harness.encode(continuation)

agree = all(split_here(ctx3, " " + c) == harness.encode_pair_lm_eval(ctx3, " " + c)
            for i, it in enumerate(task.items) for ctx3 in [harness.build_context(HEALTHY, task, i, 3)] for c in it.choices)
print("healthy template, 3-shot: both rules give the same tokens on every option:", agree)
spaced = harness.render(item.question) + " "  # what template-trailing-space writes
for rule, (c_ids, k_ids) in (("this harness", split_here(spaced, " " + item.choices[0])),
                             ("lm-eval's rule", harness.encode_pair_lm_eval(spaced, " " + item.choices[0]))):
    print(f"trailing-space template, {rule:>14}: context ends {[harness.VOCAB[i] for i in c_ids[-2:]]}, "
          f"scored {[harness.VOCAB[i] for i in k_ids]}")

# %% [markdown]
# Both rules feed the model the same sequence, with a lone `' '` token that the training text never
# has; this harness conditions on it, lm-evaluation-harness's rule scores it as part of every option.
# The rule does not undo a template that ends with the space the delimiter adds again: it moves the
# extra space, and the bug is still the template's.

# %% [markdown]
# ## Exercise 2: acc and acc_norm
#
# Write `accuracies(lls, choices, gold) -> (acc, acc_norm)`. `lls` holds the option log-likelihoods,
# a list of lists or a 2-D tensor (`lls[i][j]` is option `j` of item `i`); `choices[i]` holds item
# `i`'s option strings (without the delimiter); `gold` the index of each item's right option, a list
# or a 1-D tensor of ints. `acc` is the share of items whose highest log-likelihood is
# the gold option; `acc_norm` the same after dividing each log-likelihood by `len(choice)` (its
# number of characters, as lm-evaluation-harness does). A tie goes to the first option, as `argmax`
# does. Return two Python floats (compared to 1e-9). `harness.accuracies` and
# `harness.correct_per_item` are switched off while this is graded.

# %% nbgrader={"grade": false, "grade_id": "accuracies", "locked": false, "schema_version": 3, "solution": true}
def accuracies(lls, choices, gold):
    ### BEGIN SOLUTION
    right = right_norm = 0
    for scores, opts, g in zip(lls, choices, gold):
        scores = [float(s) for s in scores]
        normed = [s / len(c) for s, c in zip(scores, opts)]
        right += scores.index(max(scores)) == int(g)
        right_norm += normed.index(max(normed)) == int(g)
    return right / len(gold), right_norm / len(gold)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_accuracies", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import torch

from course.lessons import harness as _h
from course.exercises.grading import graded_calls as _graded_calls


def _probe(case):  # apart, where this cell's data does not exist: the call, and its two numbers
    _v = accuracies(*case)
    return [float(_v[0]), float(_v[1])]


_a, _b, _c, _d = _graded_calls(_probe, [
    ([[-2.0, -3.0], [-4.0, -1.0]], [["ab", "cd"], ["ab", "cd"]], [0, 0]),
    ([[-3.0, -4.0]], [["a", "abcd"]], [1]),
    ([[-1.0, -1.0]], [["ab", "ab"]], [1]),
    (torch.tensor([[-2.0, -3.0], [-3.0, -4.0]], dtype=torch.float64), [["ab", "cd"], ["a", "abcd"]], torch.tensor([0, 1])),
], off=(_h.accuracies, _h.correct_per_item))
assert abs(_a[0] - 0.5) < 1e-9 and abs(_a[1] - 0.5) < 1e-9, "acc: the share of items whose highest log-likelihood is gold"
assert abs(_b[0]) < 1e-9 and abs(_b[1] - 1.0) < 1e-9, "acc_norm divides by the choice's length in characters: -3/1 < -4/4"
assert abs(_c[0]) < 1e-9, "a tie goes to the first option (argmax)"
assert abs(float(_d[0]) - 0.5) < 1e-9 and abs(float(_d[1]) - 1.0) < 1e-9, \
    "with lls a 2-D tensor and gold a 1-D tensor: the same rules (acc 0.5, acc_norm 1.0 here)"
### BEGIN HIDDEN TESTS
import random as _random
from course.exercises.grading import hidden_seed as _hidden_seed

_rng = _random.Random(_hidden_seed("h-09-acn"))
_lls = [[_rng.uniform(-12, -0.5) for _ in range(4)] for _ in range(60)]
_ch = [[" ".join(_rng.choice(_h.WORDS) for _ in range(_rng.randint(1, 3))) for _ in range(4)] for _ in range(60)]
_gd = [_rng.randrange(4) for _ in range(60)]
# close items: the shortest option is behind the longest per character, ahead per (character + 1),
# so acc_norm depends on dividing by len(choice) exactly
_close = []
for _ in range(8):
    _opts = [" ".join(_rng.choice(_h.WORDS) for _ in range(_rng.randint(1, 3))) for _ in range(4)]
    _lo, _hi = min(range(4), key=lambda _j: len(_opts[_j])), max(range(4), key=lambda _j: len(_opts[_j]))
    if len(_opts[_lo]) == len(_opts[_hi]):  # all four as long: make another one longer
        _hi = (_lo + 1) % 4
        _opts[_hi] += " ka"
    _ls, _ll = len(_opts[_lo]), len(_opts[_hi])
    _r = _rng.uniform(-3.0, -0.3)  # the longest option's log-likelihood per character
    _rs = _r * (1 + _rng.uniform(0.2, 0.8) * (_ll * (_ls + 1) / ((_ll + 1) * _ls) - 1))
    _row = [_r * _rng.uniform(2.0, 3.0) * len(_o) for _o in _opts]  # the other two: far behind either way
    _row[_lo], _row[_hi] = _rs * _ls, _r * _ll
    _close.append((_row, _opts, _rng.choice([_lo, _hi])))
_items1 = list(zip(_lls[:12], _ch[:12], _gd[:12])) + _close
_got, _got2, *_got1 = _graded_calls(
    _probe, [(torch.tensor(_lls, dtype=torch.float64), _ch, torch.tensor(_gd)), (_lls, _ch, _gd)]
    + [([_l], [_c], [_y]) for _l, _c, _y in _items1], off=(_h.accuracies, _h.correct_per_item))
_want = _h.accuracies(_lls, _ch, _gd)
_want1 = [_h.accuracies([_l], [_c], [_y]) for _l, _c, _y in _items1]  # item by item
assert abs(float(_got[0]) - _want[0]) < 1e-9, "acc is wrong on 60 random items (tensors in)"
assert abs(float(_got[1]) - _want[1]) < 1e-9, "acc_norm is wrong on 60 random items (tensors in): divide by len(choice)"
assert abs(float(_got2[0]) - _want[0]) < 1e-9 and abs(float(_got2[1]) - _want[1]) < 1e-9, \
    "wrong on 60 random items (lists in)"
for _i, (_w, _g) in enumerate(zip(_want1, _got1)):
    _what = f"random item {_i + 1}" if _i < 12 else f"close item {_i - 11} (options near each other per character)"
    assert abs(float(_g[0]) - _w[0]) < 1e-9, f"acc is wrong on {_what}, given alone (lists in)"
    assert abs(float(_g[1]) - _w[1]) < 1e-9, \
        f"acc_norm is wrong on {_what}, given alone (lists in): divide by len(choice), in characters"
### END HIDDEN TESTS

# %% [markdown]
# The healthy harness, zero-shot, on the same items. The exact chain's two figures are printed near the
# top; the model is not the chain.
#
# **Predict.** For the *model*, will `acc_norm` be `"higher"` than `acc`, `"lower"`, or `"the same"`?

# %% tags=["demo"]
prediction = None  # your guess: "higher", "lower" or "the same"

# %% tags=["demo"]
healthy0 = harness.run(model, HEALTHY, task, num_fewshot=0)
acc, acc_norm = accuracies(healthy0.lls, [it.choices for it in task.items], healthy0.gold)
print(f"model, healthy harness, 0-shot: acc {acc:.3f}, acc_norm {acc_norm:.3f}")
print("acc against acc_norm, item by item (A = acc, B = acc_norm):", harness.item_diff(healthy0.correct, healthy0.correct_norm))
reveal("acc_norm against acc for the model", prediction,
       "higher" if acc_norm > acc else "lower" if acc_norm < acc else "the same")

# %% [markdown]
# Neither metric is "the right one". `acc` penalises an option for every extra token it has to be
# unlikely on; `acc_norm` reduces that penalty and adds another bias: it divides by characters, while
# the model pays per token, so options made of long words get a discount. On these items `acc_norm`
# is the higher of the two for the model and for the exact chain (both printed above), but not item
# by item: the `only A right` and `only B right` counts above are items that flip between them, and
# on another set of options the balance can tip the other way. Report which one you use, with its length convention, and compare like with
# like.
#
# ## A catalogue of harness bugs
#
# Each bug of the `evaluation` family swaps one harness stage; the model is the same. Every variant
# is run zero-shot and three-shot on the same 200 items.
#
# **Predict.** `truncation-cuts-question` keeps the *start* of a context too long for the window.
# Will its zero-shot `acc` be lower than the healthy harness's, `"yes"` or `"no"`?

# %% tags=["demo"]
prediction = None  # your guess: "yes" or "no"

# %% tags=["demo"]
from course.bugs import catalogue

variants = {"healthy": HEALTHY, **{b.name: inject(HEALTHY, b.name) for b in catalogue("evaluation")}}
table = {name: (harness.run(model, p, task, 0), harness.run(model, p, task, 3)) for name, p in variants.items()}
print(f"{'':>31}  0-shot acc  acc_norm   3-shot acc  acc_norm")
for name, (r0, r3) in table.items():
    print(f"{name:>31}  {r0.acc:10.3f} {r0.acc_norm:9.3f}   {r3.acc:10.3f} {r3.acc_norm:9.3f}")
reveal("truncation-cuts-question lowers zero-shot acc", prediction,
       "yes" if table["truncation-cuts-question"][0].acc < table["healthy"][0].acc else "no")

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(10, 3.6))
names = list(table)
x = torch.arange(len(names)).float()
ax.bar(x - 0.2, [table[n][1].acc for n in names], 0.4, label="acc, 3-shot")
ax.bar(x + 0.2, [table[n][1].acc_norm for n in names], 0.4, label="acc_norm, 3-shot")
ax.axhline(0.25, color="grey", ls="--", label="chance (4 options)")
ax.axhline(float(chain_right.double().mean()), color="black", ls=":", label="exact chain's acc (a reference)")
ax.set_xticks(x.tolist(), names, rotation=35, ha="right", fontsize=8)
ax.set_ylabel("share of items right")
ax.set_ylim(0, 1)
ax.legend(fontsize=8, ncol=2)
ax.set_title("One model, ten harnesses")
plt.show()

# %% [markdown]
# Differences of a few items need their noise. For two runs on the same items the standard error of
# the difference in `acc` is that of the per-item differences, `sd(b - a) / sqrt(n)`; here for the
# bug that drops the few-shot examples, against the healthy harness at three shots.

# %% tags=["demo"]
def paired_difference(a, b):
    d = b.double() - a.double()
    return d.mean().item(), (d.std(unbiased=True) / len(d) ** 0.5).item()

ignored3, healthy3 = table["fewshot-count-ignored"][1], table["healthy"][1]
diff, se = paired_difference(ignored3.correct, healthy3.correct)
print(f"3-shot acc, healthy - fewshot-count-ignored: {diff:+.3f} ± {se:.3f} (one paired standard error), "
      f"{diff / se:.1f} standard errors")
print("item by item (A = fewshot-count-ignored, B = healthy):", harness.item_diff(ignored3.correct, healthy3.correct))
print("fewshot-count-ignored at 3 shots gets every item right or wrong exactly as healthy 0-shot does:",
      torch.equal(ignored3.correct, table["healthy"][0].correct))

# %% [markdown]
# What the table shows, bug by bug:
#
# * **The delimiter** (`option-without-delimiter`, `option-delimiter-doubled`) and **the template**
#   (`template-differs-from-training`, `template-trailing-space`) put tokens in front of the options
#   that the training text never has there (for `option-without-delimiter` nothing is put in front:
#   the first word becomes its start-of-line token, `'mun'` instead of `' mun'`, as printed in the
#   delimiter section): near chance, zero-shot and three-shot alike.
# * **Truncation** (`truncation-cuts-question`) is invisible at zero-shot (nothing to cut) and
#   destroys three-shot, where the examples fill the window and the kept start is an example.
# * **Scoring the prompt** (`prompt-tokens-scored`) leaves zero-shot `acc` unchanged (the prompt adds
#   the same number to every option) and lowers `acc_norm` (that number, divided by each option's
#   length): at zero-shot already, by more than either wrong length below moves it, and far more at
#   three-shot, where the prompt is longer. Under truncation
#   the options no longer share one context (a longer option leaves room for less of it), and `acc`
#   moves too: its three-shot `acc` differs from the healthy one in the table.
# * **The wrong length** (`norm-by-token-count`, `norm-by-sequence-length`) changes only `acc_norm`,
#   and by less than scoring the prompt does: a score drop will not find it, a check of the stage will.
# * **The few-shot count ignored** (`fewshot-count-ignored`): its three-shot run scores every item
#   right or wrong exactly as the healthy zero-shot run does (the check printed above), and its three-shot `acc` is below
#   the healthy three-shot `acc` by the difference printed above, a handful of items, under two
#   paired standard errors. At 200 items that is not evidence that the examples help, nor that they
#   do not. (For the exact chain the examples cannot matter, since a first-order chain reads only the
#   question's last word; the model is not the exact chain, and the healthy row of the next section
#   moves between one and two shots, by a few items, within the noise.) Whatever the score, the bug changes what was measured:
#   "three-shot" results that were in fact zero-shot, which a check of the stage finds and a score
#   comparison at this sample size does not.
#
# ## The few-shot count, and the context it consumes
#
# The context is the examples (each written `template + target_delimiter + gold`) and then the
# question, joined by the **few-shot delimiter**: `"\n"` in this harness, because the training corpus
# separates its documents with it, where lm-evaluation-harness's default is `"\n\n"`. A delimiter the
# model never saw between documents is one more way a context can differ from training text.
# Each example takes room in a 16-token window. The slider shows, for each `num_fewshot`, the
# accuracy and what the model reads before the last option of the first item, for the healthy
# harness (left truncation) and the one that keeps the start.

# %% tags=["demo"]
by_k = {k: harness.run(model, HEALTHY, task, k) for k in range(5)}
cut = inject(HEALTHY, "truncation-cuts-question")
by_k_cut = {k: harness.run(model, cut, task, k) for k in range(5)}
for k in by_k:
    print(f"num_fewshot {k}: healthy acc {by_k[k].acc:.3f}; keeping the start acc {by_k_cut[k].acc:.3f}; "
          f"full context of item 0: {len(harness.encode(harness.build_context(HEALTHY, task, 0, k)))} tokens")

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
explorer = harness.fewshot_explorer({k: by_k[k] for k in by_k}, model.cfg.n_ctx, cut={k: by_k_cut[k] for k in by_k_cut})
explorer

# %% [markdown]
# ## Closing the loop on the symptom
#
# The colleague's run: the template differs from training. The fix at the right depth is the
# template (not more few-shot examples, not fine-tuning the model on the template, not dropping items
# that fail). Re-run with the same measurement that saw the symptom: three-shot `acc` on the same
# items, beside the exact chain's, and which items changed.

# %% tags=["demo"]
fixed = theirs.replace(eval_template=harness.plain_template)
rerun = harness.run(model, fixed, task, num_fewshot=3)
print(f"before the fix: acc {reported.acc:.3f}; after: acc {rerun.acc:.3f}; exact chain {chain_right.double().mean():.3f}")
print("item by item (A = before, B = after):", harness.item_diff(reported.correct, rerun.correct))
print(f"paired bootstrap of after - before: mean {harness.paired_bootstrap(reported.correct, rerun.correct)[0]:+.3f}, "
      f"95% interval {harness.paired_bootstrap(reported.correct, rerun.correct)[1:]}")

# %% [markdown]
# ## One accuracy jump, or which items changed?
#
# Two checkpoints of the same run (after 20 and 200 steps) and the final model, scored with the
# healthy harness zero-shot. An accuracy is a mean over 200 items, each right or wrong: the
# percentile bootstrap (resample the items, with replacement, 2000 times) gives its interval.

# %% tags=["demo"]
runs = {"step 20": harness.run(harness.load(model.checkpoints[20]), HEALTHY, task),
        "step 200": harness.run(harness.load(model.checkpoints[200]), HEALTHY, task),
        "step 250": healthy0}
for name, r in runs.items():
    mean, lo, hi = harness.bootstrap_ci(r.correct)
    print(f"{name:>8}: acc {mean:.3f}, 95% bootstrap interval [{lo:.3f}, {hi:.3f}] (width {hi - lo:.3f})")

# %% [markdown]
# Is step 250 better than step 200? Both were scored on the **same** items. Two bootstrap intervals
# of the difference in `acc`: the paired one draws one set of item indices per resample and uses it
# for both runs; the unpaired one draws each run's indices separately.
#
# **Predict.** For step 200 against step 250, will the paired interval be `"narrower"` than the
# unpaired one, `"wider"`, or `"about the same"`?

# %% tags=["demo"]
prediction = None  # your guess: "narrower", "wider" or "about the same"

# %% tags=["demo"]
for a_name, b_name in (("step 20", "step 250"), ("step 200", "step 250")):
    a, b = runs[a_name].correct, runs[b_name].correct
    paired, unpaired = harness.paired_bootstrap(a, b), harness.unpaired_bootstrap(a, b)
    print(f"{b_name} - {a_name}: {harness.item_diff(a, b)}")
    print(f"   difference {paired[0]:+.3f}; paired 95% [{paired[1]:+.3f}, {paired[2]:+.3f}] (width {paired[2] - paired[1]:.3f}); "
          f"unpaired [{unpaired[1]:+.3f}, {unpaired[2]:+.3f}] (width {unpaired[2] - unpaired[1]:.3f})")
ratio = (paired[2] - paired[1]) / (unpaired[2] - unpaired[1])
reveal("paired against unpaired interval, step 200 against step 250", prediction,
       "narrower" if ratio < 0.8 else "wider" if ratio > 1.25 else "about the same")

# %% [markdown]
# Most items are right (or wrong) for both runs, and only the items that changed carry information.
# The paired bootstrap keeps each item's two results together, so what the runs share (the same easy
# and hard items) cancels; the unpaired one treats the runs as if they had scored different items,
# and its interval carries the spread of the items' difficulty as well.
#
# ## Exercise 3: is B better than A?
#
# Write `significantly_better(a, b) -> bool`. `a` and `b` are 1-D tensors (bool or float, 1 for right)
# of the per-item correctness of runs A and B **on the same items**. Return `True` only when B is
# better than A beyond the noise of the item sample: draw at least 1000 bootstrap resamples of the
# item indices (seed your generator), compute mean(b − a) on each with the **same** indices for both
# runs, and say `True` when the 2.5% percentile of those means is above zero: the two-sided 95%
# percentile interval lies above zero, which is a one-sided test at the 2.5% level. (A one-sided test
# at 5%, or a paired normal approximation, gives the same answers on the graded cases: their noise
# pairs are within one paired standard error of no difference, their real gains at least 2.5 above
# it, see `harness.judge_cases`.) B worse than A is `False`. Graded by mutation on seeded pairs: reruns of one model that happen to score a
# little higher (noise), and real gains, some small but consistent. A judge that always says
# `True`, never says it, compares the two means, or resamples the runs independently scores nothing.
# `harness.significantly_better`, `paired_bootstrap`, `bootstrap_ci` and `unpaired_bootstrap` are
# switched off while it runs.

# %% nbgrader={"grade": false, "grade_id": "significantly_better", "locked": false, "schema_version": 3, "solution": true}
def significantly_better(a, b):
    ### BEGIN SOLUTION
    d = b.double() - a.double()
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(d), (2000, len(d)), generator=g)
    means = d[idx].mean(dim=1)
    return bool(torch.quantile(means, 0.025) > 0)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_significantly_better", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.lessons import harness as _h
from course.exercises.grading import assert_detector as _assert_detector

_OFF = (_h.significantly_better, _h.paired_bootstrap, _h.bootstrap_ci, _h.unpaired_bootstrap)
_noise, _real = _h.judge_cases("")
_assert_detector(lambda pair: significantly_better(*pair), _noise, _real, "judge", off=_OFF)
### BEGIN HIDDEN TESTS
from course.exercises.grading import hidden_seed as _hidden_seed


def _z(pair):  # mean(b - a) in paired standard errors
    _d = pair[1].double() - pair[0].double()
    _se = float(_d.std() / len(_d) ** 0.5)
    return float(_d.mean()) / _se if _se > 0 else (float("inf") if float(_d.mean()) > 0 else 0.0)


for _k in range(8):  # the pairs the exercise promises: noise within one paired standard error, gains 2.5 above
    _noise, _real = _h.judge_cases(str(_hidden_seed("h-09-jdg") + _k))
    if all(_z(p) <= 1.0 for p in _noise.values()) and all(_z(p) >= 2.5 for p in _real.values()):
        break  # a suitable draw
else:  # every redraw was unsuitable
    raise AssertionError("grader: no fresh judge pairs met the stated margins")
_assert_detector(lambda pair: significantly_better(*pair), _noise, _real, "judge (fresh pairs)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ## Was the task in the training data? An n-gram check, with its n
#
# A model that saw the test items while training scores them better than their difficulty says. The
# check compares each item's text (question and gold answer) with the training text: this harness
# flags an item when **every one** of its word n-grams occurs somewhere in the training text
# (`harness.contamination`'s default threshold), not necessarily together, so this is weaker than
# finding the item verbatim. GPT-3-style checks flag an item on **any** collision,
# one shared n-gram (GPT-3's n varied by dataset). The strict rule is chosen here because the chain
# is repetitive: chance collisions are common, and at the same n requiring all n-grams flags fewer
# items by chance than requiring one (compare the two tables below); the any-collision rule also
# finds partial leaks, at the price of more chance matches. The answer depends on n and on how
# repetitive the source is, so it needs a control: fresh items of the same source, which no training text
# contains on purpose. Below, items with 12-word questions, and a training text with 30% of them
# pasted in (as a test set leaks into a crawl), against the clean text.
#
# **Predict.** With n = 4 words, what share of the *fresh* items will the check flag in the clean
# training text (0 to 1)?

# %% tags=["demo"]
prediction = None  # your guess: a share between 0 and 1

# %% tags=["demo"]
long_task, fresh = harness.make_task(200, seed=4, question_words=12), harness.make_task(200, seed=9, question_words=12)
clean_text = harness.corpus()
leaky_text = harness.with_leaked_items(clean_text, long_task, 0.3)
items_text = [harness.item_text(it) for it in long_task.items]
fresh_text = [harness.item_text(it) for it in fresh.items]
ns = [4, 6, 8, 10, 12]
flagged = {name: [harness.contamination(texts, train, n)[0] for n in ns] for name, (texts, train) in {
    "fresh items, clean text": (fresh_text, clean_text), "task items, clean text": (items_text, clean_text),
    "fresh items, leaky text": (fresh_text, leaky_text), "task items, leaky text": (items_text, leaky_text)}.items()}
for name, shares in flagged.items():
    print(f"{name:>24}: " + "  ".join(f"n={n}: {s:.2f}" for n, s in zip(ns, shares)))
reveal("share of fresh items flagged at n=4", prediction, round(flagged["fresh items, clean text"][0], 2))

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(6, 3.4))
for name, shares in flagged.items():
    ax.plot(ns, shares, "o-", label=name)
ax.axhline(0.3, color="grey", ls=":", label="share of items leaked")
ax.set_xlabel("n (words per n-gram)")
ax.set_ylabel("share of items flagged")
ax.set_ylim(0, 1.05)
ax.legend(fontsize=8)
ax.set_title("An n-gram check needs its n and a control")
plt.show()

# %% [markdown]
# The fresh items on the clean text, and the task's items on the leaky one, under the any-collision
# rule (an item is flagged when at least one of its n-grams occurs in the training text):

# %% tags=["demo"]
for name, (texts, train) in {"fresh items, clean text": (fresh_text, clean_text),
                             "task items, leaky text": (items_text, leaky_text)}.items():
    shares = [harness.contamination(texts, train, n, threshold=1e-9)[0] for n in ns]
    print(f"any collision, {name:>23}: " + "  ".join(f"n={n}: {s:.2f}" for n, s in zip(ns, shares)))

# %% [markdown]
# In a low-entropy source short n-grams repeat everywhere: at small n either rule flags most items,
# leaked or not, and shows nothing; the any-collision rule needs a longer n for the same control. The evidence is the *excess* of the task's items over fresh
# items of the same source, at an n long enough for chance matches to be rare; there the leaky text
# stands out and the clean one does not. Published checks state their n and their rule (GPT-3:
# any shared n-gram, with n set per dataset); a share flagged without its n, its rule and its
# control is not a contamination result, and a leak shorter than n, or paraphrased, passes unseen.
#
# The same check on real English: the help topics that ship with Python (`pydoc_data`). "Training
# text" is every other topic; the items are 20-word passages, some from training topics and some
# from the others. English is far less repetitive than the chain, so even at n = 3 a passage rarely
# has all of its n-grams in the training text by chance (the share flagged, printed below, does not
# fall from n = 3 to n = 13).

# %% tags=["demo"]
import random
from pydoc_data.topics import topics

names = sorted(topics)
flat = {k: " ".join(topics[k].split()) for k in names}  # one line per topic, whitespace normalised
pydoc_train = " ".join(flat[k] for k in names[::2])
rng = random.Random(0)

def passage(k, words=20):
    w = flat[k].split()
    start = rng.randrange(len(w) - words) if len(w) > words else 0
    return " ".join(w[start:start + words])

from_train = [passage(k) for k in names[::2] if len(flat[k].split()) > 30]
from_other = [passage(k) for k in names[1::2] if len(flat[k].split()) > 30]
for n in (3, 8, 13):
    print(f"n={n:>2}: flagged {harness.contamination(from_train, pydoc_train, n)[0]:.2f} of passages from training topics, "
          f"{harness.contamination(from_other, pydoc_train, n)[0]:.2f} of passages from the other topics")

# %% [markdown]
# Passages of training topics are all flagged, as they should be. Some passages of the *other* topics
# are flagged too, at every n: the help topics repeat paragraphs verbatim across topics. Splitting
# by document is not decontamination when documents copy each other; the n-gram check is what finds
# the copies.
#
# ## Exercise 4: a mystery harness
#
# Below are eight pipelines drawn by `course.exercises.mystery.draw` from this notebook's bug family (healthy
# draws among them). Every part is an opaque `<part>`, every setting looks healthy, and each draw has
# its own seeds. Their three-shot scores with the model above:

# %%
from course.exercises.sets import SETS

MYSTERIES = SETS["09_eval_harness"]  # the candidates, the base (HEALTHY) and the seeds; the tests draw the same
CANDIDATES = MYSTERIES.candidates
mysteries = MYSTERIES.draws()
small = task.subset(60)
print(repr(mysteries["mystery 1"].eval_template), "(every part looks like this)")

# %% tags=["demo"]
for name, p in mysteries.items():
    r = harness.run(model, p, small, num_fewshot=3)
    print(f"{name:>10}: acc {r.acc:.3f}, acc_norm {r.acc_norm:.3f}")

# %% [markdown]
# A score tells you *that* something differs, rarely *which stage*, and some bugs of the table above
# move the score by no more than its noise (`norm-by-sequence-length`, `fewshot-count-ignored`). Test each stage against its specification, on inputs you choose. The stages are parts of
# `pipe`, and you may call them:
#
# | part | call | specification |
# |---|---|---|
# | `eval_template` | `pipe.eval_template(question)` (a tuple of word ids) | `harness.render(question)`: the words joined by one space, as in training |
# | `eval_continuation` | `pipe.eval_continuation(choice, " ")` | `" " + choice` |
# | `eval_fewshot` | `pipe.eval_fewshot(pool_size, index, k, seed)` | a list of exactly `k` distinct indices below `pool_size` |
# | `eval_truncate` | `pipe.eval_truncate(context_ids, continuation_ids, n_ctx)` | the *last* `n_ctx + 1 - len(continuation_ids)` context tokens (all of them when they fit) |
# | `eval_score` | `pipe.eval_score(model, [context_ids], [continuation_ids])` | a list with the sum of the continuation tokens' log-probabilities (your `option_logprob`, or the reference `harness.score_continuations`) |
# | `eval_norm_length` | `pipe.eval_norm_length(choice, context_ids, continuation_ids)` | `len(choice)`, in characters |
#
# `harness.run(model, pipe, task, num_fewshot)` runs them all (`.acc`, `.acc_norm`, per item
# `.correct`, and `.contexts`, the text each item's options were scored after);
# `harness.build_context(pipe, task, index, num_fewshot)` gives an item's context before truncation.
# A stage can be right on easy inputs and wrong on others (truncation does nothing to a context that
# fits; a length can agree on a one-letter word), so choose inputs that would show a difference.
#
# ### (a) A falsifying test
#
# Write `detect(pipe) -> bool`: `True` if any harness stage of `pipe` breaks its specification, `False`
# for a healthy pipeline. Return a Python or torch bool. Graded like a test suite: quiet on every
# healthy draw, firing on every broken one, including bugs of this family that are not among the
# draws above and draws with other seeds. `course.exercises.mystery.reveal`, `draw`, `make`, `touched` and `harness.problems`
# are switched off while it runs.

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    question = task.items[0].question
    ctx = harness.encode(" ".join(["ka rup dorn"] * 8) + "\nmun sel")
    short, cont, n = harness.encode("mun sel"), harness.encode(" ka rup"), model.cfg.n_ctx
    return (pipe.eval_template(question) != harness.render(question)
            or any(pipe.eval_continuation(c, " ") != " " + c for c in ("ka", "o dorn"))
            or any(len(set(pipe.eval_fewshot(32, 0, k, 0))) != k for k in (1, 3))
            or list(pipe.eval_truncate(ctx, cont, n)) != ctx[-(n + 1 - len(cont)):]
            or abs(pipe.eval_score(model, [short], [cont])[0] - harness.score_continuations(model, [short], [cont])[0]) > 1e-6
            or any(pipe.eval_norm_length(c, short, harness.encode(" " + c)) != len(c) for c in ("ka", "glint o", "ti sel")))
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.lessons import harness as _h
from course.exercises import mystery as _mystery
from course import Pipeline as _Pipeline
from course.exercises.grading import assert_detector as _assert_detector

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _h.problems)
_mysteries = _SETS["09_eval_harness"].draws()  # the notebook's `mysteries`, drawn again here
_answers = {name: _mystery.reveal(p) for name, p in _mysteries.items()}
_assert_detector(detect, {n: p for n, p in _mysteries.items() if _answers[n] == "healthy"},
                 {n: p for n, p in _mysteries.items() if _answers[n] != "healthy"}, "falsifying test", off=_OFF)
### BEGIN HIDDEN TESTS
_healthy = {f"healthy draw {s}": _mystery.hidden("healthy", s, _Pipeline(), salt="h-09-d62") for s in (1, 2)}
_broken = {b: _mystery.hidden(b, 3 + i, _Pipeline(), salt="h-09-d62") for i, b in enumerate(
    ("option-delimiter-doubled", "template-trailing-space", "norm-by-sequence-length", "fewshot-count-ignored",
     "truncation-cuts-question", "prompt-tokens-scored"))}
_assert_detector(detect, _healthy, _broken, "falsifying test (unseen draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Name the stage
#
# Write `name_cause(pipe) -> str`, returning exactly one of `"healthy"`, `"template"`, `"delimiter"`,
# `"fewshot"`, `"truncation"`, `"scoring"`, `"normalisation"`. Graded on the draws above and on fresh
# draws (other seeds, and bugs of this family that are not among the draws above); an answer that reads the
# pipeline's settings or reprs, or is always the same, cannot pass. The same functions are switched
# off.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    ### BEGIN SOLUTION
    question = task.items[0].question
    if pipe.eval_template(question) != harness.render(question):
        return "template"
    if any(pipe.eval_continuation(c, " ") != " " + c for c in ("ka", "o dorn")):
        return "delimiter"
    if any(len(set(pipe.eval_fewshot(32, 0, k, 0))) != k for k in (1, 3)):
        return "fewshot"
    ctx = harness.encode(" ".join(["ka rup dorn"] * 8) + "\nmun sel")
    short, cont, n = harness.encode("mun sel"), harness.encode(" ka rup"), model.cfg.n_ctx
    if list(pipe.eval_truncate(ctx, cont, n)) != ctx[-(n + 1 - len(cont)):]:
        return "truncation"
    if abs(pipe.eval_score(model, [short], [cont])[0] - harness.score_continuations(model, [short], [cont])[0]) > 1e-6:
        return "scoring"
    if any(pipe.eval_norm_length(c, short, harness.encode(" " + c)) != len(c) for c in ("ka", "glint o", "ti sel")):
        return "normalisation"
    return "healthy"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.lessons import harness as _h
from course.exercises import mystery as _mystery
from course import Pipeline as _Pipeline
from course.exercises.grading import assert_names as _assert_names

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _h.problems)
_KIND = {"healthy": "healthy", "option-without-delimiter": "delimiter", "option-delimiter-doubled": "delimiter",
         "fewshot-count-ignored": "fewshot", "template-differs-from-training": "template",
         "template-trailing-space": "template", "truncation-cuts-question": "truncation",
         "prompt-tokens-scored": "scoring", "norm-by-token-count": "normalisation",
         "norm-by-sequence-length": "normalisation"}
_mysteries = _SETS["09_eval_harness"].draws()  # the notebook's `mysteries`, drawn again here
_assert_names(name_cause, {n: (p, _KIND[_mystery.reveal(p)]) for n, p in _mysteries.items()}, "cause", off=_OFF)
### BEGIN HIDDEN TESTS
_cases = {}
for _i, _b in enumerate(("healthy", "option-delimiter-doubled", "template-trailing-space", "norm-by-sequence-length",
                         "fewshot-count-ignored", "truncation-cuts-question", "prompt-tokens-scored",
                         "template-differs-from-training", "option-without-delimiter", "norm-by-token-count")):
    _cases[f"fresh draw {_i}"] = (_mystery.hidden(_b, 20 + _i, _Pipeline(), salt="h-09-c3a"), _KIND[_b])
_assert_names(name_cause, _cases, "cause (fresh draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix
#
# Write `fix(pipe) -> Pipeline`: the pipeline with the broken stage replaced by the reference and
# nothing else changed (`pipe.replace(field=...)`; you may call your `name_cause`). The references:
#
# | stage | field | reference |
# |---|---|---|
# | template | `eval_template` | `harness.plain_template` |
# | delimiter | `eval_continuation` | `harness.with_delimiter` |
# | fewshot | `eval_fewshot` | `harness.pick_fewshot` |
# | truncation | `eval_truncate` | `harness.truncate_left` |
# | scoring | `eval_score` | `harness.score_continuations` |
# | normalisation | `eval_norm_length` | `harness.choice_length` |
#
# Graded by behaviour on fresh draws of broken pipelines (stages you ran and variants you did not):
# the fix may change only the broken part (a changed setting, or a part that was not broken, fails
# it), every stage of the fixed pipeline must meet its specification (`harness.problems`), and the
# fixed harness must score fresh items exactly as the reference harness does. No stored number is
# compared.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
REFERENCE = {"template": ("eval_template", harness.plain_template),
             "delimiter": ("eval_continuation", harness.with_delimiter),
             "fewshot": ("eval_fewshot", harness.pick_fewshot),
             "truncation": ("eval_truncate", harness.truncate_left),
             "scoring": ("eval_score", harness.score_continuations),
             "normalisation": ("eval_norm_length", harness.choice_length)}

def fix(pipe):
    ### BEGIN SOLUTION
    cause = name_cause(pipe)
    if cause == "healthy":
        return pipe
    field, reference = REFERENCE[cause]
    return pipe.replace(**{field: reference})
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_fix", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import torch

from course.lessons import harness as _h
from course.exercises import mystery as _mystery
from course import Pipeline as _Pipeline

_OFF = (_h.problems,)  # check_fix also switches off reveal, draw, make, touched
_fresh_items = _h.make_task(40, seed=31)
_model = _h.train_model(steps=250)  # the notebook's `model`, trained here (seeded: the same weights)

def _still_broken(fixed):
    found = _h.problems(fixed, _model, _fresh_items)
    if not found:
        ours, reference = _h.run(_model, fixed, _fresh_items, 3), _h.run(_model, _Pipeline(), _fresh_items, 3)
        if not (torch.equal(ours.lls, reference.lls) and torch.equal(ours.lengths, reference.lengths)):
            found = ["the fixed harness scores fresh items differently from the reference harness"]
    return "after your fix: " + "; ".join(found) if found else None

### BEGIN HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.hidden(b, 40 + i, _Pipeline(), salt="h-09-f17") for i, b in enumerate(
    ("template-trailing-space", "fewshot-count-ignored", "prompt-tokens-scored", "option-delimiter-doubled"))],
    _still_broken, "fix (unseen bugs)", off=_OFF)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make(b, 30 + i, _Pipeline()) for i, b in enumerate(
    ("option-without-delimiter", "truncation-cuts-question", "norm-by-token-count"))], _still_broken, "fix", off=_OFF)

# %% [markdown]
# ## What each test can and cannot prove
#
# * **Held-out likelihood well below the no-context loss** shows that the model predicts this text; it says nothing about
#   a task whose prompt is not written like the text.
# * **The exact chain's accuracy** on the same items shows that the items can be solved from the
#   question and gives a reference, with its standard error; it is not a ceiling (a rule that knows
#   how the distractors were drawn is better in expectation, being the posterior rule; here, with its
#   ties shared, it scores higher, within the noise of 200 items (its paired difference is printed
#   near the top), and a model can beat the first rule too). On real tasks, where no exact
#   model exists, a strong reference model or human answers play that part, less exactly.
# * **Reading what the harness feeds the model** (the context and the continuation's tokens) finds
#   template, delimiter and truncation bugs directly; a score drop only says that something differs.
# * **A stage test against its specification** proves that stage right on the inputs tried: choose
#   inputs that could show a difference (a context longer than the window, a multi-word choice, a
#   count above zero).
# * **`acc` against `acc_norm`**: two conventions, not a right and a wrong one; `acc_norm` here divides
#   by characters, as lm-evaluation-harness does. Compare numbers only under the same convention,
#   template, delimiter and `num_fewshot`.
# * **A bootstrap interval** covers the noise of the item sample, not a changed harness; **the paired
#   bootstrap** is the one for two runs on the same items. A difference inside the noise is not
#   evidence of an improvement at this sample size (there may be one, too small for these items to
#   show).
# * **An n-gram check** flags shared text at the stated n and rule (here: all n-grams); without fresh items of the same source as a
#   control, its rate means nothing, and it cannot see paraphrased or shorter leaks.
