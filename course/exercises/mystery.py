"""Mystery pipelines: a healthy or broken pipeline, drawn by seed, that does not say which it is.

A mystery exercise hands the learner a pipeline with a symptom and nothing else: the learner must
test it, name the cause and fix it. So nothing *static* about a mystery pipeline may reveal the
bug. ``draw`` makes sure of that:

* **Every part is a ``Part``**, healthy or broken: one type, one repr (``<part>``), no name, no
  fields to read. The function inside is held in a private slot.
* **Settings never differ.** A bug that the catalogue expresses as a changed setting (a learning
  rate of 0, a clip of 1e-12, a tiny training set, a broken attention mask or missing positions) is
  moved into a part (the optimizer factory, the update, the batch stream, the model's preparation),
  and the setting shows the healthy value. A bug that cannot be moved raises ``NotOpaque``.
* **The configuration is drawn independently of the bug** (language, data and validation seeds,
  learning rate, warm-up), from its own random stream, so its distribution is the same for every
  bug: a function of the settings cannot beat chance. The configuration is still the draw's own,
  so a "fix" that returns a fresh reference pipeline changes it and is caught.
* **Hidden tests pass a salt** of their own (mixed with the course's key while graded:
  ``course.toolkit.salts``), so a table built from visible draws does not predict hidden ones.

Where the answer lives: in this process, in ``_SECRETS``, for grading. A graded call of learner code
never runs here: ``course.exercises.isolation.run_apart`` runs it in a forked, sealed process that has
forgotten every answer (``forget_all``), in which a part's function cannot be reached (``Part``
holds it inside a suspended generator, and the routes into one are refused). Calling a part shows
what it does: that is a test, and allowed. Outside graded calls (an ordinary cell) a learner can
read the answers of the visible draws; grading therefore always includes fresh draws made inside
the test cell, with a hidden test's salt (and the course's key, when it has one).

Grading a fix: ``touched(pipe)`` names the fields the bug lives in; ``check_fix`` applies a learner's
``fix`` and insists that every other part is the same object and every other setting an equal plain value, then hands the fixed pipeline to a
behavioural check (train it on fresh seeds, look at the symptom), all in the graded call's sealed process.
"""

from __future__ import annotations

import collections
import builtins
import dataclasses
import functools
import gc
import hashlib
import json
import marshal
import math
import random
import sys
import types
import weakref
from dataclasses import dataclass
from inspect import Parameter as _Parameter, signature as _signature
from typing import Callable, Iterable, Sequence

import torch
# bound at import, not inside a draw: an import statement there would read the module's
# ``__spec__`` on the draw's frames (red team, run 8)
from torch.utils._python_dispatch import _disable_current_modes

from ..bugs import inject
from ..reference.model import Attention, ModelConfig, TinyGPT, attention_mask
from ..reference.pipeline import PARTS, Pipeline, _windows
from ..reference.train import Run
from ..toolkit.batch import Batch
from ..toolkit.salts import mixed as _mixed
from ..toolkit.guards import SwitchedOff
from .grading import captured_warnings
from .isolation import PART_RUNS as _PART_RUNS, Sealed, _codes_in, plain_str, run_apart, set_rng_state

_tuple = tuple

HEALTHY = "healthy"
PART_FIELDS = PARTS  # every field of Pipeline declared with course.reference.pipeline.part


class NotOpaque(ValueError):
    """The bug changes a setting that ``draw`` cannot move into a part."""


_OPEN = TypeError("a mystery part cannot be opened, closed or thrown into: call it")


# What a part says when its function fails: every candidate of a field says the same. An error's
# type and message name what the function read or computed first, which tells the functions apart
# (a red team's pass scored whole mysteries from the messages of parts called with junk arguments).
_WITHHELD = ("a mystery part failed on these arguments (the error's type and message are withheld: they "
             "would say which function the part holds). Call it with what the pipeline gives it (the "
             "Pipeline field's documentation), or call the reference part "
             "(course.reference.pipeline.Pipeline().<field>) with your arguments to see what they lack")


class PartArgumentError(TypeError):
    """A part was called with arguments of types its field does not take (the same for every part
    of that field, so it says nothing about the function inside)."""


# Passed to the caller as they are (an interrupt, an unfinished exercise, a switched-off package
# function, a refused argument, the graded call's seal refusing a route); every other error of a
# part's function is withheld. A subclass of one of these is the learner's (its methods, its
# ``__del__``, would run on what it carries): the caller gets a new exception of the base type.
_STOPS = (KeyboardInterrupt, SystemExit)
_PASSED = (NotImplementedError, SwitchedOff, PartArgumentError, Sealed)
_set_traceback = BaseException.with_traceback  # BaseException's own: never a subclass's override
_context_of = BaseException.__dict__["__context__"].__get__
_cause_of = BaseException.__dict__["__cause__"].__get__

# What a part's own code calls while it runs, bound at import: a part runs on a private copy of this
# module's functions and globals, and of ``builtins`` (``_private_globals``), so rebinding a name here,
# in ``torch`` or in ``builtins`` changes nothing a part does (its traceback dropping, its stack and
# argument rules); what the held function itself calls is another matter (docs/grading-integrity.md).
_audit, _gc_isenabled, _gc_disable, _gc_enable = sys.audit, gc.isenabled, gc.disable, gc.enable
_DisableTorchFunction, _len_torch_dispatch_stack = torch._C.DisableTorchFunction, torch._C._len_torch_dispatch_stack
_Tensor, _TorchParameter, _Module, _Optimizer = torch.Tensor, torch.nn.Parameter, torch.nn.Module, torch.optim.Optimizer
_LRScheduler, _dtype, _device, _Size = torch.optim.lr_scheduler.LRScheduler, torch.dtype, torch.device, torch.Size
_OrderedDict, _GeneratorType = collections.OrderedDict, types.GeneratorType
_BATCH_FIELDS = tuple(f.name for f in dataclasses.fields(Batch))
_RUN_FIELDS = tuple(f.name for f in dataclasses.fields(Run))


def _scrub(err: BaseException) -> None:
    """Drop the traceback of ``err`` and of every exception chained to it (``__context__``,
    ``__cause__``), through ``BaseException``'s own descriptors: no method of the exception's
    class runs while a traceback through the part's frames is attached (``tb_lineno`` and
    ``tb_next`` are not audited, and line numbers say which function ran)."""
    todo, seen = [err], []
    while todo and len(seen) < 256:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        _set_traceback(e, None)
        for link in (_context_of(e), _cause_of(e)):
            if link is not None:
                todo.append(link)


