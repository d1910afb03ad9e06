"""The README and docs/: a short README that points each reader to their page, links that resolve,
and a fact on one page only.

Every relative link of ``README.md`` and ``docs/*.md`` (``[text](path)`` or ``[text](path#anchor)``)
must name a file of the repository, and an anchor a heading of that file (GitHub's slugs). No line
of prose longer than 60 characters may appear on two pages (a fact copied instead of linked). Each
check is a function of the pages' text, so the negative controls below plant a fault in a copy.

The site (``mkdocs.yml``, ``make docs``) builds in strict mode, so MkDocs itself fails on a broken
link, a missing anchor or a reference to a module that does not exist; its toolkit reference has a
section for every public function and class of ``course.toolkit``, each with a docstring. The
controls build a copy of the site with one planted fault each.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
READERS = ["learners.md", "toolkit.md", "instructors.md", "grading-integrity.md", "authors.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages(repo: Path = REPO) -> dict[str, str]:
    """``{path relative to the repository: text}`` for the README and every page of docs/."""
    out = {"README.md": (repo / "README.md").read_text(encoding="utf-8")}
    for p in sorted((repo / "docs").glob("*.md")):
        out[str(p.relative_to(repo))] = p.read_text(encoding="utf-8")
    return out


def _prose(text: str):
    """The lines of ``text`` outside code fences and tables."""
    inside = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside and not line.lstrip().startswith("|"):
            yield line


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(texts: dict[str, str], repo: Path = REPO) -> list[str]:
    problems = []
    for name, text in texts.items():
        for target in LINK.findall("\n".join(_prose(text))):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (repo / name).parent / path if path else repo / name
            rel = str(file.resolve().relative_to(repo)) if file.resolve().is_relative_to(repo) else None
            if rel is None or not file.exists():
                problems.append(f"{name}: {target} (no such file)")
                continue
            if anchor:
                body = texts.get(rel) or file.read_text(encoding="utf-8")
                heads = {slug(h) for h in re.findall(r"^#+ (.*)$", "\n".join(_prose(body)), re.M)}
                if anchor not in heads:
                    problems.append(f"{name}: {target} (no heading with that anchor)")
    return problems


def repeated_lines(texts: dict[str, str], longer_than: int = 60) -> list[str]:
    seen: dict[str, str] = {}
    problems = []
    for name, text in texts.items():
        for line in _prose(text):
            key = " ".join(line.split())
            if len(key) <= longer_than:
                continue
            if key in seen and seen[key] != name:
                problems.append(f"{name} repeats {seen[key]}: {key[:80]}")
            seen.setdefault(key, name)
    return problems


def test_every_link_resolves():
    assert broken_links(pages()) == []


def test_a_fact_lives_on_one_page():
    assert repeated_lines(pages()) == []


def test_the_readme_is_short_and_points_each_reader_to_a_page():
    readme = pages()["README.md"]
    assert len(readme.splitlines()) <= 60, "the README is the front page: two commands, the notebooks, the readers' pages"
    first = readme.splitlines()[:6]
    assert any(line.startswith("make lab") for line in first) and any(line.startswith("make test") for line in first)
    for page in READERS:
        assert f"(docs/{page})" in readme, f"the README links no reader to docs/{page}"
        assert (REPO / "docs" / page).exists()


# ----- negative controls: a planted fault is caught ----------------------------------------------
@pytest.mark.parametrize("link", ["[x](docs/nowhere.md)", "[x](docs/authors.md#no-such-heading)",
                                  "[x](../outside.md)"])
def test_a_planted_broken_link_is_caught(link):
    texts = pages()
    texts["README.md"] += f"\nsee {link}\n"
    assert len(broken_links(texts)) == 1, link


def test_a_link_to_a_real_heading_passes():
    texts = pages()
    texts["README.md"] += "\nsee [time](docs/authors.md#time)\n"
    assert broken_links(texts) == []


def test_a_planted_copy_of_a_fact_is_caught():
    texts = pages()
    line = next(l for l in _prose(texts["docs/authors.md"]) if len(l) > 80)
    texts["docs/learners.md"] += "\n" + line + "\n"
    assert repeated_lines(texts) != []


# ----- the documentation site ---------------------------------------------------------------------
TOOLKIT = REPO / "course" / "toolkit"


def build_site(root: Path, dest: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of the site whose ``mkdocs.yml`` is in ``root``, into ``dest``."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(dest)],
                          cwd=root, capture_output=True, text=True, timeout=300)


def public_objects(package: Path = TOOLKIT) -> dict[str, ast.AST]:
    """``{"course.toolkit.module.name": node}`` for every public top-level function and class."""
    out = {}
    for path in sorted(package.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                out[f"course.toolkit.{path.stem}.{node.name}"] = node
    return out


def undocumented(objects: dict[str, ast.AST]) -> list[str]:
    return [name for name, node in objects.items() if not ast.get_docstring(node)]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("site")
    built = build_site(REPO, dest)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}{built.stderr}"
    return dest


def test_the_site_builds_strict_and_its_home_page_is_the_readme(site):
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "<h1" in home and "Debugging neural-network training runs" in home
    for page in READERS:
        html = page.replace(".md", ".html")
        assert (site / html).exists(), f"the site has no {html}"
        assert f'href="{html}"' in home, f"the home page does not link {html} (README links docs/{page})"
    assert 'href="reference/toolkit.html"' in home, \
        "the home page does not link the toolkit reference (docs/site_hooks.py: SITE_SENTENCE)"


def test_the_reference_documents_every_public_function_and_class(site):
    html = (site / "reference" / "toolkit.html").read_text(encoding="utf-8")
    missing = [name for name in public_objects() if f'id="{name}"' not in html]
    assert missing == [], f"no section in the toolkit reference for {missing}"


def test_every_public_function_and_class_of_the_toolkit_has_a_docstring():
    assert undocumented(public_objects()) == [], "the reference shows an empty section for these"


def test_an_undocumented_function_is_caught(tmp_path):
    (tmp_path / "mod.py").write_text('def documented():\n    """Does a thing."""\n\n\ndef bare():\n    pass\n')
    assert undocumented(public_objects(tmp_path)) == ["course.toolkit.mod.bare"]


def _site_copy(tmp_path: Path) -> Path:
    """The site's sources in ``tmp_path/src`` (the course package linked, not copied)."""
    src = tmp_path / "src"
    (src / "docs").mkdir(parents=True)
    for name in ("mkdocs.yml", "README.md"):
        (src / name).write_text((REPO / name).read_text(encoding="utf-8"), encoding="utf-8")
    for p in (REPO / "docs").iterdir():
        (src / "docs" / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    (src / "course").symlink_to(REPO / "course")
    return src


@pytest.mark.parametrize("planted, named", [
    ("[x](nowhere.md)", "nowhere.md"),
    ("[x](authors.md#no-such-heading)", "no-such-heading"),
    ("::: course.toolkit.no_such_module", "course.toolkit.no_such_module"),
])
def test_the_strict_build_fails_on_a_planted_fault(tmp_path, planted, named):
    src = _site_copy(tmp_path)
    with open(src / "docs" / "learners.md", "a", encoding="utf-8") as f:
        f.write(f"\n\n{planted}\n")
    built = build_site(src, tmp_path / "site")
    assert built.returncode != 0 and named in built.stdout + built.stderr, built.stdout + built.stderr


def test_the_unchanged_copy_builds(tmp_path):
    built = build_site(_site_copy(tmp_path), tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
