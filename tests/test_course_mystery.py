"""course.exercises.mystery: drawn pipelines are opaque, behave exactly like the bug they hide, and fixes are
graded by what they change and by behaviour."""
import copy

import pytest
import torch

from course.exercises import mystery
from course.bugs import catalogue, inject
from course.exercises.grading import SwitchedOff
from course.reference.pipeline import adamw, apply_update, prepare_model
from course.reference.train import train
from small_pipeline import SMALL


def _opaque_bugs():
    names = []
    for b in catalogue():
        try:
            mystery.make(b.name, 0, SMALL)
            names.append(b.name)
        except mystery.NotOpaque:
            pass
    return names


OPAQUE = _opaque_bugs()


def test_most_of_the_catalogue_can_be_drawn():
    assert len(OPAQUE) >= 30, f"only {len(OPAQUE)} bugs can be hidden: {OPAQUE}"
    assert {"lr-zero", "clip-to-zero", "train-set-too-small", "no-positions", "missing-step"} <= set(OPAQUE)


def test_every_candidate_reads_the_same_for_one_seed():
    """Nothing static tells a broken draw from a healthy one: same field types, reprs, settings."""
    healthy = mystery.signature(mystery.make("healthy", 3, SMALL))
    differ = [n for n in OPAQUE if mystery.signature(mystery.make(n, 3, SMALL)) != healthy]
    assert not differ, f"these bugs show in a pipeline's fields, types or reprs: {differ}"
    plain = inject(SMALL, "lr-zero")
    assert mystery.signature(plain) != mystery.signature(SMALL), "control: an un-hidden bug does show"


def test_a_settings_reader_does_no_better_than_chance():
    """The configuration comes from a stream of its own: the same seed gives the same settings
    whatever the bug, so reading them cannot separate candidates."""
    for seed in range(5):
        settings = {n: mystery.signature(mystery.make(n, seed, SMALL)) for n in ("healthy", "lr-zero", "missing-step")}
        assert len(set(settings.values())) == 1
    seeds = {mystery.signature(mystery.make("healthy", s, SMALL)) for s in range(5)}
    assert len(seeds) == 5, "each seed should draw its own configuration"


@pytest.mark.parametrize("name", ["lr-zero", "clip-to-zero", "train-set-too-small", "no-positions",
                                  "attend-self-only", "missing-step", "embedding-not-in-optimizer"])
def test_a_hidden_bug_trains_exactly_like_the_plain_one(name):
    hidden = mystery.make(name, 1, SMALL)
    config = mystery._secret(hidden).config
    plain = inject(SMALL.replace(**config), name)
    a = train(hidden, steps=12, seed=2, eval_every=0).history["loss"]
    b = train(plain, steps=12, seed=2, eval_every=0).history["loss"]
    assert a == b, f"{name}: the hidden bug changed the run"
    healthy = train(SMALL.replace(**config), steps=12, seed=2, eval_every=0).history["loss"]
    assert a != healthy, f"{name}: control, the bug must change something in 12 steps"


def test_settings_that_cannot_be_hidden_are_refused():
    with pytest.raises(mystery.NotOpaque):
        mystery.make("attention-scale-inf", 0, SMALL)


def test_reveal_and_touched_name_the_answer_and_its_part():
    assert mystery.reveal(mystery.make("healthy", 0, SMALL)) == "healthy"
    assert mystery.touched(mystery.make("healthy", 0, SMALL)) == ()
    p = mystery.make("lr-zero", 0, SMALL)
    assert (mystery.reveal(p), mystery.touched(p)) == ("lr-zero", ("optimizer_factory",))
    assert mystery.touched(mystery.make("no-positions", 0, SMALL)) == ("prepare",)
    with pytest.raises(KeyError):
        mystery.reveal(SMALL)


def test_a_salt_changes_the_draws():
    candidates = ["healthy", "lr-zero", "missing-step", "clip-to-zero"]
    plain = [mystery.reveal(mystery.draw(candidates, s, SMALL)) for s in range(12)]
    salted = [mystery.reveal(mystery.draw(candidates, s, SMALL, salt="hidden")) for s in range(12)]
    assert plain != salted
    assert set(plain) == set(candidates), "twelve draws should cover four candidates"
    again = [mystery.reveal(mystery.draw(candidates, s, SMALL)) for s in range(12)]
    assert plain == again, "a draw is a pure function of (candidates, seed, salt)"


def test_parts_say_nothing():
    p = mystery.make("missing-step", 0, SMALL)
    assert repr(p.update) == "<part>" and type(p.update) is type(p.collate) is mystery.Part
    assert not hasattr(p.update, "__dict__") and not hasattr(p.update, "__name__")
    assert "missing" not in repr(p) and p.bugs == ()


def test_models_of_a_rewired_pipeline_copy():
    model = mystery.make("attend-self-only", 0, SMALL).build_model(0)
    twin = copy.deepcopy(model)
    ids = torch.randint(0, 16, (2, 8))
    assert torch.equal(model(ids), twin(ids))