def _withheld(err: BaseException) -> BaseException:
    """What the caller of a part receives for ``err``, with no traceback (``_scrub``): ``err``
    itself when its type is exactly one of ``_STOPS`` and ``_PASSED``; a new exception of that type
    when ``err``'s type is a subclass of one; else one ``RuntimeError`` with ``_WITHHELD``."""
    _scrub(err)
    kind = type(err)
    for passed in _STOPS + _PASSED:
        if kind is passed:
            return err
    for passed in _STOPS + _PASSED:
        if isinstance(err, passed):
            return passed("an exception of a subclass (the caller's own) passed through a mystery part, "
                          f"re-raised as a plain {passed.__name__}")
    return RuntimeError(_WITHHELD)


# The stack a part's function may use: a part refuses a call with less left, so no function's
# depth shows in whether a call fails (a red team called parts near the recursion limit and read
# which one ran out). Every function of every draw needs far less (tests/test_course_isolation.py).
PART_STACK = 400
_LOW_STACK = (f"a mystery part needs {PART_STACK} frames of stack to run (sys.getrecursionlimit() minus "
              "the depth of the call): call it from less deep, or raise the limit")
_getlimit, _setlimit = sys.getrecursionlimit, sys.setrecursionlimit


def _stack_left(frames: int = PART_STACK) -> bool:
    """Whether a call made here has at least ``frames`` frames before the recursion limit
    (``sys.setrecursionlimit`` refuses a limit at or below the current depth)."""
    limit = _getlimit()
    try:
        _setlimit(limit - frames)
    except (RecursionError, ValueError):
        return False
    _setlimit(limit)
    return True


def _contract(field: str):
    """What a part of ``field`` takes: per positional argument, the kinds it accepts, and the
    keyword arguments it takes, by name (any other keyword is refused). Plain data must be of its exact type (a
    ``dict``, ``list``, ``tuple``, ``int``, ``float``, ``str``, ``bool``, ``None``, a tensor or
    parameter, a ``Pipeline``, ``Batch`` or ``Run`` of the course), containers holding only plain
    data: no subclass or stand-in whose methods would record what the part reads. A module, an
    optimizer, a scheduler, a device and a callable may be anything of that kind (the learner's
    model is theirs to instrument: watching what a part does to it is a test of the part). The table
    is a literal of this function's code, which the grader puts back before each test."""
    T, N = torch.Tensor, type(None)
    module, optimizer, call = ("module",), ("optimizer",), ("callable",)
    num = (int, float)
    table = {
        "collate": ((T,), (int,)),
        "loss_fn": ((T,), (Batch,)),
        "eval_loss_fn": ((T,), (Batch,)),
        "optimizer_factory": (("params",), num, num),
        "make_optimizer": (module, (Pipeline,)),
        "prepare": (module,),
        "update": (optimizer,),
        "schedule": ((int,), (int,), (int,)),
        "val_source": ((Pipeline,),),
        "eval_mode": (module,),
        "batches": ((Pipeline,), (int,), (int,)),
        "log_step": ((Run,), (int,), (T, float)),
        "checkpoint": ((Run,),),
        "eval_due": ((int,), (int,)),
        "restore": ((Run,), (dict,)),
        "generate": ((module, (T,), (int,)),
                     {"temperature": num, "top_k": (int, N), "greedy": (bool,), "seed": (int,),
                      "eos_id": (int, N), "return_logits": (bool,)}),
        "eval_template": ((tuple, list, T),),
        "eval_continuation": ((str,), (str,)),
        "eval_fewshot": ((int,), (int,), (int,), (int,)),
        "eval_truncate": ((list, tuple), (list, tuple), (int,)),
        "eval_score": (module, (list, tuple), (list, tuple)),
        "eval_norm_length": ((str,), (list, tuple), (list, tuple)),
        "keep_loss": ((T,),),
        "monitor": (module, (Batch,), call),
        "mask": ((int,), (int,), ("device",)),
        "add_positions": (module, (T,), (int,)),
    }
    spec = table.get(field)
    if spec is None:
        return None
    if isinstance(spec[-1], dict):
        return spec[0], spec[-1]
    return spec, {}


def _kind_name(kind) -> str:
    return kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))


def _plain(value, budget: list, depth: int = 64) -> bool:
    """Whether ``value`` is plain data (exact types, no subclass) down to ``depth`` levels of
    containers (below that a container's own type is checked, not what it holds), visiting at most
    ``budget[0]`` values. Reads nothing through the value's own methods."""
    budget[0] -= 1
    if budget[0] < 0:
        return False
    t = type(value)
    if t in (type(None), bool, int, float, str, bytes, _dtype, _device, _Size):
        return True
    if t is _Tensor or t is _TorchParameter:
        return True
    if t in (list, tuple):
        return depth <= 0 or all(_plain(v, budget, depth - 1) for v in value)
    if t is dict or t is _OrderedDict:
        return depth <= 0 or all(type(k) in (str, int, tuple) and _plain(v, budget, depth - 1)
                                 for k, v in dict.items(value))
    if t is Pipeline:
        return True  # frozen: its fields are settings and parts
    if t is Batch or t is Run:
        # a run's records (history, val, phases: a dict of lists that grows every step) are checked
        # to their lists, not element by element: a part is called every step with the run
        return all(_fits(getattr(value, name), _field_kinds(name), budget, depth=1)
                   for name in (_BATCH_FIELDS if t is Batch else _RUN_FIELDS))
    return False


def _field_kinds(name: str):
    """The kinds a ``Batch``'s or ``Run``'s field may hold (``_fits``)."""
    if name in ("model",):
        return ("module",)
    if name == "optimizer":
        return ("optimizer",)
    if name == "scheduler":
        return ("scheduler",)
    return ("plain",)


def _fits(value, kinds, budget=None, depth: int = 64) -> bool:
    budget = [100_000] if budget is None else budget
    t = type(value)
    for kind in kinds:
        if kind == "module" and issubclass(t, _Module):
            return True
        if kind == "optimizer" and issubclass(t, _Optimizer):
            return True
        if kind == "scheduler" and issubclass(t, _LRScheduler):
            return True
        if kind == "callable" and callable(value):
            return True
        if kind == "device" and (t is _device or t is str or value is None):
            return True
        if kind == "params" and t in (list, tuple):
            return all(type(v) is _TorchParameter for v in value)
        if kind == "plain" and _plain(value, budget, depth):
            return True
        if isinstance(kind, type) and t is kind and _plain(value, budget, depth):
            return True
    return False


