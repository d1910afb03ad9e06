"""MkDocs hooks (mkdocs.yml): pages of the site that are made from the repository, not written twice.

* The home page is the README itself. It links the reader pages as ``docs/learners.md``; on the site
  the home page sits beside them, so those links lose their ``docs/`` prefix. Nothing else changes.
* ``reference/toolkit.md`` is the toolkit's API reference: one section per module of
  ``course/toolkit``, each rendered by mkdocstrings from the module's docstrings. A new module
  appears without anyone listing it; one without a docstring fails the strict build (mkdocstrings
  then has nothing to say of it, and ``tests/test_docs.py`` checks every public name is documented).
"""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[1]
TOOLKIT = REPO / "course" / "toolkit"


def home_page_text(readme: str) -> str:
    """The README's text with its links into docs/ made relative to the site's root."""
    return re.sub(r"\]\(docs/", "](", readme)


def toolkit_modules(package: Path = TOOLKIT) -> list[str]:
    """The dotted names of the package's public modules, sorted (``__init__`` and ``_private`` left out)."""
    dotted = ".".join(package.relative_to(REPO).parts)
    return [f"{dotted}.{p.stem}" for p in sorted(package.glob("*.py")) if not p.stem.startswith("_")]


def reference_page_text(modules: list[str]) -> str:
    """The reference page: a sentence on what it is, then one mkdocstrings block per module."""
    intro = ("# Toolkit reference\n\nGenerated from the docstrings of `course.toolkit`, one section a "
             "module. What each check proves and what it cannot, with a worked example: "
             "[The toolkit on your own model](../toolkit.md).\n")
    return intro + "".join(f"\n::: {m}\n" for m in modules)


def on_files(files, config):
    files.append(File.generated(config, "index.md", content=home_page_text((REPO / "README.md").read_text())))
    files.append(File.generated(config, "reference/toolkit.md", content=reference_page_text(toolkit_modules())))
    return files
