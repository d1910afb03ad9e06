"""Fixtures of the browser test: a JupyterLab server on loopback and headless Chromium.

Contract:
- ``chromium_path`` is Debian's ``/usr/bin/chromium`` (or ``$COURSE_CHROMIUM``), driven by the
  Python ``playwright`` package (pinned in requirements.txt; ``playwright install`` is never
  needed). When either is missing the browser tests are skipped with a message saying what to
  install, unless the environment variable ``CI`` is set: then they fail, so CI cannot go green
  without having run them. ``make system-deps`` installs Chromium when run as root.
- ``lab`` starts ``jupyter lab`` the way ``make lab`` does (working directory = the repository
  root, so nbgrader's Validate reads the course's ``nbgrader_config.py``; the pre-save hook that
  keeps an opened notebook's file unchanged), but on a free loopback
  port, with a random token, and rooted at a throw-away copy of the notebooks (running and
  validating a notebook saves it: the repository's files are never touched). Jupyter's config,
  data and runtime folders, IPython's and matplotlib's are temporary too; the course kernel
  ``debug-course`` stays visible because it is installed inside the venv (``--sys-prefix``).
- Limits: one server and one browser for the whole session; notebooks run one at a time.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autograder import grading  # noqa: E402

import lab_page  # noqa: E402  (tests/browser, beside this file)

CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
# From FIELD_NOTES.md "A real browser": what Debian's Chromium needs to run headless here.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
SCREENSHOTS = REPO / ".screenshots"
# The Jupyter server pre-save hook `make lab` and `make lab-instructor` pass (same string there).
LAB_PRE_SAVE_HOOK = "autograder.execute_notebooks.lab_pre_save"

# JupyterLab user settings written into the temporary config folder:
# - windowing off: every cell is in the page, so the test sees every output (with windowing, cells
#   out of view are not rendered and a widget below the fold would look "missing");
# - cell timings recorded in the saved notebook (the test reports slow cells without a progress bar);
# - no news or update checks (no network here, and their toast would cover the page).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings":
        {"windowingMode": "none", "recordTiming": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
}


def _missing_requirement() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return ("the Python package playwright is not installed "
                "(it is in requirements.txt: `make venv`)")
    if not os.access(CHROMIUM, os.X_OK):
        return (f"Chromium is not installed at {CHROMIUM} "
                "(as root: `make system-deps`, i.e. `apt-get install -y chromium`)")
    return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    why = _missing_requirement()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"browser test cannot run and CI is set: {why}", pytrace=False)
        pytest.skip(f"browser test skipped: {why}")
    return CHROMIUM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    """A running JupyterLab server: ``url(path)`` gives an authenticated address."""
    base: str
    token: str
    root: Path          # the server's root_dir (holds solutions/ and notebooks/ copies)
    log: Path

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}{path}{sep}token={self.token}"

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Stop every kernel (the previous notebook's), so notebooks do not compete for the CPU."""
        for k in self.api("/api/kernels"):
            self.api(f"/api/kernels/{k['id']}", method="DELETE")

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]


def _copy_course(dest: Path) -> None:
    """solutions/<a>/<a>.ipynb and notebooks/<a>/<a>.ipynb (where released) into dest."""
    for a in grading.assignments():
        for src in (grading.source_path(a), grading.release_path(a)):
            if src.exists():
                target = dest / src.parent.parent.name / a / src.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)


@pytest.fixture(scope="session")
def lab(chromium_path, tmp_path_factory) -> Lab:
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    _copy_course(root)
    env = dict(os.environ)
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"),
                     ("MPLCONFIGDIR", "mpl")]:
        env[var] = str(tmp / sub)
        (tmp / sub).mkdir()
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    for name, value in LAB_SETTINGS.items():
        f = tmp / "config" / "lab" / "user-settings" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value))
    # nbgrader's Assignments view lists an exchange folder; its default
    # (/usr/local/share/nbgrader/exchange) would be created on the machine when the test runs as
    # root. Point it at a temporary one: the view reads the config of the server's root (this
    # copy has none, so the one in the temporary config folder), the course's nbgrader_config.py
    # reads COURSE_EXCHANGE. (Validate reads the course's nbgrader_config.py from the working
    # directory.)
    (tmp / "exchange").mkdir()
    env["COURSE_EXCHANGE"] = str(tmp / "exchange")
    (tmp / "config" / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.Exchange.root = {str(tmp / 'exchange')!r}\n")

    token = secrets.token_hex(16)
    port = _free_port()
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--LabApp.news_url=", "--ServerApp.terminals_enabled=False",
           # as `make lab` does: opening a notebook must not change its file
           f"--ContentsManager.pre_save_hook={LAB_PRE_SAVE_HOOK}",
           # window.jupyterapp: a test opens its notebook in the JupyterLab its tab already loaded
           # (lab_page.open_notebook) instead of loading the page again
           "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:  # jupyter refuses to run as root without it
        cmd.append("--allow-root")
    log = tmp / "jupyter.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    server = Lab(base=f"http://127.0.0.1:{port}", token=token, root=root, log=log)
    deadline = time.monotonic() + 90
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{server.log_tail()}",
                            pytrace=False)
            try:
                server.api("/api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not answer in 90 s:\n{server.log_tail()}",
                                pytrace=False)
                time.sleep(0.5)
        kernels = server.api("/api/kernelspecs")["kernelspecs"]
        assert grading.KERNEL_NAME in kernels, (
            f"the course kernel {grading.KERNEL_NAME!r} is not visible to the server "
            f"(found {sorted(kernels)}): run `make venv`")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def playwright_driver(chromium_path):
    """The one Playwright driver of this test process.

    Playwright's sync API refuses a second ``sync_playwright()`` while one is open in the same
    process (its event loop counts as running), so every test that needs a browser takes it
    from here instead of starting its own.
    """
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_driver, chromium_path, tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    # A persistent context is the only way to give Chromium its own fresh user-data-dir.
    context = playwright_driver.chromium.launch_persistent_context(
        str(profile), executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True,
        viewport={"width": 1400, "height": 1000})
    try:
        yield context
    finally:
        context.close()


@pytest.fixture(scope="session")
def _shared_tab():
    """The tab the tests of this worker share (``page``), once it exists."""
    tab = {}
    yield tab
    if tab.get("page") is not None and not tab["page"].is_closed():
        tab["page"].close()


@pytest.fixture
def page(browser, lab, _shared_tab, request):
    """The worker's tab, with JupyterLab loaded by its first test and kept: loading JupyterLab costs
    Chromium about 5 s of CPU (measured on the slower 2-core kind, 2026-12-07), and the tests of
    every notebook loaded it again. Each test opens its notebook in the app already there
    (``lab_page.open_notebook``). Afterwards every document in the main area is closed and every
    kernel shut down, so the next notebook runs alone, the only document in JupyterLab. After a
    test that failed, or when a dialog is still open or closing the documents fails, the tab is
    closed and the next test loads JupyterLab in a new one, as every test did before."""
    tab = _shared_tab.get("page")
    if tab is None or tab.is_closed():
        tab = _shared_tab["page"] = browser.new_page()
        tab.set_default_timeout(30_000)
    failed_before = request.session.testsfailed
    yield tab
    try:
        if request.session.testsfailed != failed_before or not lab_page.close_documents(tab):
            _shared_tab.pop("page", None)
            tab.close()
    finally:
        try:
            lab.shutdown_kernels()
        except Exception:  # a kernel left running would compete with the next notebook: new tab
            _shared_tab.pop("page", None)
            raise


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(exist_ok=True)
    return SCREENSHOTS
