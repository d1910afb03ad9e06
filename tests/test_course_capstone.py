"""course.exercises.capstone: draws keyed by identity, balanced and opaque; each family's symptom check sees its
bugs and stays quiet on healthy draws; the reference fix removes the symptom and keeps every field
the bug did not touch; a fresh pipeline is no fix."""
import pytest
import torch

from course import Pipeline
from course.exercises import capstone, mystery
from course.exercises.grading import SwitchedOff, switched_off

IDS = [f"student{i:03d}" for i in range(100)]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_every_family_is_drawn_across_100_ids():
    drawn = {capstone.summary_row(i)[0] for i in IDS}
    assert drawn == set(capstone.FAMILY_NAMES)


def test_family_table_is_consistent():
    for name, fam in capstone.FAMILIES.items():
        assert fam.name == name and 2 <= len(fam.bugs) <= 4, name
        for bug in fam.bugs:
            assert capstone.FAMILY_OF[bug] == name
    assert len(capstone.FAMILY_OF) == sum(len(f.bugs) for f in capstone.FAMILIES.values()), "a bug in two families"


def test_print_candidates_lists_each_bug_of_the_family_with_its_catalogue_symptom(capsys):
    from course.bugs import get
    for name, fam in capstone.FAMILIES.items():
        capstone.print_candidates(name)
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith(repr(name)) and len(lines) == 1 + len(fam.bugs), lines
        assert [line.strip() for line in lines[1:]] == [f"{b}: {get(b).symptom}" for b in fam.bugs]
    with pytest.raises(KeyError):
        capstone.print_candidates("no-such-family")


def test_same_id_same_draw_and_other_ids_or_attempts_differ():
    a, again = capstone.draw_for("ada"), capstone.draw_for("ada")
    assert mystery.reveal(a) == mystery.reveal(again) and mystery.signature(a) == mystery.signature(again)
    assert capstone.summary_row("ada") == (capstone.answer_family(a), mystery.reveal(a))
    # two ids: another bug or another configuration (here: both differ, by the hashes)
    b = capstone.draw_for("grace")
    assert (mystery.reveal(a), mystery.signature(a)) != (mystery.reveal(b), mystery.signature(b))
    assert capstone._choice("ada", 1) != capstone._choice("ada", 0)
    assert mystery.signature(capstone.draw_for("ada", attempt=1)) != mystery.signature(a)
    with pytest.raises(ValueError):
        capstone.draw_for("  ")


@pytest.mark.parametrize("family", capstone.FAMILY_NAMES)
def test_draws_are_opaque_within_a_family(family):
    fam = capstone.FAMILIES[family]
    sigs = {mystery.signature(mystery.make(b, 3, fam.base, salt=capstone.SALT))
            for b in (mystery.HEALTHY,) + fam.bugs}
    # same seed and salt: same configuration, so every field, type and repr is the same for every bug
    assert len(sigs) == 1


def _sample():
    """One draw per family (a different bug index per family), drawn as learners' draws are."""
    out = []
    for k, fam in enumerate(capstone.FAMILIES.values()):
        bug = fam.bugs[k % len(fam.bugs)]
        out.append((fam, mystery.make(bug, 1000 + k, fam.base, salt=capstone.SALT)))
    return out


@pytest.mark.parametrize("fam,pipe", _sample(), ids=lambda x: getattr(x, "name", ""))
def test_symptom_fires_on_the_draw_and_the_reference_fix_removes_it(fam, pipe):
    assert fam.symptom(pipe), f"{fam.name}: the symptom check misses {mystery.reveal(pipe)}"
    fixed = capstone.reference_fix(pipe)
    assert mystery.kept_problems(pipe, fixed) == []
    assert fam.symptom(fixed) is None