def _check_arguments(contract, args: tuple, kwargs: dict) -> tuple:
    """``args`` as the part's function receives them, or ``PartArgumentError`` unless ``args`` and
    ``kwargs`` fit ``contract`` (``_contract``): exactly the field's positional arguments, by
    position, and only the keywords the field names. Checked before the function's own signature,
    so the answer never depends on which parameters, names or defaults a function has. A generator
    of parameters (``model.parameters()``) is read into a list here, before any function runs: what
    the function then does with it does not reach the caller's generator."""
    positional, keywords = contract
    problems = []
    if len(args) != len(positional):
        problems.append(f"{len(args)} positional arguments, not {len(positional)}")
    for i, (value, kinds) in enumerate(zip(args, positional)):
        if "params" in kinds and type(value) is _GeneratorType:
            value = list(value)
            args = args[:i] + (value,) + args[i + 1:]
        if not _fits(value, kinds):
            problems.append(f"argument {i + 1}: {type(value).__name__}, not "
                            + " or ".join(_kind_name(k) for k in kinds))
    for name, value in kwargs.items():
        if type(name) is not str:  # a str subclass's __eq__ would be compared with the function's names
            problems.append("a keyword whose name is not a plain str")
            continue
        kinds = keywords.get(name)
        if kinds is None:
            problems.append(f"{name}=: not a keyword of this field (pass its arguments by position)")
        elif not _fits(value, kinds):
            problems.append(f"{name}=: {type(value).__name__}, not " + " or ".join(_kind_name(k) for k in kinds))
    if problems:
        raise PartArgumentError("a mystery part takes the exact types its Pipeline field documents (plain "
                                "data, no subclass or stand-in; a module or optimizer of any kind), its "
                                "arguments by position and only its documented keywords: "
                                + "; ".join(problems))
    return args


def _arity(fn: Callable):
    """What ``fn``'s signature takes, read once when its part is made (``inspect.Parameter`` kinds):
    the names of its positional parameters, how many of them are required, whether it takes
    ``*args`` and ``**kwargs``, the names it takes by keyword and those it requires by keyword; None
    when it has no signature to read. ``_takes`` checks a call against it with builtins only, so no
    library code that could be rebound runs with ``fn``'s signature in hand."""
    try:
        params = tuple(_signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    P = _Parameter
    positional = tuple(p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD))
    return (tuple(p.name for p in positional),
            tuple(p.default is P.empty for p in positional),
            frozenset(p.name for p in positional if p.kind is P.POSITIONAL_ONLY),
            any(p.kind is P.VAR_POSITIONAL for p in params),
            any(p.kind is P.VAR_KEYWORD for p in params),
            frozenset(p.name for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)),
            frozenset(p.name for p in params if p.kind is P.KEYWORD_ONLY and p.default is P.empty))


def _takes(arity, args: tuple, kwargs: dict) -> bool:
    """Whether a call ``fn(*args, **kwargs)`` binds its arguments, by ``_arity(fn)`` (as the call
    itself would; Python 3.11's ``Signature.bind`` refuses a positional-only name given by keyword
    into ``**kwargs``, which a call accepts). Used only for a part without a contract, so it refuses
    a keyword that is not an exact ``str`` itself (a subclass's ``__eq__`` would see the names)."""
    names, required, positional_only, var_args, var_kwargs, by_keyword, required_keywords = arity
    n = len(args)
    if n > len(names) and not var_args:
        return False
    for name in kwargs:
        if type(name) is not str:
            return False
        if name in names[:n] and name not in positional_only:
            return False  # given twice
        if name not in by_keyword and not var_kwargs:
            return False
    for i in range(n, len(names)):
        if required[i] and (names[i] in positional_only or names[i] not in kwargs):
            return False
    return all(name in kwargs for name in required_keywords)


def _run(fn: Callable, args: tuple, kwargs: dict) -> tuple:
    """``(True, fn(*args, **kwargs))``, once nothing of the caller's can run beside ``fn``: no
    dispatch mode left on the stack (``_disable_current_modes`` reads library names that can be
    rebound: checked here with torch's own counter), and, in a graded call, no thread but this one
    alive (the seal refuses ``_PART_RUNS`` otherwise). Checked last, after the arguments (a
    generator of parameters, read into a list, is the caller's code)."""
    if _len_torch_dispatch_stack():
        raise RuntimeError("a torch dispatch mode was still active inside a mystery part: a part runs "
                           "with the caller's modes suspended")
    _audit(_PART_RUNS)
    return True, fn(*args, **kwargs)


def _holder(fn: Callable, owner, contract=None):
    """A suspended generator that calls ``fn`` with what it is sent: the only reference to ``fn``
    is a local of its frame, which CPython hands out only through audited routes (``gi_frame``,
    the garbage collector), the routes a graded call's process refuses (``course.exercises.isolation``).
    In order, a call is refused with a ``RecursionError`` when less than ``PART_STACK`` frames of
    stack are left, with one ``PartArgumentError`` when its arguments do not fit ``contract``
    (``_contract``), and with one that names no function when they do not fit ``fn``. ``fn`` runs
    with torch's function and dispatch modes and tensor-subclass overrides suspended (so a mode
    entered by the caller does not trace the part's calls), and an error of ``fn``'s comes out as
    ``_withheld`` makes it. While its ``Part`` (``owner``, a weak reference) lives, ``close()`` and
    ``throw()`` are refused and the frame stays: a frame let go would drop its reference to ``fn``,
    and the change of ``fn``'s reference count would say which function it held. One way to
    finish it no code of its own can refuse (a ``RecursionError`` as CPython enters the frame); in a
    graded call the grader holds the frame (``_keeper``), so even then nothing is let go."""
    arity = _arity(fn) if contract is None else None  # with a contract, the contract alone decides
    while True:
        try:
            request = yield
            break
        except GeneratorExit:
            if owner() is None:
                return
        except BaseException:  # noqa: BLE001
            pass
    while True:
        args, kwargs = request
        del request
        try:
            low = not _stack_left()
        except BaseException:  # noqa: BLE001  (no stack left even to ask)
            low = True
        try:
            if low:
                raise RecursionError(_LOW_STACK)
            if contract is not None:
                args = _check_arguments(contract, args, kwargs)
            if arity is not None and not _takes(arity, args, kwargs):
                raise PartArgumentError("this part was called with arguments it does not take: see "
                                        "the Pipeline field's documentation for its signature")
            collecting = _gc_isenabled()
            if collecting:  # no garbage cycle of the caller's is collected while the function runs
                _gc_disable()
            try:
                with _DisableTorchFunction():
                    if _len_torch_dispatch_stack():
                        with _disable_current_modes():
                            answer = _run(fn, args, kwargs)
                    else:
                        answer = _run(fn, args, kwargs)
            finally:
                if collecting:
                    _gc_enable()
        except RecursionError as err:
            # ours (too little stack to start) is passed; one from inside the function is withheld
            answer = (False, err.with_traceback(None) if low else _withheld(err))
        except BaseException as err:  # noqa: BLE001  (handed to the caller, with no trace inside)
            answer = (False, _withheld(err))
        del args, kwargs
        while True:
            try:
                request = yield answer
                break
            except GeneratorExit:
                if owner() is None:  # the part is gone: this is the garbage collector finishing it
                    return
                answer = (False, _OPEN)  # close() by anyone else: refused (RuntimeError to the caller)
            except BaseException:  # noqa: BLE001  (throw(): refused, the frame stays)
                answer = (False, _OPEN)
        answer = None