def test_kept_problems():
    p = mystery.make("lr-zero", 0, SMALL)
    assert mystery.kept_problems(p, p.replace(optimizer_factory=adamw)) == []
    assert any("left every broken part" in m for m in mystery.kept_problems(p, p))
    assert any("'update'" in m for m in mystery.kept_problems(p, p.replace(optimizer_factory=adamw, update=apply_update)))
    fresh = mystery.kept_problems(p, SMALL)
    assert any("setting" in m for m in fresh), "a fresh reference pipeline changes the draw's settings"
    assert mystery.kept_problems(p, None) and "Pipeline" in mystery.kept_problems(p, None)[0]
    healthy = mystery.make("healthy", 0, SMALL)
    assert mystery.kept_problems(healthy, healthy) == [], "a healthy draw is fixed by leaving it alone"
    assert mystery.kept_problems(healthy, healthy.replace(update=apply_update)), "and by nothing else"


def _falls(fixed):
    losses = train(fixed, steps=20, seed=5, eval_every=0).history["loss"]
    return None if losses[-1] < losses[0] - 0.2 else f"loss did not fall ({losses[0]:.3f} -> {losses[-1]:.3f})"


def test_check_fix_passes_a_real_fix_and_fails_a_fake_one():
    pipes = [mystery.make("requires-grad-off", s, SMALL, salt="t") for s in range(2)]
    mystery.check_fix(lambda p: p.replace(prepare=prepare_model), pipes, _falls)
    with pytest.raises(AssertionError, match="left every broken part"):
        mystery.check_fix(lambda p: p, pipes, _falls)
    with pytest.raises(AssertionError, match="setting"):
        mystery.check_fix(lambda p: SMALL, pipes, _falls)


def test_check_fix_switches_off_the_answer():
    pipes = [mystery.make("missing-step", 0, SMALL)]
    with pytest.raises(SwitchedOff):
        mystery.check_fix(lambda p: p.replace(update=apply_update) if mystery.reveal(p) else p, pipes, _falls)
    assert mystery.reveal(pipes[0]) == "missing-step", "restored after grading"


class _Rewrites(type):
    """A metaclass whose hook, run on any read of the class's attributes, records it and puts the
    reference part into each field the bug touched wherever the grader holds the fixed pipeline's
    fields: if it ran while a fix is judged, what is trained would not be what was judged."""
    calls: list = []

    def __eq__(cls, other):  # ``kind in (...)`` would call it
        type(cls).calls.append("__eq__")
        return type.__eq__(cls, other)

    __hash__ = type.__hash__

    def __getattribute__(cls, name):
        import sys
        frame = sys._getframe(0)
        while frame is not None and not {"fields", "pipe"} <= set(frame.f_locals):
            frame = frame.f_back
        if frame is not None and isinstance(frame.f_locals["fields"], dict):
            frame.f_locals["fields"]["prepare"] = prepare_model
        type(cls).calls.append(name)
        return type.__getattribute__(cls, name)


def test_a_returned_objects_class_runs_nothing_while_its_fix_is_judged():
    """Between the kernel's re-run of a fix and the comparison with the choice made apart, what the
    fix returned is described by type identity and what CPython stores: a metaclass hook of a part
    it returned, or of the object a builtin method it returned is bound to (whose ``__qualname__``
    reads that class's), never runs there, so it cannot put the reference part into what is then
    trained. Settings are described the same way. Control: the hook runs on an ordinary read."""
    class Setting(metaclass=_Rewrites):
        pass

    _Rewrites.calls.clear()
    hasattr(Setting, "__dataclass_fields__")
    Setting().__sizeof__.__qualname__
    assert _Rewrites.calls == ["__dataclass_fields__", "__qualname__"], "control: the hook runs on ordinary reads"
    pipes = [mystery.make("requires-grad-off", 0, SMALL, salt="t")]
    for returned in (Setting(), Setting().__sizeof__):  # the right field: judged, re-run, compared
        _Rewrites.calls.clear()
        with pytest.raises(AssertionError, match="reached the symptom"):
            mystery.check_fix(lambda p: p.replace(prepare=returned), pipes, lambda fixed: "reached the symptom")
        assert _Rewrites.calls == [], f"a hook of the returned object's class ran while judged: {_Rewrites.calls}"
    assert mystery._plain_repr(Setting())["object"][1].endswith("Setting") and not _Rewrites.calls


class _Relay:
    """Garbage in a reference cycle whose finalizer, each time the collector runs it, leaves another
    such cycle behind, until it finds the fixed pipeline's fields being described: then it puts the
    reference part into ``prepare``, after the description was taken, in what is then trained."""

    def __init__(self, wrote):
        self.cycle, self.wrote = self, wrote

    def __del__(self):
        import sys
        frame = sys._getframe(0)
        while frame is not None and frame.f_code.co_name != "_signature_of":
            frame = frame.f_back
        if frame is None:
            _Relay(self.wrote)
            return
        frame.f_locals["new"]["prepare"] = prepare_model
        self.wrote.append("prepare")


