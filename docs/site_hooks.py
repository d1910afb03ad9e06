"""MkDocs hooks (mkdocs.yml): pages of the site that are made from the repository, not written twice.

* The home page is the README itself. It links the reader pages as ``docs/learners.md``; on the site
  the home page sits beside them, so those links lose their ``docs/`` prefix, and the sentence that
  points to the site links the toolkit reference instead. Nothing else changes.
* ``reference/toolkit.md`` is the toolkit's API reference: one section per module of
  ``course/toolkit``, each rendered by mkdocstrings from the module's docstrings. A new module
  appears without anyone listing it. A public function or class without a docstring does not fail
  the build (it is shown by its signature alone); ``tests/test_docs.py`` fails on it.
"""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[1]
TOOLKIT = REPO / "course" / "toolkit"


SITE_SENTENCE = "in the documentation site that `make docs` builds"


def home_page_text(readme: str) -> str:
    """The README's text with its links into docs/ made relative to the site's root, and the
    sentence that sends engineers to the site linked to the reference (on the site, they are there)."""
    text = re.sub(r"\]\(docs/", "](", readme)
    return text.replace(SITE_SENTENCE, "in the [toolkit reference](reference/toolkit.md) of this site")


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
