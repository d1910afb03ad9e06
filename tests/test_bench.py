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
