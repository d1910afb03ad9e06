"""The healthy default of each part that notebooks 07 to 10 add to the ``Pipeline``.

``course.reference.pipeline`` declares every part and its default; the defaults of the early
notebooks' parts (collate, loss, optimizer, update, evaluation mode) are written there, and those
of the later ones are here, below the pipeline, so that the reference run needs no lesson module:

* ``restore`` (07): ``restore_state``, and ``_restore`` with the switches the ``resume`` bugs turn off;
* ``generate`` (08): ``generate`` on the KV cache, with ``sample_next``;
* the harness's stages (09): ``plain_template`` (with the task's ``WORDS`` and ``render``),
  ``with_delimiter``, ``pick_fewshot``, ``truncate_left``, ``score_continuations``, ``choice_length``;
* ``keep_loss`` and ``monitor`` (10): ``keep_float`` and ``monitor_no_grad`` (with ``probe_loss``).

The lessons that teach these parts (``course.lessons.generate``, ``harness``, ``amp``,
``course.reference.checkpoint``) import them from here under the same names.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F


# ----- restoring a run (notebook 07) ----------------------------------------------------------
def _restore(run, ckpt: dict, *, optimizer: bool = True, scheduler: bool = True, rng: bool = True,
             cursor: bool = True, config: bool = True, schedule_config: bool = True) -> None:
    """The reference restore with switches: each one off is a way real resume code goes wrong (the
    catalogue's ``resume`` bugs). ``config`` off keeps the checkpoint's hyperparameters (a plain
    ``load_state_dict``); ``schedule_config`` off sets the current rate from the config but leaves the
    scheduler's base rates stale."""
    run.model.load_state_dict(ckpt["model"])
    opt, sched = run.optimizer, run.scheduler
    configured = [{k: v for k, v in g.items() if k not in ("params", "lr")} for g in opt.param_groups]
    configured_lr = [g["initial_lr"] for g in opt.param_groups]
    if optimizer:
        opt.load_state_dict(ckpt["optimizer"])
    if scheduler:
        sched.load_state_dict(ckpt["scheduler"])
    if config:
        for g, conf in zip(opt.param_groups, configured):
            g.update(conf)
        if schedule_config:
            sched.base_lrs = list(configured_lr)
        lrs = [base * fn(sched.last_epoch) for fn, base in zip(sched.lr_lambdas, configured_lr)]
        for g, lr in zip(opt.param_groups, lrs):
            g["lr"] = lr
        sched._last_lr = list(lrs)
    if rng:
        torch.set_rng_state(ckpt["torch_rng"])
    run.step = ckpt["step"]
    run.data_offset = ckpt.get("data_offset", 0)
    if not cursor:  # the data stream starts again at its first batch
        run.data_offset -= ckpt["step"]
    run.history = ckpt["history"]
    run.val = ckpt["val"]


def restore_state(run, ckpt: dict) -> None:
    """The reference ``restore`` part: put the saved state of ``ckpt`` into the freshly started ``run``
    and keep the configuration of ``run.pipe``.

    Restored from the checkpoint: weights, optimizer state (moments, step counts), the scheduler's
    position (``last_epoch``), the torch RNG, the step and data cursor, the history. Taken from the
    pipeline (as ``course.reference.train.start`` built them): every param-group hyperparameter (``initial_lr``,
    weight decay, betas, ...) and the scheduler's ``base_lrs``; the current ``lr`` is recomputed from
    them at the saved position, ``base_lr * lr_lambda(last_epoch)``, the expression the scheduler
    itself uses, so an unchanged configuration resumes bit for bit.
    """
    _restore(run, ckpt)


# ----- sampling and generation (notebook 08) --------------------------------------------------
def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                greedy: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
    """One next token per row of ``logits`` (B, V): the argmax when ``greedy``, else a draw from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest logits."""
    if greedy:
        return logits.argmax(-1)
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (use greedy=True for the argmax)")
    scaled = logits.float() / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = F.softmax(scaled, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _check_args(model, prompt: torch.Tensor, max_new_tokens: int) -> None:
    if prompt.dim() != 2 or prompt.dtype != torch.long or prompt.shape[1] < 1:
        raise ValueError("prompt must be a (B, P) long tensor with P >= 1")
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    n_ctx = model.cfg.n_ctx
    if prompt.shape[1] + max_new_tokens > n_ctx:
        raise ValueError(f"prompt ({prompt.shape[1]}) + max_new_tokens ({max_new_tokens}) exceeds n_ctx={n_ctx}")


@torch.no_grad()
def generate(model, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             greedy: bool = False, seed: int = 0, eos_id: int | None = None, return_logits: bool = False):
    """Continue ``prompt`` (B, P) by up to ``max_new_tokens`` tokens on the KV cache.

    Returns the tokens (B, P + n), n <= max_new_tokens (and, with ``return_logits``, the logits each
    new token was chosen from, (B, n, V)). Once a row has emitted ``eos_id`` its later tokens are
    ``eos_id`` too; generation stops when every row has. Seeded by ``seed`` through a private
    generator. The model runs in eval mode and is put back in the mode it was in.
    """
    _check_args(model, prompt, max_new_tokens)
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    caches = model.new_cache()
    logits = model(prompt, caches, start=0)[:, -1]  # prefill: the last position predicts the next token
    pos = prompt.shape[1]  # the absolute position of the next token fed back
    tokens, used = [prompt], []
    done = torch.zeros(prompt.shape[0], dtype=torch.bool)
    for i in range(max_new_tokens):
        used.append(logits)
        nxt = sample_next(logits, temperature, top_k, greedy, gen)
        if eos_id is not None:
            nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
            done = done | (nxt == eos_id)
        tokens.append(nxt.unsqueeze(1))
        if i == max_new_tokens - 1 or bool(done.all()):
            break
        logits = model(nxt.unsqueeze(1), caches, start=pos)[:, -1]
        pos += 1
    model.train(was_training)
    out = torch.cat(tokens, dim=1)
    return (out, torch.stack(used, dim=1)) if return_logits else out


# ----- the harness's healthy stages (notebook 09) ---------------------------------------------
WORDS = ("o", "ka", "ti", "mun", "sel", "rup", "vex", "dorn", "lish", "wamp", "quel", "bres",
         "glint", "fyord", "hazzy", "crump")


def render(symbols) -> str:
    """Symbols of the language as text: words joined by one space."""
    return " ".join(WORDS[int(s)] for s in symbols)


def plain_template(question) -> str:
    """The question as the training documents write it: words joined by one space."""
    return render(question)


def with_delimiter(choice: str, target_delimiter: str) -> str:
    """The continuation that is scored: the target delimiter, then the choice."""
    return target_delimiter + choice


def pick_fewshot(pool_size: int, index: int, k: int, seed: int) -> list[int]:
    """``k`` distinct examples of the few-shot pool for item ``index``, seeded by (seed, index)."""
    k = max(0, min(int(k), pool_size))
    return random.Random(f"fewshot|{seed}|{index}").sample(range(pool_size), k)


def truncate_left(context: list[int], continuation: list[int], n_ctx: int) -> list[int]:
    """The context's tokens cut from the left so that context + continuation, minus the last token
    (what the model reads), fit ``n_ctx`` positions: the oldest few-shot examples go first."""
    keep = n_ctx + 1 - len(continuation)
    if keep <= 0:
        raise ValueError(f"a continuation of {len(continuation)} tokens does not fit n_ctx={n_ctx}")
    return list(context)[-keep:]


@torch.no_grad()
def score_continuations(model, contexts: list[list[int]], continuations: list[list[int]]) -> list[float]:
    """For each pair of token lists, the sum of the log-probabilities of the continuation's tokens
    given the context and the continuation's earlier tokens. One batched forward (right-padded)."""
    seqs = [list(c) + list(x) for c, x in zip(contexts, continuations)]
    L = max(len(s) for s in seqs) - 1
    inputs = torch.zeros(len(seqs), L, dtype=torch.long)
    for i, s in enumerate(seqs):
        inputs[i, :len(s) - 1] = torch.tensor(s[:-1])
    logp = F.log_softmax(model(inputs).double(), dim=-1)
    out = []
    for i, (s, x) in enumerate(zip(seqs, continuations)):
        n, m = len(s), len(x)
        pos = torch.arange(n - m - 1, n - 1)
        out.append(float(logp[i, pos, torch.tensor(s[n - m:])].sum()))
    return out


def choice_length(choice: str, context: list[int], continuation: list[int]) -> float:
    """What ``acc_norm`` divides by: the choice's number of characters, without the delimiter."""
    return float(len(choice))


# ----- what the loop keeps, the monitor (notebook 10) -----------------------------------------
def keep_float(loss: torch.Tensor):
    """The reference ``keep_loss``: a Python float, so the history holds no graph."""
    return loss.item()


def probe_loss(model: torch.nn.Module, batch, loss_fn) -> torch.Tensor:
    """The loss of ``model`` on ``batch`` as the pipeline scores it (no autocast, grad mode as is)."""
    return loss_fn(model(batch.inputs), batch)


def monitor_no_grad(model: torch.nn.Module, batch, loss_fn) -> float:
    """The reference ``monitor``: the probe batch's loss, without building a graph, as a float."""
    with torch.no_grad():
        return float(probe_loss(model, batch, loss_fn))