_HOLDER_CODE = _holder.__code__
_part_generator = None  # Part's slot getter, bound below: the grader keeps a draw's generators alive


class Part:
    """A part of a mystery pipeline: calls the function it holds, and says nothing about it.

    The function is kept inside a suspended generator (``_holder``), not in an attribute; an
    exception from it comes out with no traceback of the part's insides, and arguments that do not
    fit raise one TypeError that names no function: what a part does is found by calling it. A
    part is immutable, so a copy or a deep copy is the same part. It is not re-entrant (a part
    whose function calls the same part raises ValueError); no pipeline part does."""

    __slots__ = ("__gen", "__weakref__")

    def __init__(self, fn: Callable, field: str | None = None):
        try:
            _part_generator(self)
        except AttributeError:
            pass
        else:  # a part's function is fixed: re-initialising would swap it inside a drawn pipeline
            raise TypeError("a mystery part is made once: build a new Part")
        gen = _private_globals()["_holder"](fn, weakref.ref(self), _contract(field) if field else None)
        next(gen)
        self.__gen = gen

    def __call__(self, *args, **kwargs):
        ok, value = self.__gen.send((args, kwargs))
        if ok:
            return value
        raise value

    def __repr__(self) -> str:
        return "<part>"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError("a mystery part cannot be pickled")


_part_generator = Part.__dict__["_Part__gen"].__get__


def _held(case) -> tuple:
    """What a graded call's process keeps alive for a case while learner code runs: the case, a
    pipeline's fields, and each part's generator (so nothing of a draw is freed, and no reference
    count changes, whatever learner code drops, resets or closes)."""
    if type(case) is not Pipeline:
        return (case,)
    fields = tuple(_fields_of(case).values())
    generators = tuple(_part_generator(v) for v in fields if type(v) is Part)
    keeper = _keeper(generators)
    next(keeper)
    return (case, fields, generators, keeper)


def _keeper(generators):
    """A suspended generator that holds the frame of each part's generator. A generator that
    finishes (a ``RecursionError`` as it resumes, which no code of its own can catch) clears its
    frame's variables, the part's function among them, unless something else holds the frame: then
    the frame keeps them, and no reference count changes. Only this function's code may read a
    part generator's ``gi_frame`` once the process is sealed (``course.exercises.isolation``), and
    what it reads stays in this frame, which the seal refuses to anyone."""
    frames, gen = [], None
    for gen in generators:
        frames.append(gen.gi_frame)
    del gen, generators
    while True:
        try:
            yield
        except GeneratorExit:  # collected: the graded call is over
            return
        except BaseException:  # noqa: BLE001  (never resumed by the grader, and no one else has it)
            pass


_KEEPER_CODE = _keeper.__code__


# ----- defaults for the parts a plain Pipeline leaves as None -------------------------------------
def _reference_val(pipe: Pipeline) -> torch.Tensor:
    return _windows(pipe.n_symbols, pipe.language_seed, pipe.n_val, pipe.seq_len + 1, pipe.val_seed, pipe.min_len)


def _reference_batches(pipe: Pipeline, seed: int, step: int):
    from ..reference.train import windows_at
    return pipe.collate(windows_at(pipe, seed, step), pipe.language().PAD)


# ----- settings moved into parts -------------------------------------------------------------------
@dataclass(frozen=True)
class _FactoryWith:
    """An optimizer factory that builds with its own lr / weight decay, whatever it is passed."""
    inner: Callable
    lr: float | None
    weight_decay: float | None

    def __call__(self, params, lr, weight_decay):
        return self.inner(params, lr if self.lr is None else self.lr,
                          weight_decay if self.weight_decay is None else self.weight_decay)


@dataclass(frozen=True)
class _ClipThenUpdate:
    """An update that clips every gradient the optimizer holds to ``clip`` first."""
    inner: Callable
    clip: float

    def __call__(self, optimizer):
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if params:
            torch.nn.utils.clip_grad_norm_(params, self.clip)
        return self.inner(optimizer)


@dataclass(frozen=True)
class _SubsetBatches:
    """The batch stream of a pipeline whose training set is only ``n_train`` windows."""
    inner: Callable
    n_train: int

    def __call__(self, pipe: Pipeline, seed: int, step: int):
        return self.inner(pipe.replace(n_train=self.n_train), seed, step)


def _mask_as(kind: str, T: int, S: int, device=None) -> torch.Tensor:
    return attention_mask(kind, T, S, device)


def _positions_as(use: bool, model: TinyGPT, x: torch.Tensor, start: int) -> torch.Tensor:
    if not use:
        return x
    return x + model.pos(torch.arange(start, start + x.shape[1], device=x.device))


@dataclass(frozen=True)
class _Rewire:
    """A model preparation that sets each attention's mask and the position embedding per instance
    (healthy draws get the healthy ones, so the instance attributes exist either way)."""
    inner: Callable
    attention: str
    use_positions: bool

    def __post_init__(self):
        # made with the draw, before any learner code runs: a part made while it runs would pass
        # ``self.attention`` through names learner code could have rebound (``Part``, ``functools``)
        object.__setattr__(self, "_mask", Part(functools.partial(_mask_as, self.attention), "mask"))
        object.__setattr__(self, "_positions", Part(functools.partial(_positions_as, self.use_positions),
                                                    "add_positions"))

    def __call__(self, model):
        model = self.inner(model)
        for m in model.modules():
            if isinstance(m, Attention):
                m.mask = self._mask
            if isinstance(m, TinyGPT):
                m.add_positions = _OnModel(self._positions, m)
        return model


class _OnModel:
    """A part that a model calls as its own method: ``part(model, *args)``. The model is held here,
    outside the part, so a deep copy of the model (``copy.deepcopy``) gives the copy its own
    binding while the part itself, which never holds the model, is shared."""

    __slots__ = ("part", "model")

    def __init__(self, part: "Part", model):
        self.part, self.model = part, model

    def __call__(self, *args, **kwargs):
        return self.part(self.model, *args, **kwargs)

    def __repr__(self) -> str:
        return "<part>"


