"""Models the course did not write, their faults, and the toolkit's checks as one fault matrix.

Two architectures, both built from a config with random weights (nothing is downloaded):

* ``gpt2``: Hugging Face ``transformers``' ``GPT2LMHeadModel`` with a tiny config; it returns a
  ``CausalLMOutputWithCrossAttentions`` whose ``.logits`` are the logits;
* ``encoder``: ``torch.nn.TransformerEncoder`` with a causal mask, in a nanoGPT-style module whose
  ``forward(idx, targets=None)`` returns ``(logits, loss)``.

A ``Setup`` is what a user hands the toolkit: model, optimizer, batch, loss and step. Each fault of
``FAULTS`` breaks one thing in a healthy setup; each check of ``CHECKS`` answers pass or fail on a
setup. ``matrix()`` runs every check on every fault of both architectures;
``python tests/own_models.py`` prints it.
"""

from __future__ import annotations

import copy
import math
import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course.toolkit.checks import BatchContractError, check_batch, update_report
from course.toolkit.batch import Batch
from course.toolkit.nonfinite import locate_step
from course.toolkit.outputs import on_logits
from course.toolkit.overfit import plain_step
from course.toolkit.preflight import preflight
from course.toolkit.telemetry import record_model

V, T, ROWS, D = 16, 8, 4, 32
PAD = V - 1  # never drawn as a token, so no target is padding
LR = 1e-2
OVERFIT_STEPS = 60


class EncoderLM(nn.Module):
    """A causal language model on ``nn.TransformerEncoder``, returning ``(logits, loss)`` like nanoGPT."""

    def __init__(self, vocab: int = V, d: int = D, n_layer: int = 2, n_head: int = 2, n_ctx: int = 16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(n_ctx, d)
        layer = nn.TransformerEncoderLayer(d, n_head, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.encoder(self.tok(idx) + self.pos(torch.arange(t)), mask=mask, is_causal=True)
        logits = self.head(self.ln(h))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def gpt2(seed: int = 0) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=V, n_positions=16, n_embd=D, n_layer=2, n_head=2, n_inner=2 * D,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


def encoder(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return EncoderLM()


ARCHS = {"gpt2": gpt2, "encoder": encoder}
# One weight inside block 1 of each, where a fault is planted: its module is what the locator must name.
BLOCK = {"gpt2": "transformer.h.1.", "encoder": "encoder.layers.1."}
LAYER = {"gpt2": "transformer.h.1.mlp.c_fc", "encoder": "encoder.layers.1.linear1"}
OUTSIDE = {"gpt2": "transformer.h.1.mlp.c_proj.weight", "encoder": "encoder.layers.1.linear2.weight"}


def mean_loss(logits, batch):
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())


def summed_loss(logits, batch):
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="sum")


def no_zero_grad_step(model, optimizer, batch, loss_fn):
    loss = loss_fn(model(batch.inputs), batch)
    loss.backward()
    optimizer.step()
    return loss.item()


def make_batch(seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, V - 1, (ROWS, T + 1), generator=g)
    return Batch(seq[:, :-1].clone(), seq[:, 1:].clone(), PAD)


@dataclass
class Setup:
    arch: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch: Batch
    loss_fn: Callable = mean_loss
    step_fn: Callable = plain_step


def healthy(arch: str) -> Setup:
    model = ARCHS[arch]()
    return Setup(arch, model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0), make_batch())


# ----- faults: each returns a broken copy of a healthy setup ------------------------------------------
def param_outside_optimizer(s: Setup) -> Setup:
    left_out = OUTSIDE[s.arch]
    params = [p for n, p in s.model.named_parameters() if n != left_out]
    return replace(s, optimizer=torch.optim.AdamW(params, lr=LR, weight_decay=0.0))


def forgotten_zero_grad(s: Setup) -> Setup:
    return replace(s, step_fn=no_zero_grad_step)


def sum_loss(s: Setup) -> Setup:
    return replace(s, loss_fn=summed_loss)


def lr_zero(s: Setup) -> Setup:
    for g in s.optimizer.param_groups:
        g["lr"] = 0.0
    return s


def frozen_block(s: Setup) -> Setup:
    for n, p in s.model.named_parameters():
        if n.startswith(BLOCK[s.arch]):
            p.requires_grad_(False)
    return s


def unshifted_targets(s: Setup) -> Setup:
    return replace(s, batch=Batch(s.batch.inputs, s.batch.inputs.clone(), s.batch.pad_id))


def inf_in_one_layer(s: Setup) -> Setup:
    with torch.no_grad():
        s.model.get_submodule(LAYER[s.arch]).weight[0, 0] = math.inf
    return s


