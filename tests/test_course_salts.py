"""``course.toolkit.salts``: while a test is graded, the grader's secret is joined to every salt a
hidden draw is made with, so a table of the draws a test cell's text describes identifies nothing.

The negative control of each test is the same code with the box empty (no grading): there the
table built from the test cell's text answers every draw, which is what a learner who once read
the cell (red team, run 10: from the kernel's history, printed into the feedback) could do."""
import dataclasses

import pytest

from course.exercises import mystery
from course.lessons import hangs
from course.toolkit import salts

BUGS = ("lr-burst", "corrupted-shard", "healthy")


@pytest.fixture
def secret():
    """Set the box as the grading kernel's guard does before a test, and empty it after."""
    def put(value):
        salts.CURRENT[:] = [value]
    yield put
    salts.CURRENT[:] = [""]


def settings(pipe):
    """What a table keyed on a draw's plain settings reads (the red team's key: its seeds, lr...)."""
    return tuple((f.name, repr(getattr(pipe, f.name))) for f in dataclasses.fields(pipe)
                 if f.name not in mystery.PART_FIELDS and f.name != "bugs")


def table_from_the_cell_text():
    """The answers a learner computes at home from a test cell's text: hidden(bug, seed, salt)."""
    return {settings(mystery.make(bug, seed, salt="h-test-v1")): bug
            for seed, bug in enumerate(BUGS, start=60)}


def graded_draws():
    return [(mystery.hidden(bug, seed, salt="h-test-v1"), bug) for seed, bug in enumerate(BUGS, start=60)]


def test_mixed_leaves_a_salt_alone_outside_grading_and_never_mixes_an_empty_salt(secret):
    assert salts.mixed("h-04") == "h-04" and salts.mixed("") == ""
    secret("0123abcd")
    assert salts.mixed("h-04") == "h-04|grader:0123abcd"
    assert salts.mixed("") == "", "a visible draw (no salt) must stay the one the notebook shows"


def test_a_table_from_the_cell_text_answers_every_draw_without_the_secret():
    table = table_from_the_cell_text()
    answered = [table.get(settings(h._course_realize()[0])) for h, _ in graded_draws()]
    assert answered == list(BUGS), "control: without a secret, the test cell's text gives every answer"


def test_with_the_grader_secret_the_same_table_answers_no_draw(secret):
    table = table_from_the_cell_text()           # built at home, no secret
    secret("5f1e0c9a7b3d2e6f")                   # the test is graded
    answered = [table.get(settings(h._course_realize()[0])) for h, _ in graded_draws()]
    assert answered == [None] * len(BUGS), f"a table of the ungraded draws still answers: {answered}"


def test_a_hidden_draw_and_make_agree_under_the_same_secret(secret):
    """check_fix makes a hidden draw again in the kernel (``_course_realize``) and a test cell may
    call ``make`` with the same salt: both must give the draw the graded call got."""
    secret("aa55")
    for bug, seed in (("lr-burst", 3), ("healthy", 4)):
        drawn, made = mystery.hidden(bug, seed, salt="h-x")._course_realize()[0], mystery.make(bug, seed, salt="h-x")
        assert settings(drawn) == settings(made)


def test_two_secrets_draw_different_cases(secret):
    secret("first")
    one = [settings(h._course_realize()[0]) for h, _ in graded_draws()]
    secret("second")
    two = [settings(h._course_realize()[0]) for h, _ in graded_draws()]
    assert all(a != b for a, b in zip(one, two)), "each submission's test must draw its own cases"


def test_a_draw_keeps_the_salt_it_was_made_with(secret):
    """The record takes the secret when the test cell makes it: emptying the box afterwards (as the
    guard does after the test) changes nothing the graded call draws."""
    secret("kept")
    record = mystery.hidden("lr-burst", 5, salt="h-y")
    before = settings(record._course_realize()[0])
    salts.CURRENT[:] = [""]
    assert settings(record._course_realize()[0]) == before


def test_hangs_mixes_the_secret_into_a_hidden_jobs_kind_and_plan(secret, monkeypatch):
    visible = [hangs.draw_kind(s) for s in range(12)]
    plain = [hangs.draw_kind(s, "h13-x") for s in range(12)]
    secret("jobs-secret")
    assert [hangs.draw_kind(s, "h13-x") for s in range(12)] != plain, \
        "the kinds hidden jobs draw must change with the secret"
    assert [hangs.draw_kind(s) for s in range(12)] == visible, "a visible mystery job (no salt) is the notebook's"

    class Planned(Exception):
        pass

    def plan(kind, seed, salt, *rest):
        raise Planned(salt)
    monkeypatch.setattr(hangs, "_plan", plan)
    with pytest.raises(Planned) as seen:
        hangs.start("healthy", seed=1, salt="h13-x")
    assert seen.value.args[0] == "h13-x|grader:jobs-secret", "start must plan the job from the mixed salt"
