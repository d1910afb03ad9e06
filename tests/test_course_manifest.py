"""Specifications of ``course.lessons.manifest``: each component sees its own kind of change and no other,
the run block is never a difference, notebook-defined parts are hashed by what they do."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from course.lessons import manifest
from course.bugs import inject

from small_pipeline import SMALL


def _m(pipe=SMALL, seed=0, steps=10, directory="x"):
    return manifest.manifest(pipe, seed, steps, directory)


def test_the_same_inputs_give_no_difference_even_with_another_run_block():
    a, b = _m(directory="one"), _m(directory="two")
    assert a["run"] != b["run"]
    assert manifest.diff(a, b) == {}


def test_a_changed_learning_rate_is_a_config_difference_only():
    assert manifest.diff(_m(), _m(SMALL.replace(lr=SMALL.lr / 3))) == {"config": ["lr"]}


def test_another_data_seed_changes_config_and_data():
    d = manifest.diff(_m(), _m(SMALL.replace(data_seed=SMALL.data_seed + 1)))
    assert set(d) == {"config", "data"} and "data_seed" in d["config"] and "train windows" in d["data"]
    assert "val windows" not in d["data"], "the validation windows do not depend on the data seed"


def test_another_seed_changes_the_batches_but_not_the_windows():
    d = manifest.diff(_m(seed=0), _m(seed=1))
    assert d == {"config": ["seed"], "data": ["batches 0-9"]}, d


def test_the_thread_count_is_an_environment_difference():
    a = _m()
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        b = _m()
    finally:
        torch.set_num_threads(threads)
    assert manifest.diff(a, b) == {"environment": ["torch threads"]}


def test_a_part_defined_outside_the_package_is_hashed_by_its_code():
    def loss_a(logits, batch):
        return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())

    def loss_b(logits, batch):
        return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())

    def loss_c(logits, batch):
        return 2.0 * F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())

    ha, hb, hc = (manifest.function_hash(f) for f in (loss_a, loss_b, loss_c))
    assert ha == hb, "the same code under another name must hash the same"
    assert ha != hc, "a changed constant must change the hash"
    assert manifest.diff(_m(SMALL.replace(loss_fn=loss_a)), _m(SMALL.replace(loss_fn=loss_c))) == {"code": ["part loss_fn"]}


def test_a_swapped_package_part_is_a_code_difference():
    d = manifest.diff(_m(), _m(inject(SMALL, "stale-lr-resume")))
    assert d == {"code": ["part restore"]}, d


def test_added_and_removed_entries_count_both_ways():
    a = _m()
    b = copy.deepcopy(a)
    b["environment"]["new flag"] = "1"
    del b["config"]["clip"]
    assert manifest.diff(a, b) == {"config": ["clip"], "environment": ["new flag"]}
    assert manifest.diff(b, a) == {"config": ["clip"], "environment": ["new flag"]}