FAULTS = {
    "healthy": lambda s: s,
    "param outside optimizer": param_outside_optimizer,
    "forgotten zero_grad": forgotten_zero_grad,
    "summed loss": sum_loss,
    "lr zero": lr_zero,
    "frozen block": frozen_block,
    "unshifted targets": unshifted_targets,
    "inf in one layer": inf_in_one_layer,
}


def setup(arch: str, fault: str) -> Setup:
    return FAULTS[fault](healthy(arch))


# ----- checks: each maps a setup to (passed, what it measured) ----------------------------------------
PREFLIGHT = ("loss at init", "loss is a mean", "finite grads", "update", "grads reset", "overfit",
             "no-step control", "mask")


def run_checks(s: Setup) -> dict[str, tuple[bool, str]]:
    """Every check on one setup. The healthy setups expect nothing frozen (``expect_frozen=()``)."""
    out = {}
    report = preflight(s.model, s.optimizer, s.batch, s.loss_fn, s.step_fn, overfit_steps=OVERFIT_STEPS,
                       expect_frozen=())
    for name in PREFLIGHT:
        out[f"preflight: {name}"] = (report[name].passed, report[name].measured)
    try:
        check_batch(s.batch, V, model=s.model)
        out["check_batch (model=)"] = (True, "ok")
    except BatchContractError as err:
        out["check_batch (model=)"] = (False, str(err))
    finding = locate_step(s.model, s.optimizer, s.batch, s.loss_fn)
    out["locate_step"] = (finding is None, str(finding) if finding else "all finite")
    m, o = copy.deepcopy((s.model, s.optimizer))
    r = update_report(m, o, lambda: s.step_fn(m, o, s.batch, on_logits(s.loss_fn)), expect_frozen=())
    out["update_report (expect_frozen=())"] = (r.ok, f"{r.cause()}; {r.frozen_summary()}")
    m, o = copy.deepcopy((s.model, s.optimizer))
    tel = record_model(m, o, [s.batch] * 3, s.loss_fn, s.step_fn)
    finite = tel.table("grad_finite").min().item() == 1.0
    still = [n for n, moved in zip(tel.names, (tel.table("rel_update") > 0).all(0).tolist()) if not moved]
    out["telemetry: finite, every layer moves"] = (finite and not still and not tel.frozen,
                                                   f"grads finite: {finite}; still: {still[:2]}; frozen: {len(tel.frozen)}")
    return out


# Which check must fail on which fault (and pass on the healthy setup): what the tests assert.
TARGETS = {
    "param outside optimizer": ["preflight: update", "update_report (expect_frozen=())",
                                "telemetry: finite, every layer moves"],
    "forgotten zero_grad": ["preflight: grads reset"],
    "summed loss": ["preflight: loss is a mean"],
    "lr zero": ["preflight: update", "update_report (expect_frozen=())", "telemetry: finite, every layer moves"],
    "frozen block": ["preflight: update", "update_report (expect_frozen=())", "telemetry: finite, every layer moves"],
    "unshifted targets": ["check_batch (model=)"],
    "inf in one layer": ["locate_step", "preflight: finite grads", "telemetry: finite, every layer moves"],
}


def matrix(archs=tuple(ARCHS)) -> dict[tuple[str, str], dict[str, tuple[bool, str]]]:
    """{(arch, fault): {check: (passed, measured)}}."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {(a, f): run_checks(setup(a, f)) for a in archs for f in FAULTS}


def table(results) -> str:
    archs = sorted({a for a, _ in results}, key=list(ARCHS).index)
    checks = list(next(iter(results.values())))
    cols = [(a, f) for a in archs for f in FAULTS]
    short = {f: f"{i}" for i, f in enumerate(FAULTS)}
    lines = ["faults: " + "; ".join(f"{short[f]} = {f}" for f in FAULTS),
             f"{'check':<38} " + "  ".join(f"{a:^{3 * len(FAULTS) - 1}}" for a in archs),
             f"{'':<38} " + "  ".join(" ".join(f"{short[f]:>2}" for f in FAULTS) for _ in archs)]
    for c in checks:
        cells = []
        for a in archs:
            cells.append(" ".join(f"{'ok' if results[(a, f)][c][0] else 'F':>2}" for f in FAULTS))
        lines.append(f"{c:<38} " + "  ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    torch.set_num_threads(1)
    res = matrix()
    print(table(res))
    if "-v" in sys.argv:
        for (a, f), checks in res.items():
            print(f"\n{a} / {f}")
            for c, (ok, measured) in checks.items():
                print(f"  {'PASS' if ok else 'FAIL'}  {c}: {measured}")