_MODEL_FIELDS_MOVABLE = ("attention", "use_positions")


def _opaque(healthy: Pipeline, broken: Pipeline) -> tuple[Pipeline, tuple[str, ...]]:
    """``broken`` with every part wrapped and every changed setting moved into a part; also the
    names of the fields whose behaviour differs from ``healthy`` (where the bug lives)."""
    parts = {f: getattr(broken, f) for f in PART_FIELDS}
    parts["val_source"] = parts["val_source"] or _reference_val
    parts["eval_loss_fn"] = parts["eval_loss_fn"] or healthy.loss_fn
    parts["batches"] = parts["batches"] or _reference_batches
    touched = {f for f in PART_FIELDS if getattr(broken, f) is not getattr(healthy, f)}
    values = {}
    for f in dataclasses.fields(Pipeline):
        name = f.name
        if name in PART_FIELDS or name == "bugs":
            continue
        h, b = getattr(healthy, name), getattr(broken, name)
        values[name] = h
        if h == b:
            continue
        if name in ("lr", "weight_decay"):
            parts["optimizer_factory"] = _FactoryWith(parts["optimizer_factory"],
                                                      broken.lr if name == "lr" else None,
                                                      broken.weight_decay if name == "weight_decay" else None)
            touched.add("optimizer_factory")
        elif name == "clip" and b is not None and (h is None or b < h):
            parts["update"] = _ClipThenUpdate(parts["update"], b)
            touched.add("update")
        elif name == "n_train" and b < h:
            parts["batches"] = _SubsetBatches(parts["batches"], b)
            touched.add("batches")
        elif name == "model":
            changed = [k for k in dataclasses.asdict(h) if getattr(h, k) != getattr(b, k)]
            if not set(changed) <= set(_MODEL_FIELDS_MOVABLE):
                raise NotOpaque(f"the model setting(s) {changed} cannot be hidden in a part")
            touched.add("prepare")
        else:
            raise NotOpaque(f"the setting {name!r} ({h!r} -> {b!r}) cannot be hidden in a part")
    parts["prepare"] = _Rewire(parts["prepare"], broken.model.attention, broken.model.use_positions)
    wrapped = {f: Part(fn, f) for f, fn in parts.items()}
    return Pipeline(**values, **wrapped, bugs=()), tuple(sorted(touched))


# ----- drawing ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Secret:
    answer: str
    touched: tuple[str, ...]
    config: dict


# id(pipe) -> (a weak reference to pipe, its secret). A plain dict and weakref.ref bound here, at
# import (the grading kernel imports course before any submitted code): no method that a submission
# could patch beforehand (a WeakKeyDictionary's are) sees an answer go in.
_SECRETS: dict = {}
_ref = weakref.ref
_pop = _SECRETS.pop


def _store(pipe, secret) -> None:
    key = id(pipe)
    _SECRETS[key] = (_ref(pipe, lambda _, key=key, pop=_pop: pop(key, None)), secret)  # pop bound now: at exit the module's globals are gone


def _config(base: Pipeline, rng: random.Random) -> dict:
    """The draw's own configuration: seeds and a learning rate around the base's."""
    return {
        "language_seed": rng.randrange(1, 10_000),
        "data_seed": rng.randrange(1, 10_000),
        "val_seed": rng.randrange(10_000, 20_000),
        "lr": float(f"{base.lr * math.exp(rng.uniform(-0.35, 0.35)):.3g}"),
        "warmup": max(1, round(base.warmup * rng.uniform(0.6, 1.2))),
    }


def draw(candidates: Sequence[str], seed: int, base: Pipeline | None = None, salt: str = "") -> Pipeline:
    """An opaque pipeline: one of ``candidates`` (bug names, or ``"healthy"``) injected into ``base``
    (default: the reference) under a configuration of its own, both chosen by ``seed`` and ``salt``.

    The bug and the configuration come from independent random streams. ``reveal(pipe)`` tells the
    answer; ``touched(pipe)`` the fields the bug lives in.
    """
    if not candidates:
        raise ValueError("draw needs at least one candidate")
    base = Pipeline() if base is None else base
    salt = _mixed(salt)
    answer = random.Random(f"{salt}|{seed}|bug").choice(list(candidates))
    pipe, secret = _made(answer, seed, base, salt)
    _store(pipe, secret)
    return pipe


def make(answer: str, seed: int, base: Pipeline | None = None, salt: str = "") -> Pipeline:
    """Like ``draw``, with the answer chosen by the caller (for grading fresh draws of one bug)."""
    pipe, secret = _made(answer, seed, base, _mixed(salt))
    _store(pipe, secret)
    return pipe


def _made(answer: str, seed: int, base: Pipeline | None, salt: str) -> tuple[Pipeline, _Secret]:
    """The draw of ``make`` and its secret, stored nowhere."""
    base = Pipeline() if base is None else base
    config = _config(base, random.Random(f"{salt}|{seed}|config"))
    healthy = base.replace(**config)
    broken = healthy if answer == HEALTHY else inject(healthy, answer)
    pipe, touched_fields = _opaque(healthy, broken)
    return pipe, _Secret(answer, touched_fields, config)


@dataclass(frozen=True)
class Hidden:
    """A hidden draw not made yet: what ``make(answer, seed, base, salt)`` would draw, as plain data.

    The grading functions (``course.exercises.grading.assert_detector``, ``assert_names``,
    ``graded_calls``, ``check_fix``) take it wherever they take a drawn pipeline, and make the draw
    inside the graded call's sealed process (``course.exercises.isolation.run_apart``), after that
    process has put the package and the libraries back as first imported; ``check_fix`` makes it
    again in the kernel after the graded call, only to read the fields its bug touched. Before the fork no draw exists and
    the registry holds no entry for it: what exists is this record, whose fields (the bug
    included) are plain data in the test cell, so no code of the submission's may run in the kernel
    while the test does (the grading kernel's guard; docs/grading-integrity.md). The
    learner's function receives the drawn ``Pipeline``, never this record."""
    answer: str
    seed: int
    base: Pipeline | None = None
    salt: str = ""

    def __repr__(self) -> str:
        return "<hidden draw>"

    def _course_realize(self) -> tuple[Pipeline, _Secret]:
        if type(self) is not Hidden or (self.base is not None and type(self.base) is not Pipeline):
            raise TypeError("a hidden draw is a course.exercises.mystery.Hidden of a plain Pipeline")
        return _made(self.answer, self.seed, self.base, self.salt)


