"""The leak harness every check runs under (hooklab.course.exercises._harness), against a table of leaky answers for
every exercise: each reference solution made leaky in each way that applies to it must be refused, with a verdict that
names the leak:

* ``kept``: the answer keeps what it is given and what it returns in a list of its own (16.1's leak: a list that
  keeps every model alive) -> ``kept-reference``;
* ``growth``: the answer appends to a history at every call and never drops anything (16.2's leak) -> ``growth``;
* ``machinery``: the answer reads the reference solutions while it runs -> ``answer-machinery``;
* ``patched``: the answer replaces a function the check judges with (``torch.allclose``, a checker's own helper:
  17.1's ``nb17._silent``) -> ``patched-checker``, and the original is back afterwards;
* ``host read``: only where the task forbids them (16.2), every route -> ``host-read``.

Where a kind of leak cannot happen, the table says why (``NOT_APPLICABLE``), and the test checks that reason too.
"""
import functools
import importlib
import logging
import os
import signal
import sys
import threading
import warnings

import numpy
import pytest
import torch
from torch import nn

from exercise_support import reference_answer
from hooklab.course import exercises


def registered_keys():
    exercises._load_all()
    return sorted(exercises._REGISTRY)


def is_data(key):
    return exercises._get(key).data


# ---- the leaky variants of a reference solution ------------------------------------------------------------------

def tensors_and_modules(value, depth=0):
    """The tensors and modules in ``value`` (through tuples, lists and dicts), as a leaky answer would keep them."""
    if isinstance(value, (torch.Tensor, nn.Module)):
        return [value]
    if depth < 3 and isinstance(value, (list, tuple, set)):
        return [t for v in value for t in tensors_and_modules(v, depth + 1)]
    if depth < 3 and isinstance(value, dict):
        return [t for v in value.values() for t in tensors_and_modules(v, depth + 1)]
    if isinstance(getattr(value, "rigs", None), list) or isinstance(getattr(value, "param_groups", None), list):
        return [value]  # 17.2's harness (its rigs hold the models), an optimizer (it holds the parameters)
    if callable(value) and not isinstance(value, type):
        return [value]  # 14.2: the function it is given runs the check's model
    return []


def keeping_all(function, kept):
    """``function``, which also keeps every tensor, module, optimizer and function it is given and returns; a hook it
    returns (06.2, 10.2, 12.3: the answer makes hooks) keeps what it is given too."""
    @functools.wraps(function)
    def leaky(*args, **kwargs):
        result = function(*args, **kwargs)
        kept.extend(tensors_and_modules((args, kwargs, result)))
        if callable(result) and not hasattr(result, "remove"):
            return keeping_all(result, kept)
        if isinstance(result, tuple) and result and all(callable(r) for r in result):
            return tuple(keeping_all(r, kept) for r in result)
        return result
    return leaky


def keeping(answer, kept):
    return keeping_all(answer, kept)


def growing(answer, history):
    @functools.wraps(answer)
    def leaky(*args, **kwargs):
        history.append(len(history))
        return answer(*args, **kwargs)
    return leaky


def reading_the_solutions(answer, key):
    @functools.wraps(answer)
    def leaky(*args, **kwargs):
        solutions = importlib.import_module(f"hooklab.course.exercises.solutions.nb{key[:2]}")
        assert solutions.HINTS[key]
        return answer(*args, **kwargs)
    return leaky


def always_close(*args, **kwargs):
    return True


def patching(answer):
    @functools.wraps(answer)
    def leaky(*args, **kwargs):
        torch.allclose = always_close
        return answer(*args, **kwargs)
    return leaky


class LeakyValue(list):
    """A value answer that runs ``act`` whenever the checker reads it."""

    def __init__(self, items, act):
        super().__init__(items)
        self.act = act

    def __eq__(self, other):
        self.act()
        return list.__eq__(self, other)

    __hash__ = None

    def __len__(self):
        self.act()
        return list.__len__(self)

    def __iter__(self):
        self.act()
        return list.__iter__(self)

    def __getitem__(self, index):
        self.act()
        return list.__getitem__(self, index)


class LeakyMapping(dict):
    def __init__(self, items, act):
        super().__init__(items)
        self.act = act

    def __eq__(self, other):
        self.act()
        return dict.__eq__(self, other)

    __hash__ = None

    def __iter__(self):
        self.act()
        return dict.__iter__(self)

    def __getitem__(self, key):
        self.act()
        return dict.__getitem__(self, key)

    def keys(self):
        self.act()
        return dict.keys(self)

    def items(self):
        self.act()
        return dict.items(self)

    def values(self):
        self.act()
        return dict.values(self)


