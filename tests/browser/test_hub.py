"""A class on the course's real JupyterHub: real Unix accounts, nbgrader's exchange, Chromium.

One hub start (hub/jupyterhub_config.py through autograder.hub.Hub: PAM passwords, the local
process spawner, the proxy from npm) for the whole class, in this order:

1. As root: an instructor and three learners (Unix accounts, random names, random passwords,
   homes of mode 700), a temporary exchange (1777); the instructor's own nbgrader generates and
   releases ``00_start_here`` from ``~/debug-course``.
2. In Chromium, each learner logs in on the hub's login page and, in JupyterLab's *Assignments*
   panel, fetches ``00_start_here``. ``bo`` submits the solution's answers, then the untouched
   release; the instructor sets the due date (``nbgrader db assignment add --duedate``); ``ada``
   submits the untouched release, then the solution's answers. So each learner's latest
   submission is the other's first kind: a collect of the first submissions would swap their
   scores. ``ada``'s work is after the due date, ``bo``'s before.
3. Bad input: before their real submissions, ``bo`` tries in the panel a notebook of another
   name (the release's missing) and a folder over the stated size limit: both refused at submit,
   with nbgrader's message in the panel's dialog, nothing in the exchange. By nbgrader's command
   line (no server of their own to start), ``cy`` submits a corrupt notebook and ``dee`` another
   assignment's notebook under this one's name.
4. The instructor (their own account, command line) collects, grades with the class runner
   (sandboxed), generates and releases feedback; ``make summary`` and ``make export``'s commands.
5. Each graded learner fetches feedback in the panel and opens it: their score (and ``ada`` the
   late penalty) and no hidden-test text. Between accounts, tried as a learner and refused:
   listing the exchange's inbound and feedback folders, the other learner's home (their work, the
   copy nbgrader keeps of each submission) and the instructor's course folder.
6. Accounts, their processes and the temporary folders are removed, whatever failed.

Expected: ada 10 - 1 (late: 10% of the score per started day) = 9 of 10, bo 0, cy and dee rejected
with their reasons, nobody else's score changed by them. Skips (failing under CI) when not root,
without Chromium, or without the proxy (``make proxy``).
Not exercised: the instructor's browser (Formgrader), resource limits per account, TLS.
"""
from __future__ import annotations

import csv
import html
import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from autograder import grading, hub

from conftest import CHROMIUM_ARGS
from lab_page import open_assignment_list

A = "00_start_here"
COURSE = "debug-course"
PY = str(hub.VENV_BIN / "python")


def _why_not() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "the hub test creates Unix accounts: run it as root"
    if not hub.PROXY.exists():
        return f"{hub.PROXY} is missing: run `make proxy`"
    for tool in ("useradd", "userdel", "chpasswd"):
        if not shutil.which(tool):
            return f"{tool} is missing"
    return None


@pytest.fixture
def requirements(chromium_path):
    why = _why_not()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"hub test cannot run and CI is set: {why}", pytrace=False)
        pytest.skip(f"hub test skipped: {why}")
    return chromium_path


def _solution_answers() -> dict:
    """grade_id -> source of every solution cell of the source notebook (what ada types)."""
    source = json.loads(grading.source_path(A).read_text(encoding="utf-8"))
    return {grading.nbgrader_meta(c)["grade_id"]: c["source"] for c in source["cells"]
            if grading.nbgrader_meta(c).get("solution")}


def _sources(nb: dict) -> list[str]:
    """Each cell's source as one string (the contents API joins the lines a file keeps apart)."""
    return [c["source"] if isinstance(c["source"], str) else "".join(c["source"]) for c in nb["cells"]]


