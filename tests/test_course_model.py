"""Specifications of ``course.reference.model.TinyGPT``: shape, the three attention masks, positions, the KV cache.

A freshly initialised model (weights of std 0.02) barely uses its context, so differences a broken
variant should show could hide below a tolerance. The models here are re-initialised with large
random weights (``_lively``): every dependence the architecture allows is then clearly visible, and
every dependence it forbids must still be exactly absent.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from course.reference.model import ModelConfig, TinyGPT

CFG = ModelConfig(vocab_size=18, n_ctx=16, d_model=16, n_head=2, n_layer=2, d_mlp=32)


def _lively(cfg: ModelConfig = CFG, seed: int = 0) -> TinyGPT:
    """A model in eval mode whose every parameter is N(0, 0.5), seeded."""
    torch.manual_seed(seed)
    model = TinyGPT(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model.eval()


def _ids(B: int = 3, T: int = 10, seed: int = 0, vocab: int = CFG.vocab_size) -> torch.Tensor:
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def _positions_changed_by_token(model: TinyGPT, ids: torch.Tensor, t: int) -> list[int]:
    """Which positions' logits change (at all, bit for bit) when only token ``t`` changes."""
    changed = ids.clone()
    changed[:, t] = (ids[:, t] + 1) % model.cfg.vocab_size
    diff = (model(ids) != model(changed)).any(-1).any(0)
    return diff.nonzero().flatten().tolist()


@torch.no_grad()
def _position_changed_by_others(model: TinyGPT, ids: torch.Tensor, t: int) -> bool:
    """Do position ``t``'s logits change when every other token changes and token t stays?"""
    changed = (ids + 1) % model.cfg.vocab_size
    changed[:, t] = ids[:, t]
    return not torch.equal(model(ids)[:, t], model(changed)[:, t])


def test_forward_returns_logits_of_shape_batch_time_vocab():
    model = _lively()
    for B, T in ((1, 1), (3, 10), (2, CFG.n_ctx)):
        out = model(_ids(B, T))
        assert out.shape == (B, T, CFG.vocab_size), f"logits of ids ({B}, {T}) have shape {tuple(out.shape)}"
        assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_causal_model_never_lets_a_later_token_change_an_earlier_logit():
    model, ids = _lively(), _ids()
    T = ids.shape[1]
    for t in range(T):
        changed = _positions_changed_by_token(model, ids, t)
        assert all(pos >= t for pos in changed), (
            f"changing token {t} changed the logits at positions {[p for p in changed if p < t]}: the causal mask leaks the future"
        )
        assert t in changed, f"changing token {t} left its own logits unchanged: the model ignores its input"
    assert _positions_changed_by_token(model, ids, 0) == list(range(T)), "a causal model must let token 0 reach every later position"


def test_unmasked_attention_lets_later_tokens_change_earlier_logits():
    """Negative control of the causal test: the same measurement catches attention="none"."""
    model, ids = _lively(dataclasses.replace(CFG, attention="none")), _ids()
    changed = _positions_changed_by_token(model, ids, ids.shape[1] - 1)
    assert changed == list(range(ids.shape[1])), f"with attention='none' the last token reached only positions {changed}"


def test_self_attention_logits_depend_only_on_the_token_itself():
    self_only, causal, ids = _lively(dataclasses.replace(CFG, attention="self")), _lively(), _ids()
    for t in range(ids.shape[1]):
        assert not _position_changed_by_others(self_only, ids, t), (
            f"with attention='self' the logits at position {t} depend on other tokens"
        )
        assert _positions_changed_by_token(self_only, ids, t) == [t], "with attention='self' a token must change exactly its own logits"
    # negative control: in a causal model the last position depends on the others
    assert _position_changed_by_others(causal, ids, ids.shape[1] - 1)


@torch.no_grad()
def _incremental(model: TinyGPT, ids: torch.Tensor, chunks: list[int], use_cache: bool = True, absolute: bool = True) -> torch.Tensor:
    """Feed ``ids`` in chunks of the given sizes, as generation does; return the concatenated logits."""
    caches = model.new_cache() if use_cache else None
    outs, i = [], 0
    for n in chunks:
        outs.append(model(ids[:, i:i + n], caches=caches, start=i if absolute else 0))
        i += n
    return torch.cat(outs, 1)


def test_kv_cache_one_token_at_a_time_equals_a_full_forward():
    model, ids = _lively(), _ids(T=CFG.n_ctx)
    with torch.no_grad():
        full = model(ids)
    T = ids.shape[1]
    for chunks in ([1] * T, [5, 1, 1, 9], [T]):
        inc = _incremental(model, ids, chunks)
        err = (inc - full).abs().max().item()
        assert torch.allclose(inc, full, atol=1e-5, rtol=0), f"cached decoding in chunks {chunks} differs from a full forward by {err:.2e}"
    # negative controls: the same comparison catches a dropped cache and a wrong start position
    assert not torch.allclose(_incremental(model, ids, [1] * T, use_cache=False), full, atol=1e-5, rtol=0)
    assert not torch.allclose(_incremental(model, ids, [1] * T, absolute=False), full, atol=1e-5, rtol=0)


def test_kv_cache_grows_by_the_tokens_fed():
    model, ids = _lively(), _ids(B=2, T=7)
    caches = model.new_cache()
    assert len(caches) == CFG.n_layer and all(c == {} for c in caches), "new_cache() must be one empty dict per block"
    with torch.no_grad():
        model(ids[:, :4], caches=caches, start=0)
        model(ids[:, 4:], caches=caches, start=4)
    for c in caches:
        assert c["k"].shape[2] == 7 and c["v"].shape[2] == 7, f"cache holds {c['k'].shape[2]} positions after 7 tokens"


def test_positions_beyond_the_context_window_raise():
    model = _lively()
    n = CFG.n_ctx
    with pytest.raises(ValueError, match="n_ctx"):
        model(_ids(T=n + 1))
    with pytest.raises(ValueError, match="n_ctx"):
        model(_ids(T=4), start=n - 3)
    # negative control: the last window that fits does not raise
    assert model(_ids(T=4), start=n - 4).shape == (3, 4, CFG.vocab_size)


def test_without_positions_the_start_offset_changes_nothing():
    no_pos, ids = _lively(dataclasses.replace(CFG, use_positions=False)), _ids(T=6)
    with torch.no_grad():
        ref = no_pos(ids)
        for k in (1, 5, CFG.n_ctx - 6):
            assert torch.equal(ref, no_pos(ids, start=k)), f"use_positions=False, yet start={k} changed the logits"
        # negative control: with positions, the offset matters
        with_pos = _lively()
        assert not torch.equal(with_pos(ids), with_pos(ids, start=5))


def test_unknown_attention_mask_is_rejected():
    model = _lively(dataclasses.replace(CFG, attention="bidirectional"))
    with pytest.raises(ValueError, match="bidirectional"):
        model(_ids())


def test_num_params_counts_every_parameter_once():
    model = TinyGPT(CFG)
    by_hand = sum(t.numel() for t in model.state_dict().values())
    assert model.num_params() == by_hand, f"num_params() = {model.num_params()}, state_dict holds {by_hand} numbers"


def test_initialisation_is_deterministic_under_a_seed():
    torch.manual_seed(3)
    a = TinyGPT(CFG).state_dict()
    torch.manual_seed(3)
    b = TinyGPT(CFG).state_dict()
    torch.manual_seed(4)
    c = TinyGPT(CFG).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), "two models built after the same seed differ"
    assert not all(torch.equal(a[k], c[k]) for k in a)