def test_the_fixs_garbage_is_not_collected_while_its_fix_is_judged():
    """The garbage collector is held from the end of the fix's re-run until its fields have been
    described and compared: a finalizer of the fix's garbage collected then could put the reference
    part into the fields that the symptom trains, so a fix that found the broken part but put a
    broken one back would pass. Control: outside the hold, the same relay reaches the description."""
    import functools
    import gc

    wrote, threshold = [], gc.get_threshold()
    pipes = [mystery.make("requires-grad-off", 0, SMALL, salt="t")]

    def keeps_it_broken(p):
        gc.set_threshold(1)
        _Relay(wrote)
        return p.replace(prepare=functools.partial(p.prepare))  # the right field, still broken

    try:
        with pytest.raises(AssertionError, match="loss did not fall"):
            mystery.check_fix(keeps_it_broken, pipes, _falls)
        assert wrote == [], f"a finalizer ran while the fix's fields were described: {wrote}"
        gc.set_threshold(1)
        _Relay(wrote)
        mystery.fix_signature(pipes[0], keeps_it_broken(pipes[0]))
    finally:
        gc.set_threshold(*threshold)
        gc.collect()
    assert wrote and all(w == "prepare" for w in wrote), \
        "control: outside the hold, the relay rewrites the fields being described"


def test_what_a_fix_changed_is_judged_on_its_choice_apart():
    """Which fields a fix changed is judged on the decision made in the graded call's process,
    before the fix runs in the kernel: a re-run that rebinds the module's own judge for one call (a
    stand-in that puts the real one back) changes nothing, and a fix that replaces every part fails.
    Control: the same stand-in installed before check_fix runs does reach a direct call."""
    from course.reference.pipeline import healthy_twin

    pipes = [mystery.make("requires-grad-off", 0, SMALL, salt="t")]

    def rubber_stamp(p):
        real = mystery._kept_verdict

        def once(*args):
            mystery._kept_verdict = real
            return ()
        mystery._kept_verdict = once
        return healthy_twin(p)

    with pytest.raises(AssertionError, match="was not broken, but your fix changed it"):
        mystery.check_fix(rubber_stamp, pipes, _falls)
    assert mystery._kept_verdict.__name__ == "_kept_verdict"
    rubber_stamp(pipes[0])
    assert mystery.kept_problems(pipes[0], healthy_twin(pipes[0])) == [], "control: the stand-in answers once"
    assert mystery.kept_problems(pipes[0], healthy_twin(pipes[0])), "and puts the real judge back"


def test_a_fix_that_leaves_its_own_thread_running_fails():
    """A thread that runs the fix's code after it returned could rewrite what is judged: it fails
    the draw, whether it runs the learner's function now, a timer will call it (directly or through
    a map), or it waits in an executor with the function queued. Control: a thread of library code
    only (a sleep) is no such thread, and the fix passes."""
    import concurrent.futures
    import threading
    import time

    pipes = [mystery.make("requires-grad-off", 0, SMALL, salt="t")]
    right = lambda p: p.replace(prepare=prepare_model)  # noqa: E731

    started = []

    def waits():
        time.sleep(1)

    def spawning(make_thread):
        def fix(p):
            started.append(make_thread())
            started[-1].daemon = True
            started[-1].start()
            return right(p)
        return fix

    for make_thread in (lambda: threading.Thread(target=waits), lambda: threading.Timer(1, waits),
                        lambda: threading.Timer(1, list, args=(map(lambda _: waits(), [0]),))):
        with pytest.raises(AssertionError, match="left code of its own running beside the test"):
            mystery.check_fix(spawning(make_thread), pipes, _falls)
    for thread in started:
        thread.join()  # a thread of the test's own still running would fail the check below

    def queued(p):
        pool = concurrent.futures.ThreadPoolExecutor(1)
        pool.submit(time.sleep, 1)
        pool.submit(waits)
        pool.shutdown(wait=False)
        started.append(pool)
        return right(p)

    with pytest.raises(AssertionError, match="left code of its own running beside the test"):
        mystery.check_fix(queued, pipes, _falls)
    started.pop().shutdown(wait=True)
    mystery.check_fix(spawning(lambda: threading.Thread(target=time.sleep, args=(1,))), pipes, _falls)


def test_every_part_takes_its_whole_field_contract():
    """A part checks a call against its field's contract before the function's own signature; so
    every function of every draw must take every call the contract allows (all positional
    arguments and every documented keyword), or whether such a call works would name the function.
    Control: a function that lacks one of generate's keywords is found."""
    import inspect

    def takes(fn, field) -> bool:
        positional, keywords = mystery._contract(field)
        try:
            inspect.signature(fn).bind(*range(len(positional)), **dict.fromkeys(keywords))
        except TypeError:
            return False
        return True

    assert not takes(lambda model, prompt, n, temperature=1.0: None, "generate"), "control"
    refused = set()
    for name in OPAQUE + ["healthy"]:
        pipe = mystery.make(name, 0, SMALL)
        for field in mystery.PART_FIELDS:
            part = getattr(pipe, field)
            if type(part) is mystery.Part and mystery._contract(field) is not None:
                fn = inspect.getgeneratorlocals(mystery._part_generator(part))["fn"]
                if not takes(fn, field):
                    refused.add((name, field))
    assert not refused, f"functions that refuse a call their field's contract allows: {sorted(refused)}"
