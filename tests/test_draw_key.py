"""``autograder.draw_key``: the course's key of hidden draws, and the secret of each test cell.

What it must hold: without a key nothing is mixed (the draws are the test cells' own); with one,
every submission of the course gets the same secret for a test (a regrade gives the same score,
every learner is graded on the same cases), another test or another course's key gets another;
a written key is readable by its owner only; and ``check`` fails a key under which a solution's
test fails."""
import os
import stat

import nbformat

from autograder import draw_key


def test_without_a_key_nothing_is_mixed(tmp_path, monkeypatch):
    monkeypatch.delenv(draw_key.ENV, raising=False)
    assert draw_key.course_key(tmp_path) is None
    assert draw_key.cell_secret(None, "04_late_spike", "test_detect_hidden") == ""


def test_a_written_key_is_private_and_read_back(tmp_path, monkeypatch):
    monkeypatch.delenv(draw_key.ENV, raising=False)
    draw_key.write_key(tmp_path, b"0123abcd")
    assert draw_key.course_key(tmp_path) == b"0123abcd"
    mode = stat.S_IMODE(os.stat(tmp_path / draw_key.KEY_FILE).st_mode)
    assert mode == 0o600, f"the key file must be readable by its owner only, not {oct(mode)}"
    assert [p.name for p in tmp_path.iterdir()] == [draw_key.KEY_FILE], "no temporary file may stay"


def test_the_environment_names_the_key_before_the_file(tmp_path, monkeypatch):
    draw_key.write_key(tmp_path, b"the file's")
    monkeypatch.setenv(draw_key.ENV, "the instructor's")
    assert draw_key.course_key(tmp_path) == b"the instructor's"


def test_one_secret_per_test_of_a_course_and_another_for_anything_else():
    one = draw_key.cell_secret(b"k", "04_late_spike", "test_detect_hidden")
    assert one == draw_key.cell_secret(b"k", "04_late_spike", "test_detect_hidden"), "a regrade must draw the same"
    others = {draw_key.cell_secret(b"j", "04_late_spike", "test_detect_hidden"),
              draw_key.cell_secret(b"k", "12_lr_instability", "test_detect_hidden"),
              draw_key.cell_secret(b"k", "04_late_spike", "test_fix_hidden")}
    assert one not in others and len(others) == 3 and len(one) == 32


def test_check_sets_each_tests_secret_around_it_only():
    nb = nbformat.v4.new_notebook()
    test = nbformat.v4.new_code_cell("assert True", metadata={"nbgrader": {"grade": True, "solution": False,
                                                                       "grade_id": "t1", "points": 1}})
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), test]
    cells = draw_key._with_secrets(nb, b"k", "a").cells
    assert [c.source for c in cells][1:3] == [cells[1].source, "assert True"]
    assert repr(draw_key.cell_secret(b"k", "a", "t1")) in cells[1].source and "CURRENT[:] = ['']" in cells[3].source
    assert cells[0].source == "x = 1", "a cell that is not a test runs with the box empty"


def test_a_dask_worker_grades_with_the_coordinators_key(monkeypatch):
    """The job carries the key and the worker hands it to its nbgrader, whose environment wins over
    any key file: every worker draws what the class runner on the coordinator would."""
    from autograder import class_runner, dask_grading, grading
    seen = {}

    def run_nbgrader(cmd, root, log_path, timeout, env=None):
        seen["env"] = env
        log_path.write_text("")
        return 0, None
    monkeypatch.setattr(dask_grading, "course_version", lambda root: "v")
    monkeypatch.setattr(dask_grading, "_gradebook_reachable", lambda url: None)
    monkeypatch.setattr(class_runner, "run_nbgrader", run_nbgrader)
    job = dask_grading.GradingJob(grading.assignments()[0], "ada", {"a.ipynb": b"{}"}, "sqlite://", "v", 60.0,
                                  b"the coordinator's key")
    result = dask_grading.grade_job(job)
    assert result.grader_error is None, result.grader_error
    assert seen["env"] == {draw_key.ENV: "the coordinator's key"}


def test_check_runs_each_test_with_its_secret_and_names_the_tests_that_fail(tmp_path, monkeypatch):
    """A notebook whose first test needs its own secret and whose second test needs none: under a
    key, ``check`` passes the first and names the second (the control: a key that does not suit)."""
    from autograder import grading
    folder = tmp_path / "toy"
    folder.mkdir()
    meta = lambda gid: {"nbgrader": {"grade": True, "solution": False, "locked": True, "grade_id": gid, "points": 1}}
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from course.toolkit import salts"),
                nbformat.v4.new_code_cell(f"assert salts.CURRENT[0] == {draw_key.cell_secret(b'k', 'toy', 'own')!r}",
                                          metadata=meta("own")),
                nbformat.v4.new_code_cell("assert salts.CURRENT[0] == '', 'this test wants no secret'",
                                          metadata=meta("none"))]
    nbformat.write(nb, folder / "toy.ipynb")
    monkeypatch.setattr(grading, "source_path", lambda a, root=None: folder / f"{a}.ipynb")
    failed = draw_key.check(b"k", ["toy"], echo=lambda *a, **k: None)
    assert [f.split(":")[0] for f in failed["toy"]] == ["none"], failed
