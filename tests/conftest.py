"""Shared pytest setup.

1. nbval: tqdm progress bars and warnings write to stderr, whose text changes from run to run,
   so strict nbval must not compare ``stderr`` streams. A notebook whose saved outputs another kind
   of machine computed is compared with its numbers masked (``autograder.machine``). pytest
   applies a conftest's collection hooks only below its own folder, so ``make test-notebooks``
   loads this file as a plugin (``-p tests.conftest``) to reach solutions/.
2. The repository root goes on sys.path so tests can import the ``autograder`` scripts package.
3. nbval runs the notebooks longest first (the committed bench record's seconds per notebook), so
   that with one worker per core a short notebook, not a long one, is left running alone at the end.
4. Tests of ``course`` run torch on one intra-op thread: tiny models run fastest that way, and with
   two threads on a busy 2-core machine OpenMP spin-waiting made 30 steps take seconds instead of a
   tenth of one. The previous setting is restored after each test module.
"""
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_collectstart(collector):
    """Add 'stderr' to what nbval skips when comparing a notebook's outputs; and when another kind of
    machine made the notebook's saved outputs (``autograder.machine``), compare them with every
    number masked, saying so in a warning."""
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
        from autograder import machine

        made_on, here = machine.recorded(collector.fspath.purebasename), machine.fingerprint()
        if made_on != here:
            setup_sanitize_files = collector.setup_sanitize_files

            def with_numbers_masked():
                setup_sanitize_files()
                collector.sanitize_patterns.update(machine.NUMBERS_MASKED)
            collector.setup_sanitize_files = with_numbers_masked
            collector.warn(pytest.PytestWarning(
                f"{collector.fspath.basename}: its saved outputs were made on another kind of machine "
                f"({made_on or 'not recorded'}; this one: {here}), so numbers are not compared: "
                f"re-execute it here (make solutions) for an exact comparison"))


def pytest_collection_modifyitems(session, config, items):
    """When every item is a notebook's cell (``make test-notebooks``): the notebooks in
    ``autograder.bench.longest_first`` order, each notebook's cells in their own order. Every
    xdist worker collects the same order, as it must."""
    if not items or not all(str(item.fspath).endswith(".ipynb") for item in items):
        return
    from autograder import bench

    names = list(dict.fromkeys(Path(str(item.fspath)).stem for item in items))
    rank = {name: i for i, name in enumerate(bench.longest_first(dict.fromkeys(names, 1), bench.load_record()))}
    items.sort(key=lambda item: rank[Path(str(item.fspath)).stem])  # stable: cells keep their order


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    try:
        import torch
    except ImportError:  # the notebook checks run without importing torch here
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
