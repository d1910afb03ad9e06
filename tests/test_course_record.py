"""Specifications of ``course.exercises.record.Diagnosis.problems`` and ``course.toolkit.plots.loss_plot``."""

from __future__ import annotations

import pytest

from course.exercises.record import Diagnosis

GOOD = dict(
    symptom="training loss flat at ln(V) from step 0",
    hypotheses=["the optimizer never steps", "the learning rate is zero"],
    test="run update_report on one step",
    prediction="cause() names no-step under the first, lr-zero under the second",
    result="cause() = 'lr-zero'",
)


def test_a_complete_record_has_no_problems():
    assert Diagnosis(**GOOD).problems() == [], f"a complete record was flagged: {Diagnosis(**GOOD).problems()}"


@pytest.mark.parametrize("field", ["symptom", "test", "prediction", "result"])
@pytest.mark.parametrize("blank", ["", "   \n"])
def test_an_empty_field_is_flagged_by_name(field, blank):
    problems = Diagnosis(**{**GOOD, field: blank}).problems()
    assert any(field in p for p in problems), f"an empty {field!r} was not flagged: {problems}"
    assert len(problems) == 1, f"only the empty {field!r} should be flagged, got {problems}"


@pytest.mark.parametrize("hypotheses", [[], ["the optimizer never steps"], ["the optimizer never steps", "  "]])
def test_fewer_than_two_hypotheses_are_flagged(hypotheses):
    problems = Diagnosis(**{**GOOD, "hypotheses": hypotheses}).problems()
    assert any("two competing hypotheses" in p for p in problems), f"{hypotheses!r} was accepted as competing hypotheses"


def test_duplicate_hypotheses_are_flagged():
    problems = Diagnosis(**{**GOOD, "hypotheses": ["lr is zero", "no step", "lr is zero"]}).problems()
    assert any("same" in p for p in problems), f"duplicate hypotheses were not flagged: {problems}"


# ----- plots -------------------------------------------------------------------------------------------
def test_loss_plot_draws_every_curve_and_one_labelled_line_per_baseline():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course import Pipeline
    from course.toolkit.plots import loss_plot

    pipe = Pipeline()
    baselines = pipe.language().baselines(pipe.seq_len)
    ax = loss_plot({"healthy": [3.0, 2.0, 1.5], "broken": [3.0, 3.0, 3.0]}, baselines, title="t", ylim=(0, 4))
    try:
        labels = [line.get_label() for line in ax.get_lines()]
        assert "healthy" in labels and "broken" in labels, f"curves missing from the plot: {labels}"
        flat = [line for line in ax.get_lines() if len(set(line.get_ydata())) == 1 and len(line.get_xdata()) == 2]
        levels = sorted(float(line.get_ydata()[0]) for line in flat)
        assert levels == pytest.approx(sorted(baselines.values())), f"horizontal lines at {levels}, baselines {baselines}"
        texts = " ".join(t.get_text() for t in ax.texts)
        assert all(name in texts for name in baselines), f"baseline labels missing: {texts!r}"
        assert ax.get_ylim() == (0, 4) and ax.get_title() == "t"
    finally:
        plt.close(ax.figure)