def _page_text(page_html: str) -> str:
    """An HTML page's text (pygments splits code into spans: tags go, lines stay)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page_html))


class Learner:
    """One learner's browser session on the hub (own cookies)."""

    def __init__(self, browser, hub_: hub.Hub, name: str, password: str):
        self.name, self.password, self.hub = name, password, hub_
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.page.set_default_timeout(60_000)

    def login(self) -> None:
        page = self.page
        page.goto(f"{self.hub.url}/hub/login")
        page.fill("#username_input", self.name)
        page.fill("#password_input", self.password)
        page.click("#login_submit")
        # the spawn page, then JupyterLab at /user/<name>/lab
        page.wait_for_url(re.compile(rf"/user/{re.escape(self.name)}/lab"), timeout=180_000)
        page.locator("#jp-main-statusbar").wait_for(timeout=120_000)

    def api(self, method: str, path: str, body=None):
        """The learner's own server's REST API, from the page (their cookie and XSRF token), as
        JupyterLab itself calls it (saving a file is a PUT of its contents)."""
        return self.page.evaluate(
            """async ([method, url, body]) => {
                 const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || '';
                 const r = await fetch(url, {method, headers: {'X-XSRFToken': decodeURIComponent(xsrf),
                                  'Content-Type': 'application/json'}, body: body ? JSON.stringify(body) : undefined});
                 return {status: r.status, text: await r.text()};
               }""", [method, f"/user/{self.name}/api/{path}", body])

    def read_notebook(self) -> dict:
        r = self.api("GET", f"contents/{A}/{A}.ipynb?content=1&type=notebook")
        assert r["status"] == 200, r
        return json.loads(r["text"])["content"]

    def save_notebook(self, nb: dict, name: str = f"{A}.ipynb") -> None:
        r = self.api("PUT", f"contents/{A}/{name}", {"type": "notebook", "format": "json", "content": nb})
        assert r["status"] in (200, 201), r

    def save_text(self, text: str, name: str = f"{A}.ipynb") -> None:
        r = self.api("PUT", f"contents/{A}/{name}", {"type": "file", "format": "text", "content": text})
        assert r["status"] in (200, 201), r

    def panel(self) -> str:
        return open_assignment_list(self.page)

    def click(self, listing: str, label: str, until) -> None:
        """Click ``label`` on the 00_start_here row of the panel's ``listing``; wait for ``until``."""
        self.panel()
        row = self.page.locator(f"#{listing} .list_item", has_text=A).first
        row.locator("button", has_text=re.compile(f"^{label}$")).click()
        deadline = time.monotonic() + 120
        while not until():
            assert time.monotonic() < deadline, f"{self.name}: {label} did not finish: {self.panel()[:800]}"
            self.page.wait_for_timeout(500)

    def submitted_count(self) -> int:
        text = self.page.locator("#submitted_assignments_list").inner_text()
        return len(re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text))

    def submit(self) -> None:
        before = self.submitted_count() if self.page.locator("#submitted_assignments_list").count() else 0
        self.click("fetched_assignments_list", "Submit", lambda: self.submitted_count() > before)

    def submit_refused(self) -> str:
        """Submit; nbgrader refuses: return the dialog's text (and close it)."""
        self.panel()
        row = self.page.locator("#fetched_assignments_list .list_item", has_text=A).first
        row.locator("button", has_text=re.compile("^Submit$")).click()
        dialog = self.page.locator(".jp-Dialog #submission-message")
        dialog.wait_for(timeout=120_000)
        text = dialog.inner_text()
        self.page.locator(".jp-Dialog .jp-mod-accept").click()
        return text

    def close(self) -> None:
        self.context.close()


def _run(user: str, cmd: list[str], env: dict, cwd=None, ok: bool = True) -> str:
    done = hub.as_user(user, cmd, cwd=cwd, env=env)
    if ok:
        assert done.returncode == 0, f"{' '.join(cmd)} as {user} failed:\n{done.stdout[-4000:]}"
    return done.stdout


