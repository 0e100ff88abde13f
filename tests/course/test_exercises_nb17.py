"""Notebook 17's checkers accept right answers written differently and reject the typical wrong ones, each for
its reason."""
import pytest

from exercise_support import judged, reference_answer, run_solution, verdict
from hooklab.course import exercises
from hooklab.course.exercises import _harness, verdict as full_verdict

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


SILENT_OF_THE_FIRST_RECORDS = ["ddp-comm-hook@unused-branch", "forward-hook@compile-hook-after",
                               "full-backward-hook@autograd-grad", "param-hook@deepcopy"]


def hard_coded(cells):  # the keys the checker's records always gave: right on those records, and only on them
    return list(SILENT_OF_THE_FIRST_RECORDS)


def hard_coded_when_it_knows(cells):  # computes on other records, answers from memory on the checker's
    if set(SILENT_OF_THE_FIRST_RECORDS) <= set(cells):
        return list(SILENT_OF_THE_FIRST_RECORDS)
    return forgets_errors(cells)


def test_17_1_refuses_a_hard_coded_list():
    """Review round 5: the checker always used the same 10 records, so the list of their 4 silent keys passed."""
    assert judged("17.1", hard_coded) == ("wrong", "hard-coded")
    assert "given another set of records" in full_verdict("17.1", hard_coded).en
    assert judged("17.1", hard_coded_when_it_knows) == ("wrong", "includes-errors")  # judged on the second set


def test_17_1_names_the_cell():
    assert "tensor-hook@no-grad raised" in full_verdict("17.1", forgets_errors).en
    assert "forward-hook@autograd-grad is an n/a cell" in full_verdict("17.1", forgets_na).en


# ---- 17.2 a new context -------------------------------------------------------------------------------------------


def pops_handles(h):  # right, another way: pop the handles, no phases, the facts as a list
    rig = h.rig()
    h.install(rig)
    out = rig.net(rig.x)
    while rig.handles:
        rig.handles.pop().remove()
    out.sum().backward()
    h.fact(*[out, rig.x.grad] + [p.grad for p in rig.net.parameters()])


def closes_the_rig(h):  # right too: Rig.close() removes the handles (and leaves the scopes)
    rig = h.rig()
    h.install(rig)
    out = rig.net(rig.x)
    rig.close()
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


def no_facts(h):  # the right calls, but nothing recorded: a changed return value cannot be judged
    rig = h.rig()
    h.install(rig)
    out = rig.net(rig.x)
    for handle in rig.handles:
        handle.remove()
    out.sum().backward()


def only_the_output(h):  # the output alone: a doubled gradient does not show in it
    rig = h.rig()
    h.install(rig)
    out = rig.net(rig.x)
    for handle in rig.handles:
        handle.remove()
    out.sum().backward()
    h.fact(out)


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


def removes_the_newest_handle(h):  # one handle per family here: right for the four, not for a family of two
    rig = h.rig()
    h.install(rig)
    out = rig.net(rig.x)
    rig.handles[-1].remove()
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


def blank_17_2(h):
    pass


def test_17_2_accepts_right_answers():
    assert verdict("17.2", run_solution("17.2")["remove_before_backward"]) == "correct"
    assert verdict("17.2", pops_handles) == "correct"
    assert verdict("17.2", closes_the_rig) == "correct"
    assert judged("17.2", blank_17_2) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (never_removes, "not-removed"), (removes_before_forward, "nothing-ran"), (never_installs, "nothing-ran"),
    (no_backward, "no-backward"), (two_forwards, "counts"), (wrong_attribute, "raised"), (None, "blank"),
    (no_facts, "no-facts"), (only_the_output, "no-facts"), (removes_the_newest_handle, "handle-left")])
def test_17_2_rejects_wrong_answers(answer, reason):
    status = "not solved" if answer is None else "wrong"
    assert judged("17.2", answer) == (status, reason)


def test_17_2_checks_what_the_facts_show():
    """Review round 5: only the call counts were compared, so a context that records no facts (and so judges every
    return value "ignored") passed."""
    en = full_verdict("17.2", no_facts).en
    assert "full-backward-hook's return value was judged 'ignored' where an independent run says 'used'" in en
    assert "h.fact(out, rig.x.grad, *h.grads(rig))" in en


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


# ---- 17.3: a prediction is not a probe's output

def test_17_3_refuses_a_prediction_computed_by_the_probes():
    from hooklab.course import hook_matrix
    from hooklab.course.exercises.nb17 import KEYS_17_3

    right = reference_answer("17.3")
    assert exercises.verdict("17.3", right).status == "correct"
    probed = {key: hook_matrix.observe(*key.split("@")).calls for key in KEYS_17_3}  # what the review's answer did
    result = exercises.verdict("17.3", probed)
    assert (result.status, result.reason) == ("wrong", "answer-machinery"), result  # review round 5: accepted
    assert "forward-hook@checkpoint" in result.en and "`hook_matrix.observe`" in result.zh
    _harness.forget_consulted()
    assert exercises.verdict("17.3", probed).status == "correct"


def test_17_3_the_cells_the_notebook_shows_may_have_been_probed():
    """Notebook 17 runs the probes of three of the four cells before the exercises: a learner who ran the notebook
    and predicts is right."""
    from hooklab.course import hook_matrix
    from hooklab.course.exercises.nb17 import SHOWN_17_3

    for key in SHOWN_17_3:
        hook_matrix.observe(*key.split("@"))
    assert exercises.verdict("17.3", reference_answer("17.3")).status == "correct"


def test_17_3_shown_cells_are_those_notebook_17_probes_before_its_exercises():
    import json
    import re
    from pathlib import Path

    from hooklab.course.exercises.nb17 import KEYS_17_3, SHOWN_17_3

    cells = json.loads(Path("notebooks/17_hook_behaviour_matrix.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"
                     and "course.check(\"17." not in "".join(c["source"]))
    named = {f"{f}@{c}" for f, c in re.findall(r'observe\("([\w-]+)", "([\w-]+)"\)', code)}
    named |= set(re.findall(r'"([\w-]+@[\w-]+)"', code))
    assert set(SHOWN_17_3) == named & set(KEYS_17_3)
