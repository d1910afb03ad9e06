"""course.exercises.grading: what a test cell relies on to grade work and not typing."""
import functools
import warnings

import pytest

from course.exercises import grading
from course.exercises.grading import SwitchedOff, assert_detector, assert_names, captured_warnings, fires, switched_off
from course.exercises.record import reveal


def _module_function(x):
    return x + 1


def _closure(k):
    def inner(x):
        return x * k
    return inner


class _Policy:
    def observe(self, x):
        return x > 0


def test_switched_off_reaches_saved_references_and_restores():
    saved = _module_function
    times = _closure(3)
    method = _Policy.observe
    with switched_off(_module_function, times, _Policy.observe):
        for call in (lambda: saved(1), lambda: times(2), lambda: _Policy().observe(1), lambda: method(_Policy(), 1)):
            with pytest.raises(SwitchedOff, match="switched off while your answer is graded"):
                call()
    assert (saved(1), times(2), _Policy().observe(1)) == (2, 6, True)


def test_switched_off_restores_after_an_error():
    with pytest.raises(ZeroDivisionError):
        with switched_off(_module_function):
            1 / 0
    assert _module_function(1) == 2


def test_switched_off_refuses_what_it_cannot_switch_off():
    with pytest.raises(TypeError):
        with switched_off(len):
            pass


def _reject(x):
    if x < 0:
        raise ValueError("negative")


def test_fires_counts_only_the_specified_rejections():
    assert fires(_reject, -1) is True
    assert fires(_reject, 1) is False
    with pytest.raises(AssertionError, match="crashed with TypeError"):
        fires(_reject, "a string")
    with pytest.raises(NotImplementedError):
        fires(lambda: (_ for _ in ()).throw(NotImplementedError()))
    assert fires(_reject, -1, rejects=(ValueError,)) is True
    with pytest.raises(AssertionError, match="crashed with ValueError"):
        fires(_reject, -1, rejects=(KeyError,))


def test_captured_warnings_go_to_stdout_not_stderr(capsys):
    with captured_warnings():
        warnings.warn("torch says so", UserWarning)
        warnings.warn("torch says so", UserWarning)
    out, err = capsys.readouterr()
    assert err == ""
    assert out.count("torch says so") == 1 and "not counted against you" in out
    assert grading.quiet is captured_warnings


def test_assert_detector_fails_constant_and_non_bool_answers():
    healthy, broken = {"h": 1}, {"b": -1}
    assert_detector(lambda x: x < 0, healthy, broken)
    for constant in (True, False):
        with pytest.raises(AssertionError):
            assert_detector(lambda x, c=constant: c, healthy, broken)
    with pytest.raises(AssertionError, match="must return True or False"):
        assert_detector(lambda x: "yes", healthy, broken)
    with pytest.raises(ValueError):
        assert_detector(lambda x: x < 0, {}, broken)


def test_assert_detector_switches_off_what_it_is_told():
    with pytest.raises(SwitchedOff):
        assert_detector(lambda x: _module_function(x) < 0, {"h": 1}, {"b": -5}, off=[_module_function])


def test_assert_names_fails_a_constant():
    cases = {"a": (1, "pos"), "b": (-1, "neg")}
    assert_names(lambda x: "pos" if x > 0 else "neg", cases)
    with pytest.raises(AssertionError, match="named some cases wrongly") as err:
        assert_names(lambda x: "pos", cases)
    assert "neg" not in str(err.value), "the expected answer must not reach the learner's feedback"
    with pytest.raises(AssertionError, match="expected 'neg'"):
        assert_names(lambda x: "pos", cases, show_expected=True)


def test_reveal_prints_the_prediction_beside_the_measurement(capsys):
    reveal("loss at init", None, 2.89)
    reveal("loss at init", 2.5, 2.89)
    out = capsys.readouterr().out
    assert "blank" in out and "you predicted: 2.5" in out and out.count("measured:      2.89") == 2


def _wrapped_here(x):
    return x + 2


_wrapper_here = functools.wraps(_wrapped_here)(lambda x: _wrapped_here(x))


def test_switched_off_also_stops_the_course_function_a_wrapper_wraps():
    """``torch.no_grad()`` and ``functools.wraps`` keep the wrapped function under ``__wrapped__``:
    switching off ``generate`` must stop ``generate.__wrapped__`` too (red team 14), and put both back."""
    from course.reference import parts
    inner = parts.generate.__wrapped__
    with switched_off(parts.generate):
        with pytest.raises(SwitchedOff, match="course.reference.parts.generate is switched off"):
            parts.generate.__wrapped__(None, None, 1)
    assert parts.generate.__wrapped__ is inner
    with pytest.raises(AttributeError):  # running again: None is no model
        inner(None, None, 1)


def test_switched_off_leaves_a_wrapped_function_outside_course_on():
    """Only functions of ``course`` are followed: a wrapper of another module's function stops, the
    function it wraps stays on (here, this test module's)."""
    with switched_off(_wrapper_here):
        with pytest.raises(SwitchedOff):
            _wrapper_here(1)
        assert _wrapped_here(1) == 3


def test_hidden_seed_is_the_salts_own_outside_grading_and_moves_with_the_secret(monkeypatch):
    from course.toolkit import salts
    public = grading.hidden_seed("h-test-1")
    assert public == grading.hidden_seed("h-test-1"), "outside grading a salt must give the same seed every run"
    assert public != grading.hidden_seed("h-test-2"), "two salts must give two seeds"
    assert 0 <= public < 2 ** 63, "the seed must suit torch.Generator.manual_seed and random.Random"
    monkeypatch.setattr(salts, "CURRENT", [""])  # the guard's box, as grading holds it
    salts.CURRENT[0] = "secret-a"
    keyed_a = grading.hidden_seed("h-test-1")
    salts.CURRENT[0] = "secret-b"
    keyed_b = grading.hidden_seed("h-test-1")
    assert len({public, keyed_a, keyed_b}) == 3, "a grader's secret must move the seed, and another secret elsewhere"
    salts.CURRENT[0] = ""
    assert grading.hidden_seed("h-test-1") == public, "with the secret emptied the seed is the public one again"
    for bad in ("", None, b"h-test-1"):
        with pytest.raises(ValueError, match="salt"):
            grading.hidden_seed(bad)


def test_tensor_data_round_trips_dtype_shape_and_values():
    import torch
    for t in (torch.arange(6).reshape(2, 3), torch.zeros(0, 4), torch.tensor(3),
              torch.tensor([1.5, -2.0], dtype=torch.float64), torch.ones(2, requires_grad=True)):
        back = grading.tensor_from_data(grading.tensor_data(t))
        assert (back.dtype, back.shape) == (t.dtype, t.shape) and torch.equal(back, t.detach()), \
            f"{t!r} came back as {back!r}"
    # what the test compares that torch.equal does not: an int64 batch and its float copy differ
    long, flt = (grading.tensor_from_data(grading.tensor_data(x)) for x in (torch.arange(3), torch.arange(3.0)))
    assert torch.equal(long, flt) and long.dtype != flt.dtype


def test_tensor_data_names_what_was_not_a_tensor():
    import numpy as np
    assert grading.tensor_data([1, 2]) == {"type": "list"}
    assert grading.tensor_data(np.zeros(2)) == {"type": "numpy.ndarray"}
    with pytest.raises(TypeError, match="expected a torch.Tensor, got numpy.ndarray"):
        grading.tensor_from_data(grading.tensor_data(np.zeros(2)))
