"""Whether code of the submission's that runs without being called can read a test's secret.

The secret of a test (``autograder.draw_key.cell_secret``) is mixed into its hidden draws. It is the
course's for that test, the same in every submission, so one that leaks into a submission's
feedback lets a later submission answer that test's hidden draws from a table (issue 31).

The grader used to send it in the text of the guard's control cell before the test, and code of the
submission's read that text while the kernel handled the cell, before the guard ran (found on
2026-12-06; in a keyed grading of 04 a collector callback kept the secrets of five tests):

- an **input transformer** (``input_transformers_cleanup``): IPython hands it every cell's text;
- a **collector callback** (``gc.callbacks``, with ``gc.set_threshold(1)``), at every collection
  while the cell is parsed (the guard suspends it only once its pre stage runs). The guard also put
  it back while it tried the submission's transformers on the test's text, at the test's start;
- a **finalizer** of an object bound to a name the test assigns, which the pre stage drops.

The secret now travels in the test cell's request (its metadata), which the guard takes out once
it has put everything back, and it tries the transformers only after the test. That left code that
runs while the test cell itself is handled: objects the kernel lets go of then, by reference count,
found the secret in the test's request (before the guard took it) or in the box:

- a **finalizer** of an object hung on the kernel's own request (``get_parent()``), which ipykernel
  releases as the next request but one arrives, i.e. as the test cell starts;
- a **weakref callback** (``weakref.finalize``) of an object hung there.

For a test with a secret, the guard now holds every object alive at the end of its pre stage until
its post stage, after the secret is gone, so both run there. Each plant records, under its own name, every control cell's
text it sees on a frame, the running request's code and metadata, and ``course.toolkit.salts``.

The controls run the same plants with no secret (so nothing is held) and check that each still
runs where it would see one (a search that ran nowhere proves nothing), and that the test itself
got its secret. Without the
hold, the last two routes keep the secret; with the secret back in the control cell's text, the
first three do.
"""
import json
import os
import subprocess
import sys

import pytest

from autograder import grading
from guard_kernel_driver import PREAMBLE

DRIVER = PREAMBLE + r'''
secret = sys.argv[1]
# the submission's cell: every plant records, under its own name, what it can see when it runs
PLANT = """
import gc, json, sys
kept = []
def search(route, _getframe=sys._getframe, kept=kept, str_=str, modules=sys.modules):
    f = _getframe(0)
    while f is not None:
        for v in list(f.f_locals.values()):
            if type(v) is str_ and v.startswith("#course-guard") and [route, v] not in kept:
                kept.append([route, v])
        f = f.f_back
    request = get_ipython().kernel.get_parent()
    salts = modules.get("course.toolkit.salts")
    seen = ("during " + request.get("content", {}).get("code", "")[:20] + " | metadata "
            + json.dumps(request.get("metadata", {}), default=str) + " | box " + (salts.CURRENT[0] if salts else ""))
    if [route, seen] not in kept:
        kept.append([route, seen])

class Thief:
    def __init__(self, route):
        self.route = route
    def __del__(self, search=search):
        search(self.route)

class Plain:
    pass

import weakref
_watched = Plain()
weakref.finalize(_watched, search, "weakref")

def transformer(lines, search=search, kept=kept):
    text = "".join(lines)
    if ["transformer", "text " + text] not in kept:
        kept.append(["transformer", "text " + text])
    search("transformer")
    return lines

_data = Thief("finalizer")
get_ipython().kernel.get_parent()["thief"] = Thief("request")
get_ipython().kernel.get_parent()["watched"] = _watched
del _watched
get_ipython().input_transformers_cleanup.append(transformer)
gc.callbacks.append(lambda phase, info, search=search: search("collector"))
gc.set_threshold(1)
"""
MARK = kernel_guard.MARK
want = hashlib.sha256(secret.encode()).hexdigest()
# the test: checks it got its secret, then looks for it as a learner's function would, in a graded
# call's process and (the control) in the kernel: the box, the guard's own state (its hook's closure),
# the running request
test = f"""_data = 1
import hashlib
from course.toolkit import salts
assert hashlib.sha256(salts.CURRENT[0].encode()).hexdigest() == {want!r}
from course.exercises.isolation import run_apart
def peek(case):
    found = [salts.CURRENT[0]]
    for hook in get_ipython().events.callbacks["pre_run_cell"]:
        for cell in getattr(hook, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            values = value.values() if type(value) is dict else [value]
            found += [v for v in values if type(v) is str]
    try:
        found.append(json.dumps(get_ipython().kernel.get_parent().get("metadata", {{}}), default=str))
    except LookupError:  # a graded call's process has no request
        pass
    return found
print("KERNEL", json.dumps(peek(())))
print("APART", json.dumps(run_apart(peek, [()], lambda case, v: v)[0].get()))
"""
try:
    _, planted = run(PLANT)
    run(f"{MARK} pre {json.dumps(pre_payload(test, bool(secret)))}", store_history=False)
    looked, error = run(test, store_history=False, secret=secret)
    run(f"{MARK} post", store_history=False)
    out, _ = run("gc.callbacks.clear()\ngc.set_threshold(700, 10, 10)\nget_ipython().input_transformers_cleanup.remove(transformer)\n"
                 "print('KEPT', json.dumps(kept))")
    kept = json.loads(out.split("KEPT", 1)[1])
finally:
    client.stop_channels()
    kernel.kill()
looked = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1]) for line in looked.splitlines()
          if line.startswith(("KERNEL ", "APART "))}
print(json.dumps({"kept": kept, "planted": planted, "test_error": error, "looked": looked}))
'''

