"""Every exercise: an answer that leaves a global hook behind is wrong (``global-hook-left``), and the check leaves
nothing in the learner's process: no global hook, torch's global-backward flag, the environment and the saved-tensor
hooks as they were (hooklab.course.exercises._Isolation, for every checker at once).

Review round 3, N-c: 13 of 41 checkers judged such an answer "correct" and left the hook in the learner's kernel
(13.2 with ``register_module_forward_hook`` instead of one hook per module); N-e: the 12.x checkers left
``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` set; N-d: without the course's extra, 04.3 and 12.x ended on "an
unexpected ModuleNotFoundError" instead of saying how to install it.
"""
import functools
import os
import re
import sys

import pytest
import torch
import torch.optim.optimizer as optimizer_globals
from torch.nn.modules import module as module_globals

from exercise_support import reference_answer
from hooklab import _torch_internals as internals
from hooklab.course import exercises
from hooklab.course.exercises._support import global_full_backward_flag, global_hook_ids

LEAK_VARIABLE = "HOOKLAB_TEST_LEFT_BY_AN_ANSWER"


def registered_keys():
    exercises._load_all()
    return sorted(exercises._REGISTRY)


def noop(*args, **kwargs):
    return None


# every kind of global hook a learner can register (one of each, doing nothing), and how
GLOBAL_HOOKS = {
    "forward_pre": lambda: module_globals.register_module_forward_pre_hook(noop),
    "forward": lambda: module_globals.register_module_forward_hook(noop),
    "forward_with_kwargs": lambda: module_globals.register_module_forward_hook(noop, with_kwargs=True,
                                                                               always_call=True),
    "backward_pre": lambda: module_globals.register_module_full_backward_pre_hook(noop),
    "full_backward": lambda: module_globals.register_module_full_backward_hook(noop),
    "old_style_backward": lambda: module_globals.register_module_backward_hook(noop),
    "module_registration": lambda: module_globals.register_module_module_registration_hook(noop),
    "parameter_registration": lambda: module_globals.register_module_parameter_registration_hook(noop),
    "buffer_registration": lambda: module_globals.register_module_buffer_registration_hook(noop),
    "optimizer_step_pre": lambda: optimizer_globals.register_optimizer_step_pre_hook(noop),
    "optimizer_step_post": lambda: optimizer_globals.register_optimizer_step_post_hook(noop),
}
# the kinds left by every answer of the test over all exercises: those that cannot change what a module computes or
# how autograd runs it (a global backward hook wraps every module's output, which some checkers' in-place steps
# refuse: that is tested alone, on one exercise, below)
HARMLESS = ("forward_pre", "forward", "module_registration", "parameter_registration", "buffer_registration",
            "optimizer_step_pre", "optimizer_step_post")


class Calls:
    """Where the leaky answer ran: in this process (its hooks stay here) or in a worker process of the checker
    (they die with it); each call appends its process id to a file, which every process can write."""

    def __init__(self, path):
        self.path, self.pid = path, os.getpid()
        path.write_text("")

    def note(self):
        with open(self.path, "a") as log:
            log.write(f"{os.getpid()}\n")
        return os.getpid() == self.pid

    def _pids(self):
        return [int(line) for line in self.path.read_text().split()]

    @property
    def here(self):
        return sum(pid == self.pid for pid in self._pids())

    @property
    def elsewhere(self):
        return sum(pid != self.pid for pid in self._pids())


def leaving(kinds, calls):
    """What a leaky answer does each time it runs: register one global hook of each kind, set an environment
    variable, and forget both."""
    def leave():
        if calls.note():
            for kind in kinds:
                GLOBAL_HOOKS[kind]()
            os.environ[LEAK_VARIABLE] = "1"
    return leave


def leaky_function(answer, leave):
    @functools.wraps(answer)
    def leaky(*args, **kwargs):
        leave()
        return answer(*args, **kwargs)
    return leaky


class LeakyList(list):
    """A value answer whose reading leaves hooks behind (its ``==``, ``len``, iteration and indexing)."""

    def __init__(self, items, leave):
        super().__init__(items)
        self.leave = leave

    def __eq__(self, other):
        self.leave()
        return list.__eq__(self, other)

    __hash__ = None

    def __len__(self):
        self.leave()
        return list.__len__(self)

    def __iter__(self):
        self.leave()
        return list.__iter__(self)

    def __getitem__(self, index):
        self.leave()
        return list.__getitem__(self, index)


