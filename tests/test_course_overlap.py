"""Specifications of ``course.toolkit.overlap``: exact and near duplicates, the shingle Jaccard, group splits.

Each detector is checked on both sides: it flags planted copies and stays quiet where there are none.
"""

from __future__ import annotations

import pytest
import torch

from course.toolkit import overlap


def test_shingle_jaccard_on_hand_computed_cases():
    assert overlap.shingle_jaccard([1, 2, 3, 4], [2, 3, 4, 5], 2) == 0.5, "{12,23,34} vs {23,34,45}: 2 shared of 4"
    assert overlap.shingle_jaccard([1, 1, 1, 1, 1], [1, 1, 2], 2) == 0.5, "shingles are a set: repeats count once"
    assert overlap.shingle_jaccard([1, 2], [3, 4], 3) == 0.0, "no shingles on either side: 0.0, not a ZeroDivisionError"
    assert overlap.shingle_jaccard(torch.tensor([4, 5, 6]), [4, 5, 6], 3) == 1.0, "tensors and lists alike"


def test_exact_duplicates_flags_exactly_the_planted_copies():
    g = torch.Generator().manual_seed(0)
    train = torch.randint(0, 50, (40, 12), generator=g)
    val = torch.randint(0, 50, (10, 12), generator=g)
    val[[2, 7]] = train[[5, 30]]
    assert overlap.exact_duplicates(train, val).nonzero().flatten().tolist() == [2, 7]
    with pytest.raises(ValueError, match="different lengths"):
        overlap.exact_duplicates(train, val[:, :5])


def test_max_jaccard_equals_brute_force_over_all_pairs():
    g = torch.Generator().manual_seed(1)
    train = torch.randint(0, 4, (30, 10), generator=g)  # 4 symbols: many shared shingles, long posting lists
    val = torch.randint(0, 4, (12, 10), generator=g)
    for n in (1, 3, 5):
        fast = overlap.max_jaccard(train, val, n)
        brute = torch.tensor([max(overlap.shingle_jaccard(v, t, n) for t in train) for v in val])
        assert torch.allclose(fast, brute), f"n={n}: inverted-index Jaccard {fast.tolist()} != brute force {brute.tolist()}"


def test_max_jaccard_handles_windows_shorter_than_n_and_large_vocabularies():
    assert overlap.max_jaccard(torch.ones(3, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.long), 8).tolist() == [0.0, 0.0]
    big = torch.tensor([[50_000, 50_001, 50_002, 50_003, 7]] * 2)  # V**n overflows int64: the row-unique path
    assert overlap.max_jaccard(big, big[:1], 5).tolist() == [1.0]


def test_audit_separates_slid_copies_from_fresh_windows_of_the_same_source():
    from course import Pipeline

    lang = Pipeline().language()
    docs = lang.sample(30, 120, seed=3)
    windows, _ = overlap.sliding_windows(docs, length=17, stride=4)
    fresh = lang.sample(200, 17, seed=4)
    neighbours = overlap.audit(windows[::2], windows[1::2])  # each odd window shares 13 tokens with an even one
    chance = overlap.audit(windows[::2], fresh)
    assert neighbours.exact == 0 and neighbours.near > 0.9, f"slid windows were not flagged: {neighbours}"
    assert chance.exact == 0 and chance.near < 0.1, f"fresh windows of the source flagged too often: {chance}"


def test_sliding_windows_cut_every_stride_and_label_each_window_with_its_document():
    docs = torch.arange(20).view(2, 10)
    windows, ids = overlap.sliding_windows(docs, length=4, stride=3)
    assert windows.tolist() == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9], [10, 11, 12, 13], [13, 14, 15, 16], [16, 17, 18, 19]]
    assert ids.tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_split_never_puts_a_group_on_both_sides(seed):
    groups = torch.randint(0, 25, (300,), generator=torch.Generator().manual_seed(seed))
    tr, va = overlap.group_split(groups, 0.2, seed)
    assert sorted(tr.tolist() + va.tolist()) == list(range(300)), "every item in exactly one split"
    assert not set(groups[tr].tolist()) & set(groups[va].tolist()), "a group has items on both sides"
    assert len(set(groups[va].tolist())) == 5, "0.2 of 25 groups should go to validation"
    again = overlap.group_split(groups, 0.2, seed)
    assert torch.equal(tr, again[0]) and torch.equal(va, again[1]), "same seed, different split"


def test_group_split_keeps_one_group_on_each_side_at_the_extremes():
    tr, va = overlap.group_split(torch.tensor([3, 3, 8]), 0.99, 0)
    assert len(tr) and len(va), "validation may never take every group"
    with pytest.raises(ValueError, match="two groups"):
        overlap.group_split(torch.tensor([1, 1]), 0.5, 0)
