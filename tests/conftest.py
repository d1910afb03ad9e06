"""Shared pytest setup.

1. nbval: tqdm progress bars and warnings write to stderr, whose text changes from run to run,
   so strict nbval must not compare ``stderr`` streams. pytest applies a conftest's collection
   hooks only below its own folder, so ``make test-notebooks`` loads this file as a plugin
   (``-p tests.conftest``) to reach solutions/.
2. The repository root goes on sys.path so tests can import the ``autograder`` scripts package.
"""
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_collectstart(collector):
    """Add 'stderr' to what nbval skips when comparing a notebook's outputs."""
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
