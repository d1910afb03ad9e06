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


def test_a_returned_objects_class_runs_nothing_while_its_fix_is_described():
    """``fix_signature`` describes what a fix returned by type identity and what CPython stores: a
    metaclass hook of a part it returned, or of the object a builtin method it returned is bound to
    (whose ``__qualname__`` reads that class's), never runs there, so it cannot make the decision
    say other than what the fix returned. Settings are described the same way. Control: the hook
    runs on an ordinary read. (In ``check_fix`` the description is made in the graded call's
    process; there the hook would also find no answer.)"""
    class Setting(metaclass=_Rewrites):
        pass

    _Rewrites.calls.clear()
    hasattr(Setting, "__dataclass_fields__")
    Setting().__sizeof__.__qualname__
    assert _Rewrites.calls == ["__dataclass_fields__", "__qualname__"], "control: the hook runs on ordinary reads"
    pipe = mystery.make("requires-grad-off", 0, SMALL, salt="t")
    for returned in (Setting(), Setting().__sizeof__):
        _Rewrites.calls.clear()
        described = mystery.fix_signature(pipe, pipe.replace(prepare=returned))
        assert _Rewrites.calls == [], f"a hook of the returned object's class ran while described: {_Rewrites.calls}"
        assert list(described) == ["prepare"]
    assert mystery._plain_repr(Setting())["object"][1].endswith("Setting") and not _Rewrites.calls


class _Relay:
    """Garbage in a reference cycle whose finalizer, each time the collector runs it, leaves another
    such cycle behind, until it finds the fixed pipeline's fields being described: then it puts the
    reference part into ``prepare``, after the description was taken, in what is then trained."""

    def __init__(self, wrote):
        self.cycle, self.wrote = self, wrote

    def __del__(self):
        import sys
        try:
            frame = sys._getframe(1)  # where the collector ran it
        except Exception:  # noqa: BLE001  (refused in the checker's sealed thread)
            return
        while frame is not None and frame.f_code.co_name != "_signature_of":
            frame = frame.f_back
        if frame is None:
            _Relay(self.wrote)
            return
        frame.f_locals["new"]["prepare"] = prepare_model
        self.wrote.append("prepare")


def test_the_fixs_garbage_cannot_reach_what_is_trained():
    """A finalizer of the fix's garbage that runs while its pipeline is described or trained could
    put the reference part into the fields the symptom trains, so a fix that found the broken part
    but put a broken one back would pass. In the graded call's process the checker's frames are
    sealed, so the relay finds nothing and the still-broken fix fails. Control: in this process,
    the same relay reaches the description."""
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
        gc.set_threshold(1)
        _Relay(wrote)
        mystery.fix_signature(pipes[0], keeps_it_broken(pipes[0]))
    finally:
        gc.set_threshold(*threshold)
        gc.collect()
    assert wrote and all(w == "prepare" for w in wrote), \
        "control: in this process, the relay rewrites the fields being described"


def test_what_a_fix_changed_is_judged_on_its_choice_apart():
    """Which fields a fix changed is judged in the kernel, on the decision written down in the
    graded call's process: a fix that rebinds the module's own judge for one call (a stand-in that
    puts the real one back) changes nothing, and a fix that replaces every part fails. Control: the
    same stand-in installed in this process does reach a direct call."""
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
    """A thread that runs the fix's code after it returned could change what is trained: when one
    started by the fix (a thread, a timer, an executor's worker) is still running 2 s after the
    calls returned, the graded call fails. Control: a thread that has ended by then (a short
    sleep) is no such thread, and the fix passes."""
    import concurrent.futures
    import threading
    import time

    pipes = [mystery.make("requires-grad-off", 0, SMALL, salt="t")]
    right = lambda p: p.replace(prepare=prepare_model)  # noqa: E731

    def spawning(make_thread):
        def fix(p):
            thread = make_thread()
            thread.daemon = True
            thread.start()
            return right(p)
        return fix

    def queued(p):
        pool = concurrent.futures.ThreadPoolExecutor(1)
        pool.submit(time.sleep, 5)
        pool.shutdown(wait=False)
        return right(p)

    for fix in (spawning(lambda: threading.Thread(target=time.sleep, args=(5,))),
                spawning(lambda: threading.Timer(3, time.sleep, args=(1,))), queued):
        with pytest.raises(AssertionError, match="still running 2 s after the calls returned"):
            mystery.check_fix(fix, pipes, _falls)
    mystery.check_fix(spawning(lambda: threading.Thread(target=time.sleep, args=(0.2,))), pipes, _falls)


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


def test_a_fix_that_patches_what_its_check_runs_on_fails():
    """The symptom trains the fix's pipeline in the graded call's process, beside the fix's code. A
    fix that names the broken field but leaves it broken, and replaces a package function the
    symptom calls (``train_steps``) with one that reports a falling loss, fails: the package changed
    since the fix first ran. So does a working fix whose part, while trained, replaces one. Control:
    in this process, the same patch makes the symptom pass the broken pipeline."""
    import functools

    from course.reference import train as train_module
    from course.reference.diagnose import training_moves

    pipes = [mystery.make("requires-grad-off", 0, SMALL, salt="t")]
    real_steps, real_train = train_module.train_steps, train_module.train

    def fake_steps(run, steps, **kwargs):
        run.history["loss"].extend(3.0 - 0.1 * i for i in range(steps))
        for p in run.model.parameters():
            p.data.add_(1.0)  # every tensor moves
        return run

    def patches(p):
        train_module.train_steps = fake_steps
        return p.replace(prepare=functools.partial(p.prepare))  # the right field, still broken

    def patching_prepare(model):
        train_module.train = fake_steps
        return prepare_model(model)

    with pytest.raises(AssertionError, match="your fix changed what its check runs on, in the graded process: "
                                             "course.reference.train.train_steps"):
        mystery.check_fix(patches, pipes, training_moves)
    with pytest.raises(AssertionError, match="while its pipeline was trained, your fix changed what its check runs on"):
        mystery.check_fix(lambda p: p.replace(prepare=patching_prepare), pipes, training_moves)
    mystery.check_fix(lambda p: p.replace(prepare=prepare_model), pipes, training_moves)  # the same, without patches
    assert train_module.train_steps is real_steps and train_module.train is real_train
    try:
        assert training_moves(patches(pipes[0])) is None, "control: here the patch passes a broken pipeline"
    finally:
        train_module.train_steps = real_steps