def hidden_touched(draw: Hidden) -> tuple[str, ...]:
    """The fields a hidden draw's bug touched (``touched`` of its pipeline), for a test cell to
    compare with what a graded call returned. The draw is made here, in the calling process, and
    stored nowhere: call it after the graded call, never to build its expected answers."""
    return draw._course_realize()[1].touched


def hidden(answer: str, seed: int, base: Pipeline | None = None, salt: str = "") -> Hidden:
    """A hidden draw for a test cell: ``make``'s draw, made where the learner's function is graded
    (see ``Hidden``). The salt is joined here with the grader's secret of the running test
    (``course.toolkit.salts``), so while a submission is graded the record holds the mixed salt."""
    return Hidden(answer, seed, base, _mixed(salt))


def forget_all() -> None:
    """Drop every draw's answer (``course.exercises.isolation`` calls it in a graded call's process)."""
    _SECRETS.clear()


def reveal(pipe: Pipeline) -> str:
    """The answer of a drawn pipeline: the bug's name, or ``"healthy"``. Switched off while graded."""
    return _secret(pipe).answer


def touched(pipe: Pipeline) -> tuple[str, ...]:
    """The fields of a drawn pipeline whose behaviour the bug changed (empty for a healthy draw)."""
    return _secret(pipe).touched


def _secret(pipe: Pipeline) -> _Secret:
    entry = _SECRETS.get(id(pipe))
    if entry is None or entry[0]() is not pipe:
        raise KeyError("this pipeline was not made by course.exercises.mystery.draw")
    return entry[1]


def signature(pipe: Pipeline) -> tuple:
    """What can be read off a pipeline without running it: each field's repr and type name."""
    return tuple((f.name, type(getattr(pipe, f.name)).__name__, repr(getattr(pipe, f.name)))
                 for f in dataclasses.fields(pipe))


# ----- grading a fix ------------------------------------------------------------------------------
def kept_problems(original: Pipeline, fixed: Pipeline, allowed: Iterable[str] | None = None) -> list[str]:
    """What ``fixed`` changed that the bug of ``original`` did not touch (empty if nothing).
    ``allowed``: the fields the bug touched (default: ``touched(original)``). ``fixed`` must be a
    plain ``Pipeline`` (``plain_pipeline``); every field of both is read once, in declaration order."""
    decision = fix_decision(original, fixed)
    if allowed is None:
        allowed = touched(original) if "signature" in decision else ()
    return list(_kept_verdict(decision, allowed, _settings_of(original)))


def fix_decision(original: Pipeline, fixed) -> dict:
    """What a fix decided, as JSON data that needs no answer to make: ``{"not_a_pipeline": message}``,
    or ``{"signature": ...}``, its ``fix_signature`` (each field that is not the same object as the
    original's, and what it now holds). ``_kept_verdict`` judges it against the fields the bug
    touched, with nothing else of the fix's: a part changed when it is in the signature, a setting
    when its description differs from the original's (``_settings_of``)."""
    if type(fixed) is not Pipeline:
        return {"not_a_pipeline": _not_a_pipeline(fixed)}
    return {"signature": fix_signature(original, fixed)}


def _settings_of(pipe: Pipeline) -> dict:
    """Each setting of a drawn pipeline as ``fix_signature`` describes a setting (``_plain_repr``)."""
    return {name: _plain_repr(value) for name, value in _fields_of(pipe).items() if name not in PART_FIELDS}


def _kept_verdict(decision: dict, allowed: Iterable[str], settings: dict) -> tuple:
    """``kept_problems`` of a ``fix_decision`` (plain data: no code of the fix's runs here), for a
    draw whose bug touched ``allowed`` and whose settings read ``settings`` (``_settings_of``). A
    setting set to an equal value of the same plain type reads the same, so it is kept."""
    if "not_a_pipeline" in decision:
        return (str(decision["not_a_pipeline"]),)
    allowed, moved = set(allowed), decision["signature"]
    changed = [name for name in _PIPELINE_FIELDS if name in moved and
               (name in PART_FIELDS or moved[name] != {"setting": settings[name]})]
    problems = [f"the {'part' if name in PART_FIELDS else 'setting'} {name!r} was not broken, but your fix changed it"
                for name in changed if name not in allowed and name != "bugs"]
    if allowed and not any(name in moved for name in allowed):
        problems.append("your fix left every broken part as it was")
    return _tuple(problems)


_getattribute = object.__getattribute__


def _fields_of(pipe: Pipeline) -> dict:
    """Every field of a plain ``Pipeline``, read once, in declaration order, past any class-level
    attribute hook (``object.__getattribute__``; the names were read at import)."""
    return {name: _getattribute(pipe, name) for name in _PIPELINE_FIELDS}


# The types a setting may hold, compared by identity (``kind in (...)`` would call ``==`` on a class,
# which a metaclass can answer with code of its own): the plain values, and the course's records of
# plain values that a ``Pipeline`` holds as a setting.
_PLAIN_TYPES = (bool, int, float, str, type(None))
_SETTING_RECORDS = (ModelConfig,)
_RECORD_FIELDS = {id(ModelConfig): tuple(f.name for f in dataclasses.fields(ModelConfig))}
_PIPELINE_FIELDS = tuple(f.name for f in dataclasses.fields(Pipeline))


def _one_of(kind: type, kinds: tuple) -> bool:
    """``kind`` is one of ``kinds`` (by identity: no metaclass ``__eq__`` runs)."""
    for k in kinds:
        if kind is k:
            return True
    return False


def plain_pipeline(fixed) -> Pipeline:
    """``fixed`` as a plain ``Pipeline`` rebuilt from its fields, so that the object a fix returned
    cannot watch how it is checked (which fields are read, in which order). Anything but a
    ``Pipeline`` itself (a subclass included) raises TypeError with what to return instead."""
    if type(fixed) is not Pipeline:
        raise TypeError(_not_a_pipeline(fixed))
    return Pipeline(**_fields_of(fixed))


def _not_a_pipeline(fixed) -> str:
    kind = type(fixed)
    name = plain_str(_class_name(kind, type))  # past any metaclass
    what = f"{name}, a subclass of Pipeline (return pipe.replace(...) itself)" \
        if any(k is Pipeline for k in _class_mro(kind, type)) else name
    return f"a fix must return a Pipeline (pipe.replace(part=...)), not {what}"


