"""The names the grading guard frees before a test cell (``autograder.sandboxed_execute._stores``).

The guard drops the old value of every name a test cell binds before the cell runs, so that an
object of the submission's whose last reference the test drops is finalized then, not on the test's
frames (red team, run 9: a test's ``from ... import assert_detector as _assert_detector`` dropped a
planted object, and its ``__del__`` read the test's source). A name missing here is one the test can
drop while it runs.
"""
from autograder.sandboxed_execute import _stores

CELL = '''from course.exercises import mystery as _mystery, grading
import os.path
x, (y, z) = 1, (2, 3)
total += 1
for i in range(3):
    pass
with open("f") as fh:
    pass
try:
    pass
except Exception as err:
    pass
def helper(a=(w := 5)):
    inner = 1
class Checker:
    attr = 2
match x:
    case {"a": 1, **rest}:
        pass
    case [first, *others]:
        pass
from math import *
'''


def test_every_kind_of_binding_at_the_top_level_is_freed():
    found = set(_stores(CELL))
    expected = {"_mystery", "grading", "os", "x", "y", "z", "total", "i", "fh", "err", "helper", "w",
                "Checker", "rest", "first", "others"}
    missing = expected - found
    assert not missing, f"names the test binds but the guard would not free first: {sorted(missing)}"


def test_names_bound_inside_a_definition_are_not_the_cells():
    found = set(_stores(CELL))
    assert not {"inner", "attr", "a"} & found, f"a function's or class's own names were taken: {sorted(found)}"
    assert "*" not in found


def test_a_cell_that_does_not_parse_frees_nothing():
    assert _stores("def broken(:\n") == []
