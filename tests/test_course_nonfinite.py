"""Specifications of ``course.toolkit.nonfinite`` (the first-non-finite locator and the NaN decision tree) and of
the non-finite bugs in ``course.bugs.nonfinite``: each bug goes bad at its own stage on the reference
pipeline, and the reference itself (the negative control) never does.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from course import Pipeline
from course.bugs import catalogue, get, inject
from course.reference.model import ModelConfig, TinyGPT
from course.toolkit.nonfinite import STAGES, TREE, WHEN, Event, Locator, advise, advice_text, first_nonfinite, is_bad, output_text, quadratic_descent, tree_widget, when_of
from course.reference.diagnose import locate, trace
from course.reference.train import start, train_steps

PIPE = Pipeline()

# bug -> (first bad stage, step of the first bad event); None: any step after the first update
EXPECTED = {
    "embedding-scaled-by-inf": ("embeddings", 0),
    "attention-scale-inf": ("scores", 0),
    "causal-mask-strict": ("softmax", 0),
    "loss-scaled-in-fp16": ("loss", 0),
    "log-guarded-by-where": ("grads", 0),
    "adam-eps-zero": ("params", 0),
    "lr-sign-typo": ("grads", None),  # None: a step after the first update (when depends on the run)
}


def test_every_nonfinite_bug_has_an_expected_stage_here():
    names = {b.name for b in catalogue("non-finite")}
    assert names == set(EXPECTED), f"add each non-finite bug to EXPECTED: {sorted(names ^ set(EXPECTED))}"


def test_reference_pipeline_stays_finite_for_twenty_steps():
    assert locate(PIPE, steps=20) is None, "the healthy reference went non-finite: the negative control fails"


@pytest.mark.parametrize("name", [n for n, (_, step) in EXPECTED.items() if step is not None])
def test_each_bug_goes_bad_first_at_its_own_stage_before_any_later_step(name):
    stage, step = EXPECTED[name]
    found = locate(inject(PIPE, name), steps=5)
    assert found is not None, f"{name} never went non-finite in 5 steps"
    assert (found.stage, found.step) == (stage, step), f"{name}: expected {stage} at step {step}, got {found}"


def test_bugs_reach_distinct_stages():
    stages = [s for s, step in EXPECTED.values() if step is not None]
    assert len(stages) == len(set(stages)) >= 6, f"the catalogue's bugs should break at different stages: {stages}"


def test_lr_typo_is_finite_at_first_and_goes_bad_only_after_updates():
    broken = inject(PIPE, "lr-sign-typo")
    found = locate(broken, steps=40)
    assert found is not None and found.step >= 3, f"expected non-finite only after several updates, got {found}"
    assert found.stage == EXPECTED["lr-sign-typo"][0], f"the weights grow until the backward overflows: {found}"
    assert locate(broken.replace(lr=1e-5), steps=found.step + 1) is None, \
        "the same pipeline at lr 1e-5 must stay finite over as many steps: the LR is the cause"


def test_before_update_bugs_do_not_depend_on_the_learning_rate():
    for name in ("causal-mask-strict", "embedding-scaled-by-inf", "loss-scaled-in-fp16"):
        for lr in (1e-2, 0.0):
            found = locate(inject(PIPE, name).replace(lr=lr), steps=2)
            assert found is not None and found.step == 0, f"{name} at lr {lr}: {found}"


def test_where_bug_has_a_finite_forward_and_finite_loss():
    events = trace(inject(PIPE, "log-guarded-by-where"), steps=1)
    forward = [e for e in events if e.stage not in ("grads", "optimizer", "params")]
    assert forward and not any(is_bad(e) for e in forward), "the where bug must be finite until backward"


def test_adam_eps_zero_leaves_moments_finite_and_breaks_only_rows_with_zero_gradient():
    events = trace(inject(PIPE, "adam-eps-zero"), steps=1)
    assert not any(is_bad(e) for e in events if e.stage != "params"), "loss, grads and moments must be finite"
    tok = next(e for e in events if e.stage == "params" and e.name == "tok.weight").tensor
    bad_rows = (~torch.isfinite(tok)).any(-1).nonzero().flatten().tolist()
    V = PIPE.language().vocab_size
    assert bad_rows == [V - 2, V - 1], f"expected only the PAD and EOS rows (never in a batch) to go NaN, got {bad_rows}"


def test_trace_follows_the_training_loop_exactly():
    """trace mirrors course.reference.train.train_steps: after n steps the parameters are bit-identical."""
    events = trace(PIPE, steps=3, seed=2)
    run = start(PIPE, 2)
    train_steps(run, 3, eval_every=0)
    params = {e.name: e.tensor for e in events if e.stage == "params"}
    assert events[0].step == 2
    for name, p in run.model.named_parameters():
        assert torch.equal(params[name], p.detach()), f"parameter {name} differs from train_steps after 3 steps"


def test_events_come_in_forward_then_backward_then_update_order():
    events = trace(PIPE, steps=1)
    stages = [e.stage for e in events]
    assert stages[0] == "input"
    last_forward = max(i for i, s in enumerate(stages) if s in ("input", "embeddings", "activations", "scores", "softmax", "logits"))
    assert stages[last_forward] == "logits", "the logits must be the last forward record"
    order = ["logits", "loss", "grads", "optimizer", "params"]
    firsts = [stages.index(s) for s in order]
    assert firsts == sorted(firsts), f"stage order {list(zip(order, firsts))}"
    names = [e.name for e in events]
    for block in range(PIPE.model.n_layer):
        s, w = names.index(f"blocks.{block}.attn.score_probe"), names.index(f"blocks.{block}.attn.softmax_probe")
        assert s < w < names.index(f"blocks.{block}.attn.proj"), "scores, then softmax, then the projection"


def test_locator_does_not_change_the_model_output():
    model = PIPE.build_model(0)
    ids = torch.randint(0, 18, (2, 9), generator=torch.Generator().manual_seed(0))
    plain = model(ids)
    with Locator(model) as loc:
        hooked = model(ids)
    assert torch.equal(plain, hooked) and loc.events
    assert torch.equal(model(ids), plain), "hooks must be removed on exit"


def test_probe_modules_hold_no_parameters_and_strict_mask_empties_row_zero():
    base = ModelConfig(vocab_size=18, n_ctx=8, d_model=16, n_head=2, n_layer=1, d_mlp=32)
    torch.manual_seed(0)
    model = TinyGPT(base)
    assert not any("probe" in n for n, _ in model.named_parameters())
    mask = model.blocks[0].attn.__class__(ModelConfig(attention="strict")).mask(4, 4, "cpu")
    assert not mask[0].any() and mask[1:].any(-1).all(), "strict: row 0 sees no key, the others see the past"


def test_input_stage_float_nan_and_ids_out_of_range():
    lin = nn.Sequential(nn.Linear(3, 2))
    with Locator(lin) as loc:
        lin(torch.tensor([[1.0, float("nan"), 0.0]]))
    assert (first_nonfinite(loc.events).stage, first_nonfinite(loc.events).name) == ("input", "input[0]")
    with Locator(lin) as loc:
        lin(torch.tensor([[1e30, -1e30, 0.0]]))  # huge but finite: not a finding
    assert not is_bad(loc.events[0])
    assert is_bad(Event(0, "input", "ids", torch.tensor([0, 5]), limit=5))
    assert is_bad(Event(0, "input", "ids", torch.tensor([-1, 2]), limit=5))
    assert not is_bad(Event(0, "input", "ids", torch.tensor([0, 4]), limit=5))
    found = locate(inject(PIPE.replace(min_len=8), "inputs-padded-with-ignore-index"), steps=2)
    assert (found.stage, found.step) == ("input", 0), f"negative padding ids must be reported at the input: {found}"


def test_optimizer_state_and_labels_on_a_learners_own_model():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    with Locator(model, opt, labels={"0": "scores"}) as loc:
        out = model(torch.ones(1, 2))
        out.sum().backward()
        opt.step()
        opt.state[model[0].weight]["exp_avg_sq"].fill_(float("inf"))
        loc.record_loss(out.sum())
        loc.record_grads()
        loc.record_optimizer()
        loc.record_params()
    assert [e.stage for e in loc.events][:3] == ["input", "scores", "logits"], \
        "labels name a module's stage; the module whose output is the model's output is labelled logits"
    found = first_nonfinite(loc.events)
    assert (found.stage, found.name) == ("optimizer", "0.weight.exp_avg_sq"), str(found)


def test_decision_tree_covers_every_possible_choice_and_names_real_bugs():
    possible = 0
    for when in WHEN:
        for stage in STAGES:
            if when_of(0 if when != "after some updates" else 3, stage) != when:
                with pytest.raises(ValueError):  # e.g. params "before any update": recorded after it
                    advise(when, stage)
                assert advice_text(when, stage).startswith("Not a possible first finding")
                continue
            possible += 1
            a = advise(when, stage)
            assert a.hypotheses and a.test, f"no advice for {when}, {stage}"
    assert possible == len(STAGES) * 2, "every stage is possible after some updates and at step 0 in one phase"
    for (when, stage), a in TREE.items():
        assert when_of(0 if when != "after some updates" else 3, stage) == when, f"impossible tree key {(when, stage)}"
        for name in a.examples:
            get(name)  # raises KeyError for a bug that does not exist
    assert "cannot be the cause" in advice_text("before any update", "loss")
    assert "cannot be the cause" not in advice_text("after some updates", "loss")
    assert "cannot be the cause" not in advice_text("in the first update", "params")
    assert "geometrically" not in advice_text("after some updates", "grads").replace("not geometrically", "")
    with pytest.raises(ValueError):
        advise("yesterday", "loss")


def test_when_of_puts_update_stages_of_step_zero_in_the_first_update():
    assert when_of(0, "grads") == "before any update"
    assert when_of(0, "params") == when_of(0, "optimizer") == "in the first update"
    assert when_of(5, "input") == when_of(1, "params") == "after some updates"


def test_decision_tree_examples_end_where_the_locator_says():
    for (when, stage), a in TREE.items():
        for name in a.examples:
            if get(name).family != "non-finite":
                continue
            found = locate(inject(PIPE, name), steps=20)
            assert found is not None
            assert (when_of(found.step, found.stage), found.stage) == (when, stage), \
                f"tree lists {name} under {(when, stage)}: locator says {found}"


def test_widget_output_changes_when_a_dropdown_changes():
    box = tree_widget()
    before = output_text(box.out)
    assert "Hypotheses" in before
    box.stage.value = "grads"
    after_stage = output_text(box.out)
    assert after_stage != before and "'grads'" in after_stage
    box.when.value = "after some updates"
    assert output_text(box.out) != after_stage and "cannot be the cause" not in output_text(box.out)
    box.when.value = "before any update"
    box.stage.value = "params"
    assert output_text(box.out).startswith("Not a possible first finding"), "params are recorded after the update"


def test_quadratic_descent_is_stable_iff_step_times_curvature_in_0_2():
    for r in (0.1, 1.0, 1.5, 1.99):
        assert quadratic_descent(r, 2000)[-1] < 1e-3, f"eta a = {r} must converge"
    assert quadratic_descent(2.0, 50)[-1] == 1.0, "eta a = 2 oscillates with constant amplitude"
    for r in (2.01, 3.0, -0.1):
        assert quadratic_descent(r, 2000)[-1] > 1e3, f"eta a = {r} must diverge"
    assert math.isinf(quadratic_descent(10.0, 1000)[-1])


def test_fast_step_check_agrees_with_the_exact_one():
    """trace() stops on ``_any_bad`` (a sum per float tensor first): it must equal any(is_bad(e))."""
    from course.toolkit.nonfinite import _any_bad
    cases = [torch.full((1000,), 3e38), torch.tensor([1.0, float("inf")]), torch.tensor([float("-inf"), float("inf")]),
             torch.tensor([float("nan")]), torch.tensor([60000.0, 60000.0]).half(), torch.tensor([float("inf")]).half(),
             torch.tensor([1e300, 1e300], dtype=torch.float64), torch.tensor([1 + 1j, complex("inf")]),
             torch.tensor([0, 5]), torch.empty(0), torch.tensor([True]), torch.zeros(3, dtype=torch.bfloat16)]
    for t in cases:
        for limit in (None, 5):
            events = [Event(0, "activations", "a", torch.zeros(2)), Event(0, "input", "b", t, limit)]
            assert _any_bad(events) == any(is_bad(e) for e in events), f"{t} (limit {limit})"


def test_widget_shows_its_advice_as_plain_text_without_a_live_frontend():
    box = tree_widget()
    box.when.value, box.stage.value = WHEN[2], "grads"
    text = box._repr_mimebundle_()["text/plain"]
    assert advice_text(WHEN[2], "grads") in text and "grads" in text, text
    assert "VBox" not in text, "a saved notebook would show VBox(children=...) instead of the advice"
    assert "application/vnd.jupyter.widget-view+json" in box._repr_mimebundle_(), "a live frontend still gets the widget"


def test_every_explorer_and_the_practice_box_read_as_text_without_a_live_frontend():
    from course.toolkit.textview import html_text, with_text
    import ipywidgets as widgets
    assert html_text("<b>a</b> &amp; b") == "a & b"
    box = with_text(widgets.VBox([]), lambda: "the state in words")
    assert box._repr_mimebundle_()["text/plain"] == "the state in words"
    plain = widgets.VBox([])
    assert "VBox" in plain._repr_mimebundle_()["text/plain"], "the control: a box without it shows its repr"