@pytest.mark.parametrize("family", capstone.FAMILY_NAMES)
def test_symptom_is_quiet_on_a_healthy_draw(family):
    fam = capstone.FAMILIES[family]
    healthy = mystery.make(mystery.HEALTHY, 7, fam.base, salt="negative-control")
    assert fam.symptom(healthy) is None
    assert capstone.reference_fix(healthy) is healthy


def test_a_fresh_pipeline_is_no_fix():
    pipe = capstone.draw_for("solution")
    assert mystery.kept_problems(pipe, Pipeline())
    assert mystery.kept_problems(pipe, capstone.healthy_twin(pipe)), "parts that were not broken were replaced"


def test_grading_draws_are_the_same_bug_and_healthy_draws_of_the_base():
    family, bug, _ = capstone._choice("ada")
    healthy, broken = capstone.grading_draws("ada", salt="s1")  # hidden draws: made inside a graded call
    assert {h.answer for h in broken.values()} == {bug}
    assert {h.answer for h in healthy.values()} == {mystery.HEALTHY}
    made = [h._course_realize()[0] for h in list(healthy.values()) + list(broken.values())]
    assert len({mystery.signature(p) for p in made}) == 4
    fresh = capstone.fresh_draws(capstone.draw_for("ada"), salt="s2")
    assert {h.answer for h in fresh} == {bug}


def test_answers_are_switched_off_while_graded():
    pipe = capstone.draw_for("ada")
    with switched_off(*capstone.SWITCHED_OFF, *capstone.PACKAGE_CHECKS):
        for fn in (capstone.answer_family, capstone.reference_fix, capstone.draw_for, capstone.summary_row):
            with pytest.raises(SwitchedOff):
                fn(pipe)
    assert capstone.answer_family(pipe) in capstone.FAMILY_NAMES


def test_show_finds_the_view_from_the_settings(capsys):
    import matplotlib
    matplotlib.use("Agg")
    pipe = capstone.draw_for("solution")
    capstone.show(capstone.reference_fix(pipe))  # a fixed draw is no longer known to course.exercises.mystery
    assert "resume" in capsys.readouterr().out
    with pytest.raises(ValueError):
        capstone.show(Pipeline(n_symbols=5))


def test_practice_explorer_shows_a_practice_draw_and_judges_a_guess(monkeypatch):
    shown = []
    monkeypatch.setattr(capstone, "show", lambda pipe: shown.append(pipe) or print("symptom shown"))
    box = capstone.practice_explorer("ada", attempts=3)
    assert 0 not in [v for _, v in box.attempt.options[1:]], "the graded draw (attempt 0) is never offered"
    assert not shown, "nothing runs until a draw is chosen"
    box.check.click()
    assert "first" in box.verdict.value
    box.attempt.value = 2
    key = lambda p: (mystery.reveal(p), p.lr, p.warmup, p.language_seed, p.data_seed)  # noqa: E731
    assert shown and key(shown[-1]) == key(capstone.draw_for("ada", 2)), \
        "choosing practice draw 2 shows draw_for(name, 2)"
    right = capstone.answer_family(capstone.draw_for("ada", 2))
    box.guess.value = next(f for f in capstone.FAMILY_NAMES if f != right)
    box.check.click()
    assert "not" in box.verdict.value and repr(right) in box.verdict.value, box.verdict.value
    box.guess.value = right
    box.check.click()
    assert box.verdict.value.startswith("<b>right</b>"), box.verdict.value


def test_switched_off_names_lists_every_switched_off_function_once_by_a_readable_name():
    names = capstone.switched_off_names()
    assert names == sorted(set(names)), "each once, sorted"
    assert not [n for n in names if "<locals>" in n or "<function" in n], names
    assert "course.exercises.mystery.reveal" in names and "course.toolkit.checks.update_report" in names
    assert len(names) >= len({id(f) for f in capstone.SWITCHED_OFF + capstone.PACKAGE_CHECKS}) - \
        sum(1 for f in capstone.SWITCHED_OFF + capstone.PACKAGE_CHECKS if "<locals>" in f.__qualname__)
