"""The course's toolkit pointed at your own model, batch, loss and optimizer.

    python examples/own_model.py          # after `pip install .` (or make venv)

The model here is one the course did not write: a nanoGPT-style causal language model on
``torch.nn.TransformerEncoder`` whose ``forward(idx, targets=None)`` returns ``(logits, loss)``.
A Hugging Face model works the same way (its output object has ``.logits``), for example
``transformers.GPT2LMHeadModel(GPT2Config(vocab_size=..., n_layer=2, ...))``. Every check this
example runs reads the model's output through ``course.toolkit.outputs.logits_of``; anything else
raises ``ModelOutputError`` naming what the model returned.

What you provide, and what the toolkit assumes of it:

* ``batch``: a ``course.Batch(inputs, targets, pad_id)`` (``course.toolkit.batch``) of ``(B, T)`` int64 ids, where
  ``targets[b, t]`` is the token after ``inputs[b, :t+1]`` (already shifted: a Hugging Face model's
  ``labels`` convention, where the model shifts inside, is *not* this) and ``-100`` is not scored;
* ``loss_fn(logits, batch)``: your loss, given the logits;
* ``step_fn(model, optimizer, batch, loss_fn)``: one step of your loop (default: zero_grad, forward,
  loss, backward, step); pass yours so the checks run the code you will train with.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from course.toolkit.checks import check_batch, update_report
from course.toolkit.batch import Batch
from course.toolkit.nonfinite import locate_step
from course.toolkit.outputs import on_logits
from course.toolkit.preflight import preflight
from course.toolkit.telemetry import outliers, record_model

VOCAB, T = 16, 8


class TinyLM(nn.Module):
    def __init__(self, vocab=VOCAB, d=32, n_layer=2, n_head=2, n_ctx=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(n_ctx, d)
        layer = nn.TransformerEncoderLayer(d, n_head, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        h = self.blocks(self.tok(idx) + self.pos(torch.arange(t)),
                        mask=nn.Transformer.generate_square_subsequent_mask(t), is_causal=True)
        logits = self.head(h)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def my_loss(logits, batch):
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())


def my_step(model, optimizer, batch, loss_fn):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch.inputs), batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def main():
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    tokens = torch.randint(0, VOCAB - 1, (4, T + 1), generator=torch.Generator().manual_seed(0))
    batch = Batch(tokens[:, :-1], tokens[:, 1:], pad_id=VOCAB - 1)  # the shift by one, done here

    # 1. The batch contract, with the model's clause: logits of shape (B, T, V) for this batch.
    #    Proves: the batch is well formed (shape, dtype, id range, the shift, the mask) and the model
    #    gives one row of V logits per position. Cannot prove: that the labels mean anything.
    print("batch:", check_batch(batch, VOCAB, model=model))

    # 2. The pre-flight, on copies (your model and optimizer are not changed). expect_frozen=()
    #    says nothing should be frozen: a tensor with requires_grad=False then fails "update".
    #    Each line below says what its pass proves and what it cannot.
    report = preflight(model, optimizer, batch, my_loss, my_step, overfit_steps=60, expect_frozen=())
    print(report.explain())

    # 3. The first non-finite tensor of one step (None: every recorded tensor was finite). Hooks see
    #    module outputs only, so it names a module, not an operation inside one.
    print("first non-finite:", locate_step(model, optimizer, batch, my_loss))

    # 4. A frozen block, as a forgotten requires_grad_(False) leaves it: named, and failed because it
    #    was not expected. (A LoRA base would pass expect_frozen=lambda n: not n.endswith((".A", ".B")).)
    #    update_report runs one real step, so it gets copies; on_logits(my_loss) is the adapter that
    #    lets a loss of logits take the model's raw (logits, loss) output.
    m, o = copy.deepcopy((model, optimizer))
    for p in m.blocks.layers[1].parameters():
        p.requires_grad_(False)
    r = update_report(m, o, lambda: my_step(m, o, batch, on_logits(my_loss)), expect_frozen=())
    print("update:", r.cause(), "|", r.frozen_summary())

    # 5. Per-layer telemetry of a short run of your model (trained in place), judged against each
    #    layer's own history: it says "this layer changed behaviour at step s", not whether that is a bug.
    tel = record_model(model, optimizer, [batch] * 30, my_loss, my_step)
    print("layers recorded:", len(tel.names), "| grad-norm outliers:", outliers(tel, "grad_norm")[:3])
    return report


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
