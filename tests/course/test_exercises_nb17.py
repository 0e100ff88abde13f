"""Notebook 17's checkers accept right answers written differently and reject the typical wrong ones, each for
its reason."""
import pytest

from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import verdict as full_verdict

# ---- 17.1 the silent cells ----------------------------------------------------------------------------------------


def by_fires(cells):  # right, another way: `fires`, .get, a list comprehension over sorted items
    return [key for key, r in sorted(cells.items())
            if r["status"] != "n/a" and not r.get("fires") and r.get("error") is None]


def forgets_na(cells):
    return sorted(k for k, r in cells.items() if r.get("calls", 0) == 0 and not r.get("error"))


def reads_calls_of_na(cells):  # n/a records have no "calls"
    return sorted(k for k, r in cells.items() if r["calls"] == 0 and not r.get("error"))


def forgets_errors(cells):
    return sorted(k for k, r in cells.items() if r["status"] == "observed" and r["calls"] == 0)


def the_fired_ones(cells):
    return sorted(k for k, r in cells.items() if r["status"] == "observed" and r["calls"] > 0 and not r["error"])


def first_only(cells):
    return sorted(run_solution("17.1")["silent_cells"](cells)[:1])


def unsorted(cells):
    return [k for k, r in cells.items() if r["status"] == "observed" and r["calls"] == 0 and not r["error"]]


def twice(cells):
    keys = run_solution("17.1")["silent_cells"](cells)
    return sorted(keys + keys[:1])


def records_not_keys(cells):
    return [cells[k] for k in run_solution("17.1")["silent_cells"](cells)]


def one_string(cells):
    return ", ".join(run_solution("17.1")["silent_cells"](cells))


def renamed(cells):
    return sorted(k.replace("@", ":") for k in run_solution("17.1")["silent_cells"](cells))


def forgets_return_17_1(cells):
    sorted(cells)


def blank_17_1(cells):
    pass


def test_17_1_accepts_right_answers():
    assert verdict("17.1", run_solution("17.1")["silent_cells"]) == "correct"
    assert verdict("17.1", by_fires) == "correct"
    assert verdict("17.1", lambda cells: tuple(by_fires(cells))) == "correct"
    assert judged("17.1", blank_17_1) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (forgets_na, "includes-na"), (reads_calls_of_na, "raised"), (forgets_errors, "includes-errors"),
    (the_fired_ones, "includes-fired"), (first_only, "missed-silent"), (unsorted, "not-sorted"),
    (twice, "duplicates"), (records_not_keys, "not-keys"), (one_string, "not-a-collection"),
    (renamed, "unknown-key"), (forgets_return_17_1, "returned-none"), ("silent", "not-a-function")])
def test_17_1_rejects_wrong_answers(answer, reason):
    assert judged("17.1", answer) == ("wrong", reason)


def test_17_1_names_the_cell():
    assert "tensor-hook@no-grad raised" in full_verdict("17.1", forgets_errors).en
    assert "forward-hook@autograd-grad is an n/a cell" in full_verdict("17.1", forgets_na).en


# ---- 17.2 a new context -------------------------------------------------------------------------------------------


def pops_handles(h):  # right, another way: pop the handles, no phases, no facts
    rig = h.rig()
    h.install(rig)
    out = rig.net(rig.x)
    while rig.handles:
        rig.handles.pop().remove()
    out.sum().backward()


def closes_the_rig(h):  # right too: Rig.close() removes the handles (and leaves the scopes)
    rig = h.rig()
    h.install(rig)
    out = rig.net(rig.x)
    rig.close()
    out.sum().backward()


def never_removes(h):
    rig = h.rig()
    h.install(rig)
    rig.net(rig.x).sum().backward()


def removes_before_forward(h):
    rig = h.rig()
    h.install(rig)
    for handle in rig.handles:
        handle.remove()
    rig.net(rig.x).sum().backward()


def never_installs(h):
    rig = h.rig()
    rig.net(rig.x).sum().backward()


def no_backward(h):
    rig = h.rig()
    h.install(rig)
    rig.net(rig.x)
    for handle in rig.handles:
        handle.remove()


def two_forwards(h):
    rig = h.rig()
    h.install(rig)
    rig.net(rig.x)
    out = rig.net(rig.x)
    for handle in rig.handles:
        handle.remove()
    out.sum().backward()


def wrong_attribute(h):
    rig = h.rig()
    h.install(rig)
    rig.model(rig.x)


def blank_17_2(h):
    pass


def test_17_2_accepts_right_answers():
    assert verdict("17.2", run_solution("17.2")["remove_before_backward"]) == "correct"
    assert verdict("17.2", pops_handles) == "correct"
    assert verdict("17.2", closes_the_rig) == "correct"
    assert judged("17.2", blank_17_2) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (never_removes, "not-removed"), (removes_before_forward, "nothing-ran"), (never_installs, "nothing-ran"),
    (no_backward, "no-backward"), (two_forwards, "counts"), (wrong_attribute, "raised"), (None, "blank")])
def test_17_2_rejects_wrong_answers(answer, reason):
    status = "not solved" if answer is None else "wrong"
    assert judged("17.2", answer) == (status, reason)


def test_17_2_says_which_family_raised():
    assert "with the full-backward-hook family your context raised: AttributeError" in \
        full_verdict("17.2", wrong_attribute).en


# ---- 17.3 predictions ---------------------------------------------------------------------------------------------

ORDER = ("param-hook@used-twice", "full-backward-hook@used-twice", "forward-hook@apply", "forward-hook@checkpoint")


def test_17_3():
    assert verdict("17.3", run_solution("17.3")["my_calls"]) == "correct"
    assert verdict("17.3", [1, 2, 2, 2]) == "correct"                        # the four ints in the listed order
    assert verdict("17.3", dict(zip(reversed(ORDER), [2, 2, 2, 1]))) == "correct"   # any key order
    assert judged("17.3", {}) == ("not solved", "blank")
    assert judged("17.3", [1.0, 2.0, 2.0, 2.0]) == ("wrong", "four-ints")
    assert judged("17.3", [True, 2, 2, 2]) == ("wrong", "four-ints")
    assert judged("17.3", {"param-hook@used-twice": 1}) == ("wrong", "four-ints")
    assert judged("17.3", [2, 2, 2, 2]) == ("wrong", "summed-once")   # the weight's hook once per use
    assert judged("17.3", [1, 1, 2, 2]) == ("wrong", "per-call")      # the full backward hook once in all
    assert judged("17.3", [1, 2, 1, 2]) == ("wrong", "registered-twice")
    assert judged("17.3", [1, 2, 2, 1]) == ("wrong", "recomputed")


def test_17_3_names_the_cell_and_the_prediction():
    assert "forward-hook@checkpoint: you predicted 1" in full_verdict("17.3", [1, 2, 2, 1]).en