def leaky_value(key, act):
    answer = reference_answer(key)
    return LeakyMapping(answer, act) if isinstance(answer, dict) else LeakyValue(answer, act)


# ---- the table ------------------------------------------------------------------------------------------------

# the exercises whose checker runs the answer only in worker processes: whatever it keeps or reads dies with them
IN_WORKERS = {"10.1", "14.3", "14.4"}
# what the answer gets and returns holds no module or tensor that the check made (it gets records, a path, a count..)
NOTHING_TO_KEEP = {"17.1"}

NOT_APPLICABLE = {
    **{(key, kind): "the answer runs in worker processes: what it keeps dies with them"
       for key in IN_WORKERS for kind in ("kept", "growth", "machinery", "patched")},
    **{(key, "kept"): "the answer is given no module or tensor of the check's and returns none"
       for key in NOTHING_TO_KEEP},
}


def table():
    rows = []
    for key in registered_keys():
        kinds = ("machinery", "patched") if is_data(key) else ("kept", "growth", "machinery", "patched")
        rows += [(key, kind) for kind in kinds]
    return rows


EXPECTED = {"kept": "kept-reference", "growth": "growth", "machinery": "answer-machinery",
            "patched": "patched-checker"}
NAMED = {"kept": ("still holds", "仍通过"), "growth": ("grows with every check", "每检查一次都在增加"),
         "machinery": ("reference solutions", "参考答案"), "patched": ("torch.allclose", "torch.allclose")}


def skip_without_extras(key):
    if "torchvision" in exercises._get(key).solution or key == "04.3":
        pytest.importorskip("torchvision")
    if key.startswith("12."):
        pytest.importorskip("transformers")


@pytest.mark.parametrize("key, kind", table())
def test_every_exercise_refuses_its_leaky_answers(key, kind):
    skip_without_extras(key)
    held = []
    allclose = torch.allclose
    if is_data(key):
        act = ((lambda: reading_the_solutions(lambda: None, key)()) if kind == "machinery"
               else (lambda: patching(lambda: None)()))
        answer = leaky_value(key, act)
    else:
        answer = reference_answer(key)
        answer = {"kept": lambda a: keeping(a, held), "growth": lambda a: growing(a, held),
                  "machinery": lambda a: reading_the_solutions(a, key), "patched": patching}[kind](answer)
    result = exercises.verdict(key, answer)
    assert torch.allclose is allclose  # put back, whatever the verdict
    if (key, kind) in NOT_APPLICABLE:
        assert result.status == "correct", (NOT_APPLICABLE[key, kind], result)
        if kind in ("kept", "growth"):
            assert held == [] or key in NOTHING_TO_KEEP, "the answer ran in this process after all"
        return
    assert (result.status, result.reason) == ("wrong", EXPECTED[kind]), result
    en, zh = NAMED[kind]
    assert en in result.en and zh in result.zh, result


def test_the_table_covers_every_exercise_and_every_kind_that_applies():
    keys = registered_keys()
    assert {key for key, _ in table()} == set(keys)
    for key in keys:
        kinds = {kind for k, kind in table() if k == key}
        assert {"machinery", "patched"} <= kinds
        assert is_data(key) or {"kept", "growth"} <= kinds
    assert all(key in keys for key, _ in NOT_APPLICABLE)


# ---- 16.2: host reads by every route -------------------------------------------------------------------------

def norm_of(model):
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]))


def logger_reading_by(read):
    """16.2 answered right, except that the comparison with the limit reads the norm on the host by ``read``."""
    def log_norm(history, spikes, step, model, limit):
        norm = norm_of(model)
        history[step % len(history)] = norm
        spikes += read(norm) > limit  # a tensor when ``read`` gives one back: then that read is the only one
    return log_norm


