"""Targeted submissions for 08_generation (see tests/autograde_cases.py for the format).

Every graded exercise has an alternative correct answer (full marks), a realistic wrong answer and a
degenerate one (a constant, a delegation to the package function that is switched off, or one that
reads the pipeline's settings), each with the exact test cells it must lose. The three exercises do
not call each other, so each case loses only its own cell.
"""
from autograder.grading import Case

A = "08_generation"
DETECT, CAUSE, FIX = "test_mystery_detect", "test_mystery_cause", "test_my_generate"

# ----- detect --------------------------------------------------------------------------------------
# Another model seed, other prompts, perturbation from position 3, allclose, the sampler at T = 2.
_DETECT_ALT = """def detect(pipe):
    model = pipe.build_model(3)
    model.eval()
    ids = torch.arange(16).remainder(7).repeat(2, 1)[:, :10]
    later = ids.clone()
    later[:, 3:] = 7 - later[:, 3:]
    with torch.no_grad():
        if not torch.allclose(model(ids)[:, :3], model(later)[:, :3], atol=1e-5):
            return True
        toks, logits = pipe.generate(model, ids[:, :3], 9, greedy=True, return_logits=True)
        for k in range(logits.shape[1]):
            if not torch.allclose(logits[:, k], model(toks[:, :3 + k])[:, -1], atol=1e-5):
                return True
    z = torch.tensor([1.0, 0.0, -1.0, 0.5, 2.0])
    got = pipe.generate(G.FixedLogits(z), torch.zeros(5000, 2, dtype=torch.long), 1, temperature=2.0, seed=11)[:, -1]
    want = torch.softmax(z / 2.0, -1)
    freq = torch.bincount(got, minlength=5).float() / len(got)
    return bool((freq - want).abs().max() > 0.04)
"""

# Realistic wrong: the two logit checks only, no sampler test: the temperature bugs pass unseen.
_DETECT_NO_SAMPLER = """def detect(pipe):
    model = pipe.build_model(0).eval()
    tokens = torch.randint(0, 8, (4, 12), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 8
    with torch.no_grad():
        if (model(tokens)[:, :6] - model(changed)[:, :6]).abs().max() > 1e-4:
            return True
        out, used = pipe.generate(model, tokens[:, :4], 8, greedy=True, return_logits=True)
        again = torch.stack([model(out[:, :4 + k])[:, -1] for k in range(used.shape[1])], dim=1)
        return bool((used - again).abs().max() > 1e-4)
"""

# ----- name_cause ----------------------------------------------------------------------------------
# The sampler first, then the mask, then the first disagreeing step; other model, prompts, numbers.
_NAME_ALT = """def name_cause(pipe):
    z = torch.tensor([0.0, 2.5, 1.0])
    got = pipe.generate(G.FixedLogits(z), torch.zeros(5000, 1, dtype=torch.long), 1, temperature=0.4, seed=2)[:, -1]
    if (G.token_frequencies(got, 3) - torch.softmax(z / 0.4, -1)).abs().max() > 0.04:
        return "temperature"
    model = pipe.build_model(5).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 0, 1, 2], [7, 7, 1, 1, 3, 3, 5, 5, 0, 0]])
    other = ids.clone()
    other[:, 5:] = 0
    with torch.no_grad():
        if not torch.allclose(model(ids)[:, :5], model(other)[:, :5], atol=1e-5):
            return "causal-mask"
        toks, logits = pipe.generate(model, ids[:, :5], 6, greedy=True, return_logits=True)
        for k in range(logits.shape[1]):
            if not torch.allclose(logits[:, k], model(toks[:, :5 + k])[:, -1], atol=1e-5):
                return ["last-logits", "position"][k] if k < 2 else "cache"
    return "healthy"
"""

