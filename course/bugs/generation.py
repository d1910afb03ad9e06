"""Bugs of notebook 08 (family ``generation``): low teacher-forced loss, poor generation.

Most live in the pipeline's ``generate`` part, which training and evaluation never call, so the
teacher-forced loss of a broken pipeline is exactly the healthy one's. Each is the reference
generator (``course.lessons.generate.generate``) with one line wrong:

* ``kv-cache-position-offset``: each token fed back gets the position of the token before it;
* ``kv-cache-position-reset``: each token fed back gets position 0 (``start`` not passed);
* ``kv-cache-not-appended``: the cache keeps the prompt's keys and values but never stores a
  generated token's, so from the third generated token on the model has forgotten what it wrote;
* ``kv-cache-reset-each-step``: a fresh cache every step, so a fed-back token sees only itself;
* ``first-position-logits``: the prefill's ``logits[:, 0]`` instead of ``logits[:, -1]``: the first
  new token is predicted from the first prompt token;
* ``temperature-after-softmax``: ``softmax(logits) / T``, which sampling renormalises: every
  temperature samples like T = 1;
* ``temperature-multiplied``: ``logits * T`` instead of ``logits / T``.

One lives in training: ``eos-masked-in-training`` (the EOS target is ignored with the padding; the
model never learns to stop; needs a pipeline whose ``collate`` is ``course.lessons.generate.eos_batch``).
The causal mask (``causal-mask-off``, family ``too-good``) is the other training-side cause of
"good loss, bad samples".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..lessons.generate import eos_masked_batch
from ..reference.parts import _check_args, sample_next
from ..reference.pipeline import Pipeline
from .registry import bug


class _KeepFirst(dict):
    """A layer cache that stores a key only the first time it is set: the prefill's keys and values
    stay, every later append is dropped."""

    def __setitem__(self, key, value):
        if key not in self:
            super().__setitem__(key, value)


@dataclass(frozen=True)
class _BrokenGenerate:
    """The reference generator with one flaw (see the module docstring)."""

    flaw: str

    @torch.no_grad()
    def __call__(self, model, prompt, max_new_tokens, temperature=1.0, top_k=None, greedy=False, seed=0,
                 eos_id=None, return_logits=False):
        _check_args(model, prompt, max_new_tokens)
        was_training = model.training
        model.eval()
        gen = torch.Generator().manual_seed(seed)
        caches = model.new_cache()
        if self.flaw == "cache-not-appended":
            caches = [_KeepFirst() for _ in caches]
        prefill = model(prompt, caches, start=0)
        logits = prefill[:, 0] if self.flaw == "first-position-logits" else prefill[:, -1]
        pos = prompt.shape[1] - 1 if self.flaw == "position-offset" else prompt.shape[1]
        tokens, used = [prompt], []
        done = torch.zeros(prompt.shape[0], dtype=torch.bool)
        for i in range(max_new_tokens):
            used.append(logits)
            if self.flaw == "temperature-after-softmax" and not greedy:
                if top_k is not None and top_k < logits.shape[-1]:
                    logits = logits.masked_fill(logits < logits.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
                probs = F.softmax(logits, dim=-1) / temperature
                nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            elif self.flaw == "temperature-multiplied" and not greedy:
                nxt = sample_next(logits * temperature * temperature, temperature, top_k, False, gen)
            else:
                nxt = sample_next(logits, temperature, top_k, greedy, gen)
            if eos_id is not None:
                nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
                done = done | (nxt == eos_id)
            tokens.append(nxt.unsqueeze(1))
            if i == max_new_tokens - 1 or bool(done.all()):
                break
            if self.flaw == "cache-reset-each-step":
                caches = model.new_cache()
            start = 0 if self.flaw == "position-reset" else pos
            logits = model(nxt.unsqueeze(1), caches, start=start)[:, -1]
            pos += 1
        model.train(was_training)
        out = torch.cat(tokens, dim=1)
        return (out, torch.stack(used, dim=1)) if return_logits else out


_CACHE = "generation is garbage; the teacher-forced loss is the healthy one's"


@bug("generation", _CACHE + ": cached logits leave the recompute from the first fed-back token")
def kv_cache_position_offset(pipe: Pipeline) -> Pipeline:
    """Each generated token is fed back at the position of the token before it (``pos`` starts at
    ``P - 1`` instead of ``P``): two tokens share a position, every later one is off by one."""
    return pipe.replace(generate=_BrokenGenerate("position-offset"))


@bug("generation", _CACHE + ": cached logits leave the recompute from the first fed-back token")
def kv_cache_position_reset(pipe: Pipeline) -> Pipeline:
    """Every generated token is fed back at position 0 (``start`` not passed with the cache)."""
    return pipe.replace(generate=_BrokenGenerate("position-reset"))


@bug("generation", _CACHE + ": cached logits leave the recompute from the third generated token")
def kv_cache_not_appended(pipe: Pipeline) -> Pipeline:
    """The cache keeps the prompt's keys and values and drops every later append: each new token
    attends to the prompt and itself, never to the tokens generated before it."""
    return pipe.replace(generate=_BrokenGenerate("cache-not-appended"))


@bug("generation", _CACHE + ": cached logits leave the recompute from the first fed-back token")
def kv_cache_reset_each_step(pipe: Pipeline) -> Pipeline:
    """A new, empty cache at every step: each fed-back token attends only to itself."""
    return pipe.replace(generate=_BrokenGenerate("cache-reset-each-step"))


@bug("generation", "the first generated token is wrong; the cached logits of the first step are not the recompute's")
def first_position_logits(pipe: Pipeline) -> Pipeline:
    """The prefill's ``logits[:, 0]`` (the first prompt position) instead of ``logits[:, -1]``: the
    first new token is predicted from the first prompt token only."""
    return pipe.replace(generate=_BrokenGenerate("first-position-logits"))


@bug("generation", "every temperature samples like T = 1; greedy and the logits are right")
def temperature_after_softmax(pipe: Pipeline) -> Pipeline:
    """``softmax(logits) / T``: a constant factor that sampling renormalises away."""
    return pipe.replace(generate=_BrokenGenerate("temperature-after-softmax"))


@bug("generation", "low temperatures sample too flat and high ones too sharp; greedy is right")
def temperature_multiplied(pipe: Pipeline) -> Pipeline:
    """``logits * T`` where ``logits / T`` was meant."""
    return pipe.replace(generate=_BrokenGenerate("temperature-multiplied"))


@bug("generation", "generation never stops: the model never learned to emit EOS; the loss looks fine")
def eos_masked_in_training(pipe: Pipeline) -> Pipeline:
    """The EOS target is ignored together with the padding (for pipelines whose ``collate`` is
    ``course.lessons.generate.eos_batch``): nothing ever teaches the model to emit EOS."""
    return pipe.replace(collate=eos_masked_batch)