ROUTES = {
    "`.tolist()`": lambda t: t.tolist(),
    "`.numpy()`": lambda t: t.numpy(),
    "`.item()`": lambda t: t.item(),
    "`float(t)`": float,
    "`numpy.asarray(t)`": lambda t: numpy.asarray(t),
    "`print(t)` / `repr(t)`": lambda t: float(repr(t)[len("tensor("):-1]),
    "`torch.equal`": lambda t: t if torch.equal(t, t) else -t,
    "`storage[i]`": lambda t: t.untyped_storage()[0] * 0 + t,  # a byte of the storage read, the tensor given back
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_16_2_refuses_a_host_read_by_every_route(route):
    result = exercises.verdict("16.2", logger_reading_by(ROUTES[route]))
    assert (result.status, result.reason) == ("wrong", "host-read"), result
    assert f"first by {route}" in result.en and route in result.zh


def test_16_2_refuses_if_on_a_tensor_and_print():
    def with_if(history, spikes, step, model, limit):  # the natural answer: bool(norm > limit) is a read
        norm = norm_of(model)
        history[step % len(history)] = norm
        if norm > limit:
            spikes += 1

    def printing(history, spikes, step, model, limit):
        history[step % len(history)] = norm_of(model)
        spikes += history[step % len(history)] > limit
        print(history[step % len(history)])

    assert "first by `if t:` / `bool(t)`" in exercises.verdict("16.2", with_if).en
    assert "first by `print(t)` / `str(t)`" in exercises.verdict("16.2", printing).en


def test_host_reads_are_allowed_where_the_task_does_not_forbid_them():
    """00.1's reference answer returns ``int(...)`` of a tensor; and the interception is gone after 16.2's check."""
    tolist = torch.Tensor.tolist
    assert exercises.verdict("16.2", logger_reading_by(ROUTES["`.tolist()`"])).reason == "host-read"
    assert torch.Tensor.tolist is tolist and "item" not in vars(torch.Tensor)
    assert exercises.verdict("00.1", reference_answer("00.1")).status == "correct"


# ---- 16.1, 16.2, 17.x: the leaks of the review, written as a learner writes them -------------------------------

MODELS = []


def keeps_every_model(model, lr, micro_batches):
    MODELS.append(model)
    return reference_answer("16.1")(model, lr, micro_batches)


HISTORY = []


def unbounded_history(history, spikes, step, model, limit):
    norm = norm_of(model)
    HISTORY.append(norm)  # every step's norm, for ever
    history[step % len(history)] = norm
    spikes += norm > limit


def test_16_1_refuses_a_list_that_keeps_every_model_alive():
    MODELS.clear()
    result = exercises.verdict("16.1", keeps_every_model)
    assert (result.status, result.reason) == ("wrong", "kept-reference"), result
    assert "through the global `MODELS`" in result.en and "全局变量 `MODELS`" in result.zh
    MODELS.clear()


def test_16_2_refuses_an_unbounded_history():
    HISTORY.clear()
    result = exercises.verdict("16.2", unbounded_history)
    HISTORY.clear()
    assert (result.status, result.reason) == ("wrong", "kept-reference"), result  # it keeps the check's tensors
    steps = []

    def counts_steps(history, spikes, step, model, limit):  # keeps no tensor: only grows
        steps.append(step)
        reference_answer("16.2")(history, spikes, step, model, limit)

    result = exercises.verdict("16.2", counts_steps)
    assert (result.status, result.reason) == ("wrong", "growth"), result


def test_a_bounded_cache_is_not_growth():
    cache = {}

    def caches_its_limit(history, spikes, step, model, limit):  # the same entries at every check
        cache[step] = step % 5
        reference_answer("16.2")(history, spikes, step, model, limit)

    assert exercises.verdict("16.2", caches_its_limit).status == "correct"


def test_a_bounded_buffer_is_not_growth_and_is_still_looked_into():
    """The growth verdict tells the learner to use a fixed-size buffer; a ``deque`` with a ``maxlen`` is one, and it
    was called growth while it filled up (12 items after one check, 24 after two). It counts as full now, in a closure
    as in a module; an unbounded deque still grows, and a check's tensor kept in a bounded one is still found."""
    import collections
    import sys

    module = sys.modules[__name__]
    buffer = collections.deque(maxlen=1000)
    module.RECENT_STEPS = collections.deque(maxlen=1000)
    solution = reference_answer("16.2")

    def in_a_closure(history, spikes, step, model, limit):
        buffer.append(step)
        solution(history, spikes, step, model, limit)

    def in_a_module(history, spikes, step, model, limit):
        module.RECENT_STEPS.append(step)
        solution(history, spikes, step, model, limit)

    recent, history_of_steps = collections.deque(maxlen=1000), collections.deque()

    def unbounded(history, spikes, step, model, limit):
        history_of_steps.append(step)
        solution(history, spikes, step, model, limit)

    def keeps_a_weight(history, spikes, step, model, limit, recent=recent):
        recent.append(next(model.parameters()))
        solution(history, spikes, step, model, limit)

    try:
        assert exercises.verdict("16.2", in_a_closure).status == "correct"
        assert exercises.verdict("16.2", in_a_module).status == "correct"
        result = exercises.verdict("16.2", unbounded)
        assert (result.status, result.reason) == ("wrong", "growth"), result
        assert "collections.deque(maxlen=n)" in result.en and "collections.deque(maxlen=n)" in result.zh  # the advice
        result = exercises.verdict("16.2", keeps_a_weight)
        assert (result.status, result.reason) == ("wrong", "kept-reference"), result
    finally:
        del module.RECENT_STEPS


def test_17_1_patching_the_checker_is_refused_and_undone():
    from hooklab.course.exercises import nb17
    silent = nb17._silent

    def cheat(cells):
        nb17._silent = lambda cells: []
        return []

    def cheat_with_the_course(cells):  # a function of the course's own in its place is a replacement too
        nb17._silent = nb17._records
        return []

    for answer in (cheat, cheat_with_the_course):
        result = exercises.verdict("17.1", answer)
        assert (result.status, result.reason) == ("wrong", "patched-checker"), result
        assert "nb17._silent" in result.en and nb17._silent is silent


def test_17_2_an_answer_that_runs_the_probes_is_refused():
    def observes(h):
        from hooklab.course import hook_matrix
        hook_matrix.observe("forward-hook", "eager")
        reference_answer("17.2")(h)

    result = exercises.verdict("17.2", observes)
    assert (result.status, result.reason) == ("wrong", "answer-machinery"), result
    assert "`hook_matrix.observe` (forward-hook@eager)" in result.en


def test_the_reference_solutions_functions_are_refused_as_an_answer_or_inside_one():
    from hooklab.course.exercises.solutions import nb17 as solutions  # imported before the check, as in a notebook

    def wraps_the_solution(cells):
        return solutions_function(cells)

    solutions_function = solutions.silent_cells
    for answer in (solutions.silent_cells, wraps_the_solution):
        result = exercises.verdict("17.1", answer)
        assert (result.status, result.reason) == ("wrong", "answer-machinery"), result
        assert "the reference solution's function `silent_cells`" in result.en and "参考答案" in result.zh
    assert "through the closure variable `solutions_function`" in exercises.verdict("17.1", wraps_the_solution).en


def test_an_answer_that_calls_the_checker_is_refused():
    def asks_the_checker(model, x):
        assert exercises.verdict("00.1", lambda model, x: 0).status == "wrong"
        return reference_answer("00.1")(model, x)

    result = exercises.verdict("00.1", asks_the_checker)
    assert (result.status, result.reason) == ("wrong", "answer-machinery"), result


# ---- F4: what Python keeps process-wide is put back; a thread left running is named -----------------------------

def test_the_isolation_puts_back_what_python_keeps_process_wide(tmp_path):
    right = reference_answer("17.1")
    before = (signal.getsignal(signal.SIGINT), os.getcwd(), sys.getrecursionlimit(), list(warnings.filters),
              logging.root.manager.disable)

    def changes_everything(cells):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.chdir(tmp_path)
        sys.setrecursionlimit(500)
        warnings.simplefilter("error")
        logging.disable(logging.CRITICAL)
        return right(cells)

    assert exercises.verdict("17.1", changes_everything).status == "correct"
    assert (signal.getsignal(signal.SIGINT), os.getcwd(), sys.getrecursionlimit(), list(warnings.filters),
            logging.root.manager.disable) == before


def test_a_thread_left_running_is_named_and_not_stopped():
    right, release = reference_answer("17.1"), threading.Event()

    def starts_a_thread(cells):
        threading.Thread(target=release.wait, args=(30,), name="learners-sleeper", daemon=True).start()
        return right(cells)

    try:
        result = exercises.verdict("17.1", starts_a_thread)
        assert (result.status, result.reason) == ("wrong", "thread-left"), result
        assert "learners-sleeper" in result.en and "learners-sleeper" in result.zh
        assert any(t.name == "learners-sleeper" and t.is_alive() for t in threading.enumerate())  # not stopped
    finally:
        release.set()