def test_the_check_puts_back_the_notebook_names_it_reads():
    """Before the symptom trains, the checker puts back the notebook's names and defaults that the
    symptom reads (as they were before the fix first ran), and a draw fails when one of them changed
    while it trained. Here on a namespace of its own, as ``run_apart`` hands the checker a kernel's."""
    from course.exercises import isolation

    ns: dict = {}
    exec("def symptom(p, strict=True):\n    p.prepare(None)\n    return helper(p) if strict else None\n\n"
         "def helper(p):\n    return 'the symptom is still there'\n", ns)
    watch = (ns, isolation._names_read(ns["symptom"], ns))
    assert set(watch[1][0]) == {"helper"} and [d[0] for d in watch[1][1]] == [ns["symptom"], ns["helper"]]
    checker, snap = mystery._fix_checker()
    pipe = mystery.make("healthy", 0, SMALL)

    def verdict(prepare):
        fixed = pipe.replace(prepare=prepare)
        out, done = [], isolation._allocate_lock()
        done.acquire()
        checker([(ns["symptom"], pipe, fixed, isolation._json_writer()(mystery.fix_decision(pipe, fixed)),
                  isolation.rng_state(), out, done, watch, snap(pipe), None)])
        return out[0]

    helper = ns["helper"]
    ns["helper"] = lambda p: None  # rebound before the check, as a fix's code could
    ns["symptom"].__defaults__ = (False,)
    assert verdict(lambda model: None) == "the symptom is still there", "the name and the default are put back"
    assert ns["helper"] is helper and ns["symptom"].__defaults__ == (True,)

    def rebinds(model):
        ns["helper"] = lambda p: None
    assert verdict(rebinds).startswith("while its pipeline was trained, your fix changed what its check runs on: helper")


def test_the_reply_does_not_depend_on_names_the_calls_can_rebind():
    """Once the calls have begun, the graded call's main thread calls only what it bound before: a
    call that rebinds this module's writer, JSON encoder and exit, ``json.dumps``, ``os.write``,
    ``threading.Thread.join`` and ``len`` changes nothing of the reply. (Were the reply written
    through any of them, the child could not answer.)"""
    import builtins
    import json
    import os
    import threading

    from course.exercises import isolation

    def broken(*args, **kwargs):
        raise RuntimeError("rebound by the graded call")

    def rebinds(case):
        for owner, name in ((isolation, "_write"), (isolation, "_dumps"), (isolation, "_exit_now"),
                            (isolation, "_json_writer"), (isolation, "_encode_json_str"),
                            (json, "dumps"), (os, "write"), (threading.Thread, "join"), (builtins, "len")):
            setattr(owner, name, broken)
        return case * 2
    got = isolation.run_apart(rebinds, [1, 2, 3], lambda case, value: [case, value])
    assert [o.get() for o in got] == [[1, 2], [2, 4], [3, 6]]


def test_the_symptom_may_call_what_the_fix_may_not():
    """The functions a test switches off stay off for every call of the fix, and answer the symptom,
    which runs once every decision is written down. Control: the fix that calls the switched-off
    check is refused."""
    from course.reference.diagnose import training_moves

    pipes = [mystery.make("requires-grad-off", 0, SMALL, salt="t")]
    right = lambda p: p.replace(prepare=prepare_model)  # noqa: E731
    mystery.check_fix(right, pipes, training_moves, off=(training_moves,))

    def asks_the_check(p):
        training_moves(p)
        return right(p)
    with pytest.raises(SwitchedOff, match="training_moves is switched off"):
        mystery.check_fix(asks_the_check, pipes, training_moves, off=(training_moves,))


def test_a_fix_that_rebinds_a_builtin_its_check_uses_fails():
    """``builtins`` is compared too (a red team's 07 restore answered 0 from ``abs`` to every
    tolerance of the check, 2026-12-07): a fix that rebinds one fails before the symptom trains.
    Control: in this process, the same rebinding passes the symptom."""
    import builtins

    pipes = [mystery.make("requires-grad-off", 0, SMALL, salt="t")]
    symptom = lambda fixed: None if abs(-1) == 0 else "abs still answers honestly"  # noqa: E731
    real = builtins.abs

    def rebinds(p):
        builtins.abs = lambda x: 0
        return p.replace(prepare=prepare_model)
    with pytest.raises(AssertionError, match=r"builtins\.abs \(replaced\)"):
        mystery.check_fix(rebinds, pipes, symptom)
    assert builtins.abs is real
    try:
        rebinds(pipes[0])
        assert symptom(None) is None, "control: here the rebound abs passes the symptom"
    finally:
        builtins.abs = real