SECRET = "the-test-" + "secret-9c2a"
ROUTES = ("transformer", "collector", "finalizer", "request", "weakref")


def _drive(secret: str) -> dict:
    """One pre/test/post round with every route planted: what each kept, and the test's error."""
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_STUDENT_ID", "COURSE_GUARD")}
    env["PYTHONPATH"] = str(grading.REPO)
    out = subprocess.run([sys.executable, "-c", DRIVER, secret], cwd=grading.REPO, env=env, text=True,
                         capture_output=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"the driver failed:\n{out.stderr[-3000:]}")
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    if seen["planted"]:
        raise RuntimeError(f"the plant itself failed: {seen['planted']}")
    seen["by_route"] = {r: [text for route, text in seen["kept"] if route == r] for r in ROUTES}
    return seen


@pytest.fixture(scope="module")
def keyed():
    return _drive(SECRET)


@pytest.fixture(scope="module")
def unkeyed():
    return _drive("")


def test_the_test_got_its_secret(keyed):
    assert keyed["test_error"] == "", f"the test cell did not find its secret in the box: {keyed['test_error']}"


def test_a_graded_call_finds_no_secret(keyed):
    """A learner's function runs in the graded call's process: the box is emptied there, and the guard
    keeps only the secret's digest (its state is reachable through its hook's closure). The control is
    the same search in the kernel, during the test, where the box holds the secret."""
    assert any(SECRET in text for text in keyed["looked"]["KERNEL"]), keyed["looked"]
    assert not any(SECRET in text for text in keyed["looked"]["APART"]), \
        f"a graded call found the test's secret: {keyed['looked']['APART']}"
    assert not any("run_apart(peek" in text for text in keyed["looked"]["APART"]), \
        f"a graded call found the test's text in the guard's state: {keyed['looked']['APART']}"


@pytest.mark.parametrize("route", ROUTES)
def test_a_route_closed_keeps_no_secret(keyed, route):
    leaked = [text for text in keyed["by_route"][route] if SECRET in text]
    assert not leaked, f"the submission's {route} kept the test's secret: {leaked[:2]}"


def test_a_collector_callback_never_runs_during_the_test(keyed):
    """Suspended from the pre stage to the post stage (the guard once put it back at the test's start
    while it tried the submission's transformers on the test's text)."""
    during = [text for text in keyed["by_route"]["collector"] if text.startswith("during _data = 1")]
    assert not during, f"the submission's collector callback ran during the test: {during[:2]}"


@pytest.mark.parametrize("route", ["request", "weakref"])
def test_what_the_guard_held_is_let_go_at_the_post_stage(keyed, route):
    """Held, not leaked: the plant's object is freed once the post stage lets go of what it held."""
    assert any(t.startswith("during #course-guard post") for t in keyed["by_route"][route]), \
        (route, keyed["by_route"][route][:4])


# where each plant runs, without a secret: the windows the searches above looked in
# (a test without a secret holds nothing, so the last two run during the test itself)
WHERE = {"transformer": "text #course-guard pre", "collector": "during #course-guard pre",
         "finalizer": "during #course-guard pre", "request": "during _data = 1",
         "weakref": "during _data = 1"}


@pytest.mark.parametrize("route", ROUTES)
def test_control_each_plant_runs_where_it_would_see_the_secret(unkeyed, route):
    texts = unkeyed["by_route"][route]
    assert any(t.startswith(WHERE[route]) for t in texts), (route, texts[:6])
    assert unkeyed["test_error"] == "", unkeyed["test_error"]


def _report_cell(line: str):
    import nbformat
    cell = nbformat.v4.new_code_cell("pass")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"before\ncourse-guard: {line}\nafter\n")]
    return cell


@pytest.mark.parametrize("sent, took, void", [(True, True, False), (True, False, True), (False, False, False)])
def test_the_grader_voids_a_test_whose_guard_did_not_take_its_secret(sent, took, void):
    """A request whose secret was taken out before the guard read it (by the submission's code) shows
    as a test report without ``keyed``: the grader voids that test instead of grading it unkeyed."""
    from autograder.sandboxed_execute import SandboxedExecute
    cell = _report_cell(json.dumps({"stage": "test", "tampered": [], "keyed": took}))
    problems = SandboxedExecute._test_report(None, cell, keyed=sent)
    assert bool(problems) == void, problems
    assert cell.outputs[0]["text"] == "before\nafter\n", "the guard's line is taken out of the output"