# Realistic wrong: any disagreement after the first step is read as a position bug, so the cache
# that forgets generated tokens is named "position".
_NAME_ANY_LATER_STEP = """def name_cause(pipe):
    model = pipe.build_model(0).eval()
    tokens = torch.randint(0, 8, (4, 12), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 8
    with torch.no_grad():
        if (model(tokens)[:, :6] - model(changed)[:, :6]).abs().max() > 1e-4:
            return "causal-mask"
        out, used = pipe.generate(model, tokens[:, :4], 8, greedy=True, return_logits=True)
        again = torch.stack([model(out[:, :4 + k])[:, -1] for k in range(used.shape[1])], dim=1)
        per_step = (used - again).abs().amax(dim=(0, 2))
    if per_step[0] > 1e-4:
        return "last-logits"
    if per_step.max() > 1e-4:
        return "position"
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    first = pipe.generate(G.FixedLogits(logits), torch.zeros(4000, 1, dtype=torch.long), 1, temperature=0.5, seed=0)[:, -1]
    if (G.token_frequencies(first, 4) - torch.softmax(logits / 0.5, -1)).abs().max() > 0.03:
        return "temperature"
    return "healthy"
"""

# Degenerate: reads the pipeline's settings and reprs. Every part is an opaque <part> and every
# setting the healthy one, so this answers "healthy" (or guesses).
_NAME_READS_SETTINGS = """def name_cause(pipe):
    if pipe.model.attention != "causal":
        return "causal-mask"
    text = repr(pipe.generate)
    for key, kind in (("position", "position"), ("append", "cache"), ("temperature", "temperature")):
        if key in text:
            return kind
    return "healthy"
"""

# ----- my_generate and fix ---------------------------------------------------------------------------
# Alternative correct: Gumbel-max sampling (the argmax of logits / T plus Gumbel noise follows
# softmax(logits / T)), positions read off the growing output, a while loop.
_GEN_GUMBEL = """@torch.no_grad()
def my_generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, greedy=False, seed=0,
                eos_id=None, return_logits=False):
    if prompt.shape[1] + max_new_tokens > model.cfg.n_ctx:
        raise ValueError("too long for the context")
    mode = model.training
    model.eval()
    rng = torch.Generator().manual_seed(seed)
    cache = model.new_cache()
    logits = model(prompt, cache)[:, -1, :]
    seq, history = prompt.clone(), []
    stopped = torch.zeros(len(prompt), dtype=torch.bool)
    while True:
        history.append(logits)
        if greedy:
            nxt = torch.argmax(logits, dim=-1)
        else:
            z = logits / temperature
            if top_k is not None:
                kth = z.sort(dim=-1, descending=True).values[:, top_k - 1:top_k]
                z = z.masked_fill(z < kth, -float("inf"))
            u = torch.rand(z.shape, generator=rng).clamp(1e-12, 1 - 1e-7)
            nxt = torch.argmax(z - torch.log(-torch.log(u)), dim=-1)
        if eos_id is not None:
            nxt[stopped] = eos_id
            stopped = stopped | (nxt == eos_id)
        seq = torch.cat((seq, nxt.view(-1, 1)), dim=1)
        if len(history) == max_new_tokens or (eos_id is not None and bool(stopped.all())):
            break
        logits = model(nxt.view(-1, 1), cache, start=seq.shape[1] - 1)[:, -1, :]
    model.train(mode)
    if return_logits:
        return seq, torch.stack(history, dim=1)
    return seq


def fix(pipe):
    return pipe.replace(generate=my_generate)
"""