def check_fix(fix: Callable[[Pipeline], Pipeline], pipes: Iterable[Pipeline | Hidden],
              symptom: Callable[[Pipeline], str | None], what: str = "fix",
              off: Iterable[Callable] = ()) -> None:
    """Grade ``fix`` on ``pipes`` (fresh draws of the bug it is meant for, drawn or ``hidden``): for
    each, the fixed pipeline must keep every field the bug did not touch, and ``symptom(fixed)`` (a
    behavioural check that trains it, returning a problem or None) must find nothing.

    The whole check runs in a graded call's sealed process, where no answer exists
    (``course.exercises.isolation.run_apart``; a ``Hidden`` draw is made only there); no code of the
    fix's runs in this process. There, ``fix`` runs on every draw with ``reveal``, ``draw``,
    ``make``, ``touched`` and the functions in ``off`` (and their private helpers) switched off, and
    each decision is written down as plain data (``fix_decision``: which fields it changed, and to
    what kind of value). Only then are those functions switched on again and each fixed pipeline
    checked, on a thread of its own whose frames no code can read (``_fix_checker``): the pipeline
    must be the one decided (its ``fix_decision`` read again), the draw it was given unchanged, and
    then ``symptom`` trains a plain ``Pipeline`` rebuilt from its fields, from the graded call's random
    state. Back here, which fields changed is judged against the fields each draw's bug touched
    (``_kept_verdict``), on the decision alone; a draw whose decision passes must also pass the
    symptom.

    What the fix's code can still do (docs/grading-integrity.md): it runs beside the symptom's
    training in the graded process, where no answer exists, so it can make the symptom's verdict
    wrong only by changing the code the check runs on; a change that stays (a package or library
    function, a notebook name or default the symptom reads) fails the draw, one that puts itself back
    before the check looks, or that rewrites the grader's own records, is not seen. Either way the
    fields it changed were judged on what it chose where no answer existed, so it must have found
    the broken ones. What a new value carries (a closure's cells, defaults, attributes) is not
    compared."""
    pipes = list(pipes)
    assert pipes, "grade a fix on at least one draw"
    off = (reveal, draw, make, touched, *off)
    outcomes = run_apart(fix, pipes, fix_decision, off=off, then=(_fix_checker, symptom))
    decided = _tuple((o.get(), o.then) for o in outcomes)  # the fix's own error, raised again here
    failures, hidden_failed = (), 0
    for i, (case, (decision, found)) in enumerate(zip(pipes, decided)):
        if type(case) is Hidden:
            pipe, secret = case._course_realize()
            allowed = _tuple(secret.touched)
            del secret
        else:
            pipe, allowed = case, _tuple(touched(case))
        problems = _kept_verdict(decision, allowed, _settings_of(pipe))
        if not problems and found is not None:
            problems = (str(found),)
        if problems and type(case) is Hidden and "not_a_pipeline" not in decision:
            # which fields were not broken, or what the symptom saw, would describe a hidden draw
            # in the feedback: under one course key a later submission could answer from it
            hidden_failed += 1
        elif problems:
            failures = failures + (f"draw {i}: " + "; ".join(problems),)
    if hidden_failed:
        failures = failures + (f"{hidden_failed} of the hidden draws: your fix changed a part or setting the bug did "
                               "not touch, left the broken part as it was, or the symptom remained (hidden draws "
                               "say no more; the visible ones say what failed)",)
    assert not failures, f"your {what} did not hold up on fresh draws of the same bug: " + " | ".join(failures)


_MISSING = object()
_loads = json.loads


def _fix_checker():
    """``(checker, snap)`` for ``check_fix``'s ``run_apart(then=...)``, made in the graded call's
    process before any learner code runs there: every function the checker calls is bound now.

    ``snap(draw)``: the draw's fields, to compare after the fix ran. ``checker(job)`` runs on a
    thread of its own (this file is sealed: no code can read its frames) and appends to the job's
    list what it found, or None: that the package or a library changed for good since the fix first
    ran (``lasting``), the draw was changed in place, the pipeline is not the one decided, what
    ``symptom`` found on a plain ``Pipeline`` rebuilt from its fields, or that a notebook name or
    default the symptom reads, or the package, changed while it ran. Before the symptom it puts back
    the notebook's names and defaults that the symptom reads (``isolation._names_read``)."""
    decision_of, loads, frozen, fields_of, pipeline = fix_decision, _loads, _frozen, _fields_of, Pipeline
    signature_of = _signature_of
    set_state, warnings_captured, type_, str_, tuple_, len_ = set_rng_state, captured_warnings, type, str, _tuple, len
    dict_get, class_name, base_exception, missing, plain = dict.get, _class_name, BaseException, _MISSING, plain_str
    any_, zip_, sealed = any, zip, Sealed

    def snap(case) -> tuple:
        return tuple_(fields_of(case).values()) if type_(case) is pipeline else (case,)

    def rebound(watch) -> list:
        """The notebook's names and defaults that the symptom reads and that differ now."""
        ns, (names, defaults) = watch
        out = [name for name, value in names.items() if dict_get(ns, name, missing) is not value]
        out += [f"{fn.__qualname__}'s defaults" for fn, d, kd in defaults
                if fn.__defaults__ is not d or fn.__kwdefaults__ is not kd]
        return out

    def put_back(watch) -> None:
        ns, (names, defaults) = watch
        for name, value in names.items():
            ns[name] = value
        for fn, d, kd in defaults:
            fn.__defaults__, fn.__kwdefaults__ = d, kd

    def judge(check, case, fixed, decided, state, watch, snapped, lasting):
        changed = lasting() if lasting is not None else []
        if changed:
            return "your fix changed what its check runs on, in the graded process: " + "; ".join(changed[:6])
        if watch is not None:
            put_back(watch)
        before = snap(case)
        if any_(a is not b for a, b in zip_(before, snapped)):
            return "your fix changed the pipeline it was given, in place: return a new one (pipe.replace(...))"
        # what is trained is what is described: the returned fields, read once, into this frame
        # (which no code can open); a returned object whose class or fields changed since its
        # decision was written down fails here
        if type_(fixed) is not pipeline:
            same = frozen(decision_of(case, fixed)) == frozen(loads(decided))
            return None if same else "your fix's pipeline changed after it was returned"
        fields = fields_of(fixed)
        if frozen({"signature": signature_of(fields_of(case), fields)}) != frozen(loads(decided)):
            return "your fix's pipeline changed after it was returned"
        set_state(state)
        with warnings_captured():
            found = check(pipeline(**fields))
        changed = (lasting() if lasting is not None else []) + (rebound(watch) if watch is not None else [])
        if changed:
            return "while its pipeline was trained, your fix changed what its check runs on: " + "; ".join(changed[:6])
        if found is None or type_(found) is str_:
            return found or None
        return str(found) if found else None

    def checker(job: list) -> None:
        check, case, fixed, decided, state, out, done, watch, snapped, lasting = job.pop()
        try:
            out.append(judge(check, case, fixed, decided, state, watch, snapped, lasting))
        except base_exception as err:
            hint = " (while it is checked, a part may not read a frame: no logging call, no traceback)" \
                if type_(err) is sealed else ""
            out.append(f"checking your fixed pipeline raised {plain(class_name(type_(err), type_))}: {err}{hint}"[:2000])
        finally:
            done.release()
    return checker, snap


