"""autograder.grading.pack: how tests/test_autograde.py groups targeted cases into submissions."""
from autograder.grading import Case, pack


def answer_cell(grade_id):
    return {"cell_type": "code", "source": "", "metadata": {"nbgrader": {
        "grade_id": grade_id, "solution": True, "grade": False}}}


SOURCE = {"cells": [answer_cell(f"e{i}") for i in range(1, 6)]
          + [{"cell_type": "code", "source": "", "metadata": {"nbgrader": {
              "grade_id": "t_given", "solution": False, "grade": True}}}]}


def case(name, cell, lost, **kw):
    return Case("a", name, {cell: f"# {name}"}, set(lost), **kw)


def names(groups):
    return [[c.student for c in g] for g in groups]


def test_cases_that_share_an_answer_cell_or_a_lost_test_never_share_a_submission():
    cases = [case("x1", "e1", {"t1"}), case("x2", "e1", {"t2"}), case("y", "e2", {"t1"}),
             case("z", "e3", {"t3"})]
    for group in pack(cases, SOURCE):
        for a in group:
            for b in group:
                assert a is b or not (set(a.edits) & set(b.edits) or a.expect_lost & b.expect_lost), \
                    f"{a.student} and {b.student} clash but were packed together: {names(pack(cases, SOURCE))}"


def test_every_case_is_submitted_once():
    cases = [case(f"c{i}", f"e{i % 5 + 1}", {f"t{i}"}) for i in range(12)]
    flat = [c for g in pack(cases, SOURCE) for c in g]
    assert sorted(c.student for c in flat) == sorted(c.student for c in cases)


def test_a_case_that_asks_deletes_or_edits_a_test_cell_stays_alone():
    cases = [case("own", "e1", {"t1"}, alone=True), Case("a", "deletes", {"e2": None}, {"t2"}),
             Case("a", "test_edit", {"t_given": "pass"}, {"t3"}), case("free1", "e4", {"t4"}),
             case("free2", "e5", {"t5"})]
    assert names(pack(cases, SOURCE)) == [["free1", "free2"], ["own"], ["deletes"], ["test_edit"]]


def test_most_constrained_first_finds_two_groups_where_list_order_needs_three():
    # a chain of clashes a-b-c-d (through the tests they lose), listed ends first: placing the
    # cases in list order puts a and d together and needs a third group for c
    a, b, c, d = (case("a", "e1", {"t1"}), case("b", "e2", {"t1", "t2"}),
                  case("c", "e3", {"t2", "t3"}), case("d", "e4", {"t3"}))
    groups = pack([a, d, b, c], SOURCE)
    assert len(groups) == 2, f"expected 2 submissions, got {names(groups)}"


def test_the_grouping_is_deterministic_and_capped():
    cases = [case(f"c{i}", f"e{i % 5 + 1}", {f"t{i}"}) for i in range(20)]
    assert names(pack(cases, SOURCE)) == names(pack(list(cases), SOURCE))
    assert max(len(g) for g in pack(cases, SOURCE, most=3)) == 3