# Realistic wrong: right tokens, no cache: every step recomputes the whole prefix. Greedy output
# matches, but the generator is not the KV-cache generator the specification asks for.
_GEN_NO_CACHE = """@torch.no_grad()
def my_generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, greedy=False, seed=0,
                eos_id=None, return_logits=False):
    if prompt.shape[1] + max_new_tokens > model.cfg.n_ctx:
        raise ValueError("too long")
    mode = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    ids, used = prompt, []
    done = torch.zeros(len(prompt), dtype=torch.bool)
    for _ in range(max_new_tokens):
        last = model(ids)[:, -1]
        used.append(last)
        if greedy:
            tok = last.argmax(-1)
        else:
            z = last / temperature
            if top_k is not None:
                z = z.masked_fill(z < z.topk(top_k, -1).values[:, -1:], float("-inf"))
            tok = torch.multinomial(torch.softmax(z, -1), 1, generator=g)[:, 0]
        if eos_id is not None:
            tok = torch.where(done, torch.full_like(tok, eos_id), tok)
            done = done | (tok == eos_id)
        ids = torch.cat([ids, tok[:, None]], 1)
        if eos_id is not None and done.all():
            break
    model.train(mode)
    return (ids, torch.stack(used, 1)) if return_logits else ids


def fix(pipe):
    return pipe.replace(generate=my_generate)
"""

# Realistic wrong: the cache, but `start` is never passed, so every fed-back token sits at position 0.
_GEN_NO_START = _GEN_GUMBEL.replace("logits = model(nxt.view(-1, 1), cache, start=seq.shape[1] - 1)[:, -1, :]",
                                    "logits = model(nxt.view(-1, 1), cache)[:, -1, :]")
assert _GEN_NO_START != _GEN_GUMBEL

# Degenerate: the package's generator (switched off while graded).
_GEN_DELEGATES = """def my_generate(*args, **kwargs):
    return G.generate(*args, **kwargs)


def fix(pipe):
    return pipe.replace(generate=my_generate)
"""

# Degenerate (red team 14): the package's copy of the generator that the bugs are made from, with the
# flaw that is harmless at temperature 1, driven through a module that only rescales the logits; it
# never calls the switched-off sampler. Scored 3/3 while the copy was on; the test switches it off.
_GEN_BROKEN_COPY = """import torch.nn.functional as F
from course.bugs.generation import _BrokenGenerate
_engine = _BrokenGenerate("temperature-after-softmax")


class _Lens(torch.nn.Module):
    def __init__(self, model, temperature, greedy):
        super().__init__()
        self.inner, self.t, self.greedy, self.cfg, self.seen = model, temperature, greedy, model.cfg, []

    def new_cache(self):
        return self.inner.new_cache()

    def forward(self, ids, caches=None, start=0):
        out = self.inner(ids, caches, start=start)
        self.seen.append(out[:, -1])
        if self.greedy:
            return torch.full_like(out, float("-inf")).scatter(-1, out.argmax(-1, keepdim=True), 0.0)
        return out / self.t


@torch.no_grad()
def my_generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, greedy=False, seed=0,
                eos_id=None, return_logits=False):
    lens = _Lens(model, temperature, greedy)
    r = _engine(lens, prompt, max_new_tokens, temperature=1.0, top_k=None if greedy else top_k, greedy=False,
                seed=seed, eos_id=eos_id, return_logits=return_logits)
    if return_logits:
        return r[0], torch.stack(lens.seen[: r[1].shape[1]], dim=1)
    return r


def fix(pipe):
    return pipe.replace(generate=my_generate)
"""

# Realistic wrong: the Gumbel generator without the hold: it stops when every row has emitted EOS,
# but a row that has goes on generating ordinary tokens after it.
_GEN_NO_EOS_HOLD = _GEN_GUMBEL.replace("            nxt[stopped] = eos_id\n", "")
assert _GEN_NO_EOS_HOLD != _GEN_GUMBEL

