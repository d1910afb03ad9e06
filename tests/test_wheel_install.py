"""A normal install of ``course``: the wheel, in a fresh virtual environment, no repository in sight.

``make venv`` installs ``course`` editable, so every other test imports it from the working tree and
cannot see what a wheel leaves out (``packages = ["course"]`` once dropped ``course/bugs/``). Here:

1. the wheel is built from a copy of ``course/``, ``pyproject.toml`` and ``README.md`` (nothing else
   of the repository reaches the build, and no ``build/`` folder is left in the working tree), with
   ``--no-build-isolation`` so the venv's setuptools builds it and nothing is downloaded;
2. a fresh virtual environment is made (``venv --without-pip``), and its ``site-packages`` gets a
   symbolic link to every entry of this venv's ``site-packages`` **except** ``course`` itself and
   its editable-install hooks. So torch and the rest are the ones already installed (no reinstall,
   no network: seconds, not minutes), while ``course`` can only come from the wheel. A venv with
   ``--system-site-packages`` would not do: the base interpreter it reaches has no torch, and a
   ``.pth`` line naming this site-packages would also make the editable ``course``'s metadata
   visible. The test first proves that ``import course`` fails in the new environment;
3. the wheel is installed there with pip (``--no-deps``: the dependencies are the links), and every
   module listed in the wheel is imported from the environment's ``site-packages``, from a folder
   outside the repository, with ``PYTHONPATH`` and the venv's ``bin`` off the environment;
4. notebook 00's solution, copied outside the repository, is executed with plain ``nbconvert
   --execute`` on the kernel ``python3`` (ipykernel's own, which runs the new environment's
   Python), under an empty ``HOME`` and ``JUPYTER_PATH``: no course kernel is registered there.

What it cannot show: that ``pip install`` resolves the dependencies from an index (they are linked,
not resolved), or that a hosted Jupyter (Colab, Kaggle, a JupyterHub) behaves the same.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "solutions" / "00_start_here" / "00_start_here.ipynb"
# The installed course, its metadata and its editable hooks: everything a wheel install must replace.
_COURSE_ENTRIES = ("course", "course-", "__editable__", "_course", "__pycache__")


def _clean_env(home: Path, env_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "JUPYTER", "VIRTUAL_ENV", "IPYTHON"))}
    env.update(HOME=str(home), PATH=f"{env_dir / 'bin'}:/usr/bin:/bin", JUPYTER_PATH="",
               JUPYTER_CONFIG_DIR=str(home / ".jupyter"), JUPYTER_DATA_DIR=str(home / ".local/share/jupyter"),
               PYTHONNOUSERSITE="1", MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    return env


def _run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _wheel_modules(wheel: Path) -> list[str]:
    names = zipfile.ZipFile(wheel).namelist()
    mods = []
    for n in names:
        if n.startswith("course/") and n.endswith(".py"):
            parts = n[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods.append(".".join(parts))
    return sorted(mods)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(environment's python, wheel path, clean environment variables, work folder)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    shutil.copytree(ROOT / "course", src / "course", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index",
          "-q", "-w", str(dist)], cwd=work)
    wheel = next(dist.glob("course-*.whl"))

    env_dir = work / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)])
    python = env_dir / "bin" / "python"
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    for entry in ours.iterdir():
        if not entry.name.startswith(_COURSE_ENTRIES):
            (theirs / entry.name).symlink_to(entry)
    home = work / "home"
    home.mkdir()
    env = _clean_env(home, env_dir)
    before = subprocess.run([str(python), "-c", "import course"], capture_output=True, text=True, cwd=home, env=env)
    assert before.returncode != 0 and "No module named 'course'" in before.stderr, \
        f"the fresh environment already imports course before the wheel is installed:\n{before.stdout}{before.stderr}"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
         cwd=home, env={**env, "PATH": os.environ["PATH"]})
    return python, wheel, env, home


def test_every_module_imports_from_the_installed_wheel(installed):
    python, wheel, env, home = installed
    mods = _wheel_modules(wheel)
    assert "course.bugs" in mods and "course.bugs.registry" in mods, f"the wheel lacks course.bugs: {mods}"
    assert len(mods) == len(list((ROOT / "course").rglob("*.py"))), "the wheel and course/ list different modules"
    probe = ("import importlib, json, sys\n"
             f"mods = {mods!r}\n"
             "files = {m: importlib.import_module(m).__file__ for m in mods}\n"
             "from course.bugs import inject, catalogue\n"
             "assert catalogue(), 'empty bug catalogue'\n"
             "print(json.dumps({'files': files, 'path': sys.path}))\n")
    out = json.loads(_run([str(python), "-c", probe], cwd=home, env=env).stdout)
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env=env).stdout.strip()
    outside = {m: f for m, f in out["files"].items() if not f.startswith(site)}
    assert not outside, f"modules imported from outside the environment's site-packages: {outside}"
    assert not [p for p in out["path"] if p and Path(p).resolve() == ROOT], "the repository is on sys.path"


def test_notebook_00_runs_on_the_installed_package_with_plain_nbconvert(installed):
    python, wheel, env, home = installed
    nb = home / NOTEBOOK.name
    shutil.copy(NOTEBOOK, nb)
    kernels = _run([str(python), "-m", "jupyter_client.kernelspecapp", "list", "--json"], cwd=home, env=env).stdout
    specs = json.loads(kernels)["kernelspecs"]
    assert list(specs) == ["python3"], f"kernels visible to the environment: {list(specs)} (expected only ipykernel's own)"
    assert Path(specs["python3"]["spec"]["argv"][0]) == python, specs["python3"]["spec"]["argv"]
    _run([str(python), "-m", "nbconvert", "--to", "notebook", "--execute", "--ExecutePreprocessor.kernel_name=python3",
          "--ExecutePreprocessor.timeout=300", "--output", "executed.ipynb", str(nb)], cwd=home, env=env, timeout=600)
    import nbformat
    executed = nbformat.read(home / "executed.ipynb", as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, f"cells raised: {[(e.ename, e.evalue) for e in errors]}"
    assert sum(1 for c in executed.cells if c.cell_type == "code" and c.get("execution_count")) > 5