def test_a_class_on_the_hub(requirements, playwright_driver):
    t0 = time.monotonic()
    tag = "dch" + secrets.token_hex(2)
    inst, ada, bo, cy, dee = (f"{tag}-{r}" for r in ("inst", "ada", "bo", "cy", "dee"))
    learners = [ada, bo, cy, dee]
    # not pytest's tmp_path: its parent is mode 700, and the accounts must reach the exchange
    tmp = Path(tempfile.mkdtemp(prefix="hub-test-"))
    tmp.chmod(0o755)
    exchange = hub.make_exchange(tmp / "exchange")
    passwords = {n: secrets.token_urlsafe(12) for n in [inst, *learners]}
    created, granted = [], []
    the_hub = hub.Hub(state=tmp / "state", exchange=exchange, users=[inst, *learners], admin=inst)
    timings = {}
    try:
        for name in [inst, *learners]:
            hub.create_account(name, passwords[name])
            created.append(name)
        granted = hub.grant_interpreter(created)
        course = hub.instructor_course(inst, [A], exchange)
        ienv = hub.instructor_env(inst, exchange)
        the_hub.start()
        timings["set-up and hub start"] = time.monotonic() - t0

        # the process's one Playwright driver (conftest): a second one would be refused
        browser = playwright_driver.chromium.launch(executable_path=requirements, args=CHROMIUM_ARGS, headless=True)
        sessions = {}
        try:
            for name in (bo, ada):
                s = sessions[name] = Learner(browser, the_hub, name, passwords[name])
                s.login()
                s.click("released_assignments_list", "Fetch",
                        lambda s=s: s.page.locator("#fetched_assignments_list", has_text=A).count() > 0)
            timings["two logins and fetches"] = time.monotonic() - t0 - sum(timings.values())
            answers = _solution_answers()
            s = sessions[bo]
            release = s.read_notebook()
            assert _sources(release) == _sources(json.loads(grading.release_path(A).read_text())), \
                "bo fetched something else than the release"
            # bo first tries two submissions nbgrader refuses: another notebook's name (the
            # release's missing), a folder over the size limit; nothing reaches the exchange
            s.api("DELETE", f"contents/{A}/{A}.ipynb")
            s.save_notebook(json.loads(grading.release_path("01_baselines").read_text()),
                            name="01_baselines.ipynb")
            refused_name = s.submit_refused()
            s.api("DELETE", f"contents/{A}/01_baselines.ipynb")
            s.save_notebook(release)
            big = Path(pwd.getpwnam(bo).pw_dir) / A / "data.bin"
            _run(bo, ["truncate", "-s", "60M", str(big)], hub.user_env(bo))
            refused_size = s.submit_refused()
            _run(bo, ["rm", str(big)], hub.user_env(bo))
            refused_left = sorted(p.name for p in (exchange / COURSE / "inbound").iterdir())
            # bo: the solution's answers first, then the untouched release (collected: 0)
            s.save_notebook(grading.edit_cells(release, answers))
            s.submit()
            s.save_notebook(release)
            s.submit()
            # the due date, between bo's submissions and ada's: where nbgrader keeps it
            due = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
            time.sleep(1)
            _run(inst, [PY, "-m", "nbgrader", "db", "assignment", "add", A, f"--duedate={due}"], ienv, course)
            # ada: the untouched release first, then the solution's answers (collected: 10, late)
            s = sessions[ada]
            release = s.read_notebook()
            s.submit()
            s.save_notebook(grading.edit_cells(release, answers))
            s.submit()
            timings["work and submissions"] = time.monotonic() - t0 - sum(timings.values())

            # by nbgrader's command line (no server to start): cy a corrupt notebook, dee
            # another assignment's notebook under this one's name
            release_text = grading.release_path(A).read_text()
            for name, text in ((cy, release_text[:5000]), (dee, grading.release_path("01_baselines").read_text())):
                env = hub.user_env(name, COURSE_EXCHANGE=exchange)
                home = Path(pwd.getpwnam(name).pw_dir)
                _run(name, [PY, "-m", "nbgrader", "fetch_assignment", A, f"--course={COURSE}"], env)
                (tmp / f"{name}.ipynb").write_text(text)
                os.chmod(tmp / f"{name}.ipynb", 0o644)
                _run(name, ["cp", str(tmp / f"{name}.ipynb"), str(home / A / f"{A}.ipynb")], env)
                _run(name, [PY, "-m", "nbgrader", "submit", A, f"--course={COURSE}"], env, home)

            # the instructor: collect, grade (sandboxed class runner), feedback out
            py_m = [PY, "-m"]
            collect = _run(inst, py_m + ["nbgrader", "collect", A], ienv, course)
            graded = hub.as_user(inst, py_m + ["autograder.grade_class", A, "--root", str(course),
                                               "--jobs", "2"], cwd=course, env=ienv)
            summary = _run(inst, py_m + ["autograder.summary", A, "--root", str(course)], ienv, course)
            _run(inst, py_m + ["nbgrader", "export", "--to", str(course / "grades.csv")], ienv, course)
            _run(inst, py_m + ["nbgrader", "generate_feedback", A], ienv, course)
            _run(inst, py_m + ["nbgrader", "release_feedback", A], ienv, course)
            timings["collect, grade, feedback"] = time.monotonic() - t0 - sum(timings.values())

            # each graded learner fetches their feedback and opens it
            pages = {}
            for name in (ada, bo):
                s = sessions[name]
                s.click("submitted_assignments_list", "Fetch Feedback",
                        lambda s=s: s.page.locator("#submitted_assignments_list",
                                                   has_text="view feedback").count() > 0)
                listing = json.loads(s.api("GET", f"contents/{A}/feedback")["text"])["content"]
                stamps = sorted(e["name"] for e in listing)
                s.page.goto(f"{the_hub.url}/user/{name}/files/{A}/feedback/{stamps[-1]}/{A}.html")
                pages[name] = (stamps, s.page.content())
            timings["feedback fetched"] = time.monotonic() - t0 - sum(timings.values())
        finally:
            for s in sessions.values():
                s.close()
            browser.close()

        # ---- what each learner was told, and got
        assert "missing notebooks" in refused_name and f"{A}.ipynb" in refused_name, refused_name
        assert "Directory size is too big" in refused_size, refused_size
        assert refused_left == [], f"a refused submission reached the exchange: {refused_left}"
        hidden = grading.secret_lines(json.loads(grading.source_path(A).read_text()), grading.HIDDEN)
        assert hidden, "the source has no hidden tests: the feedback check would prove nothing"
        for name, expect in ((ada, "Score: 9.0 / 10.0"), (bo, "Score: 0.0 / 10.0")):
            stamps, page = pages[name]
            text = _page_text(page)
            assert expect in text, f"{name}'s feedback does not say {expect!r}:\n{text[:1500]}"
            leaked = sorted(hidden & {ln.strip() for ln in text.splitlines()})
            assert not leaked and grading.HIDDEN[0] not in text, f"{name}'s feedback shows hidden tests: {leaked[:3]}"
        # control: the instructor's autograded notebook carries hidden tests, and the check sees them
        graded_nb = (course / "autograded" / ada / A / f"{A}.ipynb").read_text()
        assert hidden & {ln.strip() for c in json.loads(graded_nb)["cells"] for ln in "".join(c["source"]).splitlines()}
        assert "Late submission penalty (Score: -1.0)" in _page_text(pages[ada][1]), _page_text(pages[ada][1])[:1500]
        assert "Late submission penalty" not in _page_text(pages[bo][1])

        # ---- the gradebook, the runner, the summary and the export
        assert graded.returncode == 1, f"two rejected submissions must make the runner exit 1:\n{graded.stdout}"
        report = json.loads((course / "autograded" / "_reports" / f"{A}.json").read_text())["students"]
        assert report[cy]["state"] == "rejected" and "corrupt notebook" in report[cy]["reason"], report[cy]
        assert report[dee]["state"] == "rejected" and f"not {A}'s notebook" in report[dee]["reason"], report[dee]
        assert {report[n]["state"] for n in (ada, bo)} == {"graded"}, graded.stdout
        late = summary.split("-- late")[1].split("-- ")[0]
        assert f"{ada}: submitted" in late and "penalty 1" in late and bo not in late, summary
        rows = {r["student_id"]: r for r in csv.DictReader(open(course / "grades.csv"))}
        assert float(rows[ada]["late_submission_penalty"]) == 1.0 and float(rows[ada]["score"]) == 9.0, rows[ada]
        assert float(rows[bo]["late_submission_penalty"]) == 0.0 and float(rows[bo]["score"]) == 0.0, rows[bo]

        # ---- between accounts: tried as a learner, refused
        inbound, fb = exchange / COURSE / "inbound", exchange / COURSE / "feedback"
        for who, other in ((ada, bo), (bo, ada)):
            env = hub.user_env(who)
            other_home = Path(pwd.getpwnam(other).pw_dir)
            for target in (inbound, fb, other_home, other_home / A, other_home / ".local/share/jupyter/nbgrader_cache",
                           course, Path(pwd.getpwnam(inst).pw_dir)):
                done = hub.as_user(who, ["ls", str(target)], env=env)
                assert done.returncode != 0 and "Permission denied" in done.stdout, \
                    f"{who} could list {target}:\n{done.stdout}"
            for target in (other_home / A / f"{A}.ipynb", course / "gradebook.db",
                           course / "submitted" / other / A / f"{A}.ipynb"):
                done = hub.as_user(who, ["cat", str(target)], env=env)
                assert done.returncode != 0 and "Permission denied" in done.stdout, \
                    f"{who} could read {target}:\n{done.stdout[:300]}"
        # control: the same commands as the owner succeed (the paths exist)
        assert hub.as_user(bo, ["cat", str(Path(pwd.getpwnam(bo).pw_dir) / A / f"{A}.ipynb")]).returncode == 0
        assert hub.as_user(inst, ["ls", str(course / "submitted" / ada / A)]).returncode == 0
        timings["total"] = time.monotonic() - t0
        print("hub test timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
        print(collect[-500:])
        print(summary)
    except BaseException:
        print(f"hub log:\n{the_hub.log_tail()}")
        raise
    finally:
        the_hub.stop()
        # every process the hub started for an account (its server, kernels) ended with the hub
        running = {n: subprocess.run(["pgrep", "-a", "-u", n], capture_output=True, text=True).stdout.strip()
                   for n in created}
        hub.revoke_interpreter(created, granted)
        left = [why for why in (hub.remove_account(n) for n in created) if why]
        shutil.rmtree(tmp, ignore_errors=True)
        assert not left, left
        assert not any(running.values()), f"still running after the hub stopped: {running}"
        assert the_hub.proc is None or the_hub.proc.poll() is not None
        for name in created:
            with pytest.raises(KeyError):
                pwd.getpwnam(name)