class LeakyDict(dict):
    def __init__(self, items, leave):
        super().__init__(items)
        self.leave = leave

    def __eq__(self, other):
        self.leave()
        return dict.__eq__(self, other)

    __hash__ = None

    def __iter__(self):
        self.leave()
        return dict.__iter__(self)

    def __getitem__(self, key):
        self.leave()
        return dict.__getitem__(self, key)

    def keys(self):
        self.leave()
        return dict.keys(self)

    def items(self):
        self.leave()
        return dict.items(self)

    def get(self, key, default=None):
        self.leave()
        return dict.get(self, key, default)


def leaky_answer(key, kinds, calls):
    answer, leave = reference_answer(key), leaving(kinds, calls)
    if callable(answer):
        return leaky_function(answer, leave)
    if isinstance(answer, dict):
        return LeakyDict(answer, leave)
    assert isinstance(answer, list), f"{key}: a value answer of type {type(answer).__name__}: add a leaky twin"
    return LeakyList(answer, leave)


def process_state():
    """What a check must leave as it found it, in the learner's process."""
    return {"global hooks": global_hook_ids(), "global backward flag": global_full_backward_flag(),
            "saved-tensor hooks": internals.top_saved_tensors_hooks(), "environment": dict(os.environ),
            "grad mode": torch.is_grad_enabled(), "default dtype": torch.get_default_dtype()}


@pytest.fixture
def clean_environment(monkeypatch):
    """The 12.x checkers set HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE if unset: start without them, to see them go."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", LEAK_VARIABLE):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize("key", registered_keys())
def test_an_answer_that_leaves_global_hooks_is_wrong_and_nothing_is_left(key, tmp_path):
    if "torchvision" in exercises._get(key).solution or key == "04.3":
        pytest.importorskip("torchvision")
    before = process_state()
    calls = Calls(tmp_path / "calls")
    result = exercises.verdict(key, leaky_answer(key, HARMLESS, calls))
    assert process_state() == before  # nothing left in the learner's process, whatever the verdict
    assert calls.here or calls.elsewhere, f"{key}: the checker never used the answer"
    if calls.here:
        if result.reason == "global-hook":  # 08.2, 09.2: the checker names this very mistake (and removes the hook)
            assert result.status == "wrong" and "global" in result.en and "全局" in result.zh, result
        else:
            assert (result.status, result.reason) == ("wrong", "global-hook-left"), result
            assert "the check has removed it" in result.en and "检查已把它删除" in result.zh
    else:  # run only in worker processes (10.1, 14.3): the hooks died with them, and the answer is right
        assert result.status == "correct", result


@pytest.mark.parametrize("kind", sorted(GLOBAL_HOOKS))
def test_each_kind_of_global_hook_is_caught_and_removed(kind, tmp_path):
    """One exercise, each kind alone; the global backward kinds too, which wrap every module's output and set torch's
    flag for old-style / full backward hooks (put back as it was)."""
    before = process_state()
    calls = Calls(tmp_path / "calls")
    result = exercises.verdict("00.1", leaky_answer("00.1", (kind,), calls))
    assert calls.here and (result.status, result.reason) == ("wrong", "global-hook-left"), result
    assert process_state() == before


def test_the_reference_answers_leave_nothing_either(clean_environment):
    """The checkers' own changes are put back too: 12.x set HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE for good."""
    pytest.importorskip("transformers")
    before = process_state()
    for key in ("12.1", "12.2", "12.3"):
        assert exercises.verdict(key, reference_answer(key), strict=True).status == "correct"
        assert process_state() == before, key
    assert "HF_HUB_OFFLINE" not in os.environ and "TRANSFORMERS_OFFLINE" not in os.environ


@pytest.mark.parametrize("key, package", [("04.3", "torchvision"), ("12.1", "transformers"), ("12.2", "transformers"),
                                          ("12.3", "transformers")])
def test_without_the_course_extra_a_check_says_how_to_install_it(key, package, monkeypatch, capsys):
    """N-d: without the course's extra these checks stopped on "an unexpected ModuleNotFoundError ... this may be a
    bug in the checker"; they now say what export_notebook and the course's model say."""
    from hooklab.course import install_command
    answer = reference_answer(key)
    for name in [package, *(n for n in sys.modules if n.startswith(package + "."))]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing it raises ModuleNotFoundError
    with pytest.raises(ImportError, match=rf"the check of exercise {key} needs {package}, which is not installed: "
                                          rf"it comes with the course's extra, {re.escape(install_command())}$"):
        exercises.verdict(key, answer)
    exercises.check(key, answer)
    printed = capsys.readouterr().out
    assert printed.count("\n") <= 2 and install_command() in printed and "Traceback" not in printed
