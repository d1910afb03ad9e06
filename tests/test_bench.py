"""``autograder.bench``: the order the end-to-end autograde hands assignments to its workers, and
how a figure is compared with the committed record."""
from autograder import bench


def test_longest_first_without_a_record_keeps_the_order_given():
    counts = {"a": 2, "b": 9, "c": 5}
    assert bench.longest_first(counts) == ["a", "b", "c"], \
        "with no record, submissions alone are no estimate (one assignment's may cost far more): keep the order"
    assert bench.longest_first(counts, {"seconds": {"a": float("nan")}}) == ["a", "b", "c"]


def test_longest_first_weighs_submissions_by_the_records_seconds_per_submission():
    counts = {"a": 10, "b": 3}
    record = {"seconds": {"a": 1.0, "b": 20.0}}
    assert bench.longest_first(counts, record) == ["b", "a"], \
        "3 submissions at 20 s (60 s) must come before 10 at 1 s (10 s)"


def test_an_assignment_missing_from_the_record_counts_at_the_records_median():
    counts = {"new": 4, "cheap": 4, "mid": 4, "dear": 4}
    record = {"seconds": {"cheap": 1.0, "mid": 5.0, "dear": 9.0, "broken": float("nan")}}
    order = bench.longest_first(counts, record)
    assert order.index("dear") < order.index("new") and order.index("new") < order.index("cheap"), \
        f"an unrecorded assignment should sit at the median (5 s), not first or last: {order}"
    assert order == ["dear", "new", "mid", "cheap"], f"a tie keeps the order given (new before mid): {order}"


def test_change_compares_only_with_a_record_of_this_machines_kind():
    kind = bench.machine_kind()
    assert bench.change(11.0, {"kind": kind, "seconds": {"a": 10.0}}, "a") == "+10%"
    assert bench.change(11.0, {"kind": "another kind", "seconds": {"a": 10.0}}, "a") == "record is another kind"
    assert bench.change(11.0, {"kind": kind, "seconds": {}}, "a") == "not recorded"
    assert bench.change(11.0, {}, "a") == "no record"


def _cell(start, end, grade_id=None, kind="code"):
    meta = {"execution": {"iopub.execute_input": start, "shell.execute_reply": end}} if start else {}
    if grade_id:
        meta["nbgrader"] = {"grade_id": grade_id}
    return {"cell_type": kind, "metadata": meta, "source": ""}


def test_where_the_time_went_splits_a_run_into_cells_and_the_gaps_between_them():
    nb = {"cells": [
        _cell("2026-12-07T10:00:00.000Z", "2026-12-07T10:00:01.000Z"),                   # 1 s
        _cell(None, None),                                                                  # skipped demo
        _cell("2026-12-07T10:00:01.500Z", "2026-12-07T10:00:04.000Z", grade_id="test_a"),  # 2.5 s, 0.5 s gap
        {"cell_type": "markdown", "metadata": {}, "source": ""},
        _cell("2026-12-07T10:00:04.250Z", "2026-12-07T10:00:04.750Z", grade_id="test_b"),  # 0.5 s, 0.25 s gap
    ]}
    got = bench.where_the_time_went(nb)
    assert abs(got["cells"] - 4.0) < 1e-6, f"1 + 2.5 + 0.5 s inside cells; the unrun demo counts nowhere: {got}"
    assert abs(got["span"] - 4.75) < 1e-6 and abs(got["between"] - 0.75) < 1e-6, \
        f"first start to last reply is 4.75 s, of which 0.75 s between cells: {got}"
    assert got["by_cell"] == {"cell 0": 1.0, "test_a": 2.5, "test_b": 0.5}, got["by_cell"]
    assert bench.where_the_time_went({"cells": [_cell(None, None)]}) == \
        {"cells": 0.0, "between": 0.0, "span": 0.0, "by_cell": {}}, "a notebook that never ran has no time"