# Degenerate (red team, 2026-12-07): results that work out their values only when read. Inside the
# test's switched-off block the generator computes nothing; each result is a stand-in that runs the
# package's generate when indexed, compared or handed to torch, which the check did after the switch
# was lifted (3/3 before generator_problems read every result there, as plain tensors).
_GEN_LAZY = 'import torch\nimport torch.nn.functional as F\nfrom course.lessons import generate as _Gref_mod\n\nclass _Lazy:\n    def __init__(self, thunk):\n        object.__setattr__(self, "_thunk", thunk)\n        object.__setattr__(self, "_cache", [])\n    def _real(self):\n        if not self._cache:\n            self._cache.append(self._thunk())\n        return self._cache[0]\n    def __getitem__(self, idx):\n        return _Lazy(lambda: self._real()[idx])\n    def __getattr__(self, name):\n        if name.startswith("_"):\n            raise AttributeError(name)\n        return getattr(self._real(), name)\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        kwargs = kwargs or {}\n        def m(x):\n            if isinstance(x, _Lazy):\n                return x._real()\n            if isinstance(x, (list, tuple)):\n                return type(x)(m(y) for y in x)\n            return x\n        return func(*m(args), **{k: m(v) for k, v in kwargs.items()})\n    def __len__(self): return len(self._real())\n    def __iter__(self): return iter(self._real())\n    def __bool__(self): return bool(self._real())\n    def __repr__(self): return repr(self._real())\n\ndef _mk(op):\n    def f(self, *a):\n        a = [x._real() if isinstance(x, _Lazy) else x for x in a]\n        return getattr(self._real(), op)(*a)\n    return f\nfor _op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__add__", "__radd__", "__sub__",\n            "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__and__", "__or__", "__invert__",\n            "__neg__", "__abs__", "__float__", "__int__", "__index__"):\n    setattr(_Lazy, _op, _mk(_op))\n_Lazy.__hash__ = object.__hash__\n\n\ndef my_generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, greedy=False, seed=0,\n                eos_id=None, return_logits=False):\n    B, P = prompt.shape\n    if P + max_new_tokens > model.cfg.n_ctx:\n        raise ValueError("prompt plus new tokens do not fit in n_ctx")\n    box = []\n    def run():\n        if not box:\n            box.append(_Gref_mod.generate(model, prompt, max_new_tokens, temperature=temperature, top_k=top_k,\n                                          greedy=greedy, seed=seed, eos_id=eos_id, return_logits=return_logits))\n        return box[0]\n    if return_logits:\n        return _Lazy(lambda: run()[0]), _Lazy(lambda: run()[1])\n    return _Lazy(run)\n\n\ndef fix(pipe):\n    return pipe.replace(generate=my_generate)\n'

CASES = [
    # detect
    Case(A, "detect_other_settings", {"detect": _DETECT_ALT}, set()),
    Case(A, "detect_without_sampler", {"detect": _DETECT_NO_SAMPLER}, {DETECT}),
    Case(A, "detect_always_true", {"detect": "def detect(pipe):\n    return True\n"}, {DETECT}),
    Case(A, "detect_delegates",
         {"detect": "def detect(pipe):\n    return bool(G.consistency_problems(pipe))\n"}, {DETECT}),
    # name_cause
    Case(A, "cause_other_order", {"name_cause": _NAME_ALT}, set()),
    Case(A, "cause_any_later_step", {"name_cause": _NAME_ANY_LATER_STEP}, {CAUSE}),
    Case(A, "cause_reads_settings", {"name_cause": _NAME_READS_SETTINGS}, {CAUSE}),
    # my_generate and fix
    Case(A, "generate_gumbel", {"my_generate": _GEN_GUMBEL}, set()),
    Case(A, "generate_does_not_hold_eos", {"my_generate": _GEN_NO_EOS_HOLD}, {FIX}),
    Case(A, "generate_without_cache", {"my_generate": _GEN_NO_CACHE}, {FIX}),
    Case(A, "generate_forgets_start", {"my_generate": _GEN_NO_START}, {FIX}),
    Case(A, "generate_delegates", {"my_generate": _GEN_DELEGATES}, {FIX}),
    Case(A, "generate_broken_copy", {"my_generate": _GEN_BROKEN_COPY}, {FIX}),
    Case(A, "generate_lazy_results", {"my_generate": _GEN_LAZY}, {FIX}),
]