def _frozen(data):
    """JSON data (dicts, lists, strings, numbers) as nested tuples, dicts as their sorted items:
    what no code can change in place, compared with ``==`` on plain types only."""
    kind = type(data)
    if kind is dict:
        return _tuple(sorted((key, _frozen(value)) for key, value in data.items()))
    if kind is list:
        return _tuple(_frozen(value) for value in data)
    return data


def fix_signature(original: Pipeline, fixed) -> dict:
    """What a fix did to ``original``, as JSON data: for each field of ``fixed`` that is not the same
    object as ``original``'s, a description of its new value (a plain setting's repr, ``None``, a
    function by module, name and a digest of its code, a builtin by name and the class it is bound
    to, a class by module and name, another object by its type: ``_describe``). Equal signatures: the same fields changed to the same kinds of
    value. Nothing of the new values runs while they are described: only ``type()``, identity
    comparisons and the attributes of functions and classes that CPython stores (no ``__getattr__``,
    ``__repr__``, ``__eq__`` or metaclass of a returned object is called)."""
    if type(fixed) is not Pipeline:
        return {"not_a_pipeline": _type_name(type(fixed))}
    return _signature_of(_fields_of(original), _fields_of(fixed))


def _signature_of(old: dict, new: dict) -> dict:
    """``fix_signature`` of two pipelines' fields, as read once (``_fields_of``)."""
    out = {}
    for name, value in new.items():
        if value is old[name]:
            continue
        out[name] = _describe(value) if name in PART_FIELDS else {"setting": _plain_repr(value)}
    return out


_type_dict = type.__dict__
_class_module, _class_qualname = _type_dict["__module__"].__get__, _type_dict["__qualname__"].__get__
_class_name, _class_mro = _type_dict["__name__"].__get__, _type_dict["__mro__"].__get__


def _type_name(kind: type) -> str:
    """``kind``'s qualified name, read past any metaclass."""
    return plain_str(_class_qualname(kind, type))


def _class_id(kind: type) -> list:
    """[module, qualname] of a class, read past any metaclass (what is not exactly a str reads "?")."""
    return [plain_str(_class_module(kind, type)), plain_str(_class_qualname(kind, type))]


def _plain_repr(value):
    """A setting's description: the repr of a plain value (bool, int, float, str, None, a tuple or a
    ``ModelConfig`` of them), else the class of the object; no method of the value or of its class
    (a metaclass's hook included) runs: every type is compared by identity."""
    kind = type(value)
    if _one_of(kind, _PLAIN_TYPES):
        return repr(value)
    if kind is tuple:
        return [_plain_repr(v) for v in value]
    if _one_of(kind, _SETTING_RECORDS):
        return {name: _plain_repr(_getattribute(value, name)) for name in _RECORD_FIELDS[id(kind)]}
    return {"object": _class_id(kind)}


def _describe(value) -> dict:
    """A part's description: None, a function by module, name and a digest of its code, a builtin
    or a class by module and name, another object by its class. What CPython stores is read (no
    hook of the value runs); a name that is not exactly a ``str`` reads ``"?"``. No dictionary is
    looked up by a name here: a key planted in ``sys.modules`` or a module's dict could answer it."""
    if value is None:
        return {"none": True}
    kind = type(value)
    if kind is types.FunctionType:
        where = [plain_str(value.__module__), plain_str(value.__qualname__)]
        return {"function": where, "code": _sha256(_marshal_dumps(value.__code__)).hexdigest()}
    if kind is types.BuiltinFunctionType:  # its __qualname__ would read its object's class's, hooks and all
        return {"builtin": [plain_str(value.__module__), plain_str(value.__name__)],
                "of": _class_id(type(value.__self__))}
    if kind is type:
        return {"class": _class_id(value)}
    return {"object": _class_id(kind)}


_sha256, _marshal_dumps = hashlib.sha256, marshal.dumps


# ----- a part's private globals ---------------------------------------------------------------------
def _names_used(functions: tuple) -> frozenset:
    """Every global or builtin name the code of ``functions`` (of this module) reads, nested code
    included: what ``_private_globals`` copies (attribute names come along, harmlessly)."""
    return frozenset(n for name in functions for code in _codes_in(globals()[name].__code__) for n in code.co_names)


def _functions_called(name: str, seen: tuple = ()) -> tuple:
    """``name`` and every function of this module its code names, in turn (nested code included):
    the functions a part's generator can call, which ``_private_globals`` copies."""
    seen += (name,)
    for used in _names_used((name,)):
        value = globals().get(used)
        if used not in seen and type(value) is types.FunctionType and value.__globals__ is globals():
            seen = _functions_called(used, seen)
    return seen


_HOLDER_PATH = _functions_called("_holder")
_HOLDER_NAMES = _names_used(_HOLDER_PATH) | frozenset(_HOLDER_PATH)


def _private_globals(template=tuple((name, value) for name, value in globals().items() if name in _HOLDER_NAMES),
                     builtin_template=tuple((name, value) for name, value in vars(builtins).items()
                                            if name in _HOLDER_NAMES),
                     path=_HOLDER_PATH) -> dict:
    """A private copy of the globals a part's own code reads, made for each part as it is made: the
    functions it calls (``path``) are copies that read the copy. What it holds was taken at this
    module's import (``template``, ``builtin_template``: tuples, in this function's defaults, which
    the grader puts back before each test), before any learner code ran: rebinding a name of this
    module (a function or data: ``_PASSED``), of ``torch`` or of ``builtins`` changes nothing of
    what a part does itself (its argument, stack and thread rules, its dropping of tracebacks). A
    part's generator runs ``_holder`` from the copy, and its frame, the copy's one holder, is
    refused to anyone by the seal."""
    private = dict(template)
    private["__builtins__"] = dict(builtin_template)
    for name in path:
        value = private[name]
        copy = types.FunctionType(value.__code__, private, value.__name__, value.__defaults__, value.__closure__)
        copy.__kwdefaults__ = value.__kwdefaults__
        private[name] = copy
    return private


# the code objects ``_private_globals`` copies into each part: the grading kernel's guard and the seal
# let anyone copy these, and no other code of the package, whoever the caller (none is switched off)
_HOLDER_CODES = tuple(globals()[name].__code__ for name in _HOLDER_PATH)
