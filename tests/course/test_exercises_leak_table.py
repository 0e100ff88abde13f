"""The leak harness against every answer of review round six's table (11 exercises; the eleven it accepted, the ones it
caught, and the correct unusual ones, which must stay correct), each written here as a learner writes it (this file is
outside the package: the harness treats it as the learner's code) and judged by the real checker
(:func:`hooklab.course.exercises.verdict`, what ``course.check`` runs).

The harness refuses by mechanism (``hooklab/course/exercises/_harness.py``, ``_namespaces.py``): a profile function
sees every call of a tensor's functions written in C however they are reached (``Tensor.tolist`` bound before the
check, ``torch._C.TensorBase.tolist``, ``data_ptr``, ``numpy.from_dlpack``); after the check the objects it made and
that are still alive are traced to the module or class attribute that holds them (``builtins``, ``torch``,
``__main__``, ``torch.optim.SGD._kept``); every function of every loaded module and class is noted before the answer
runs and put back after it (``RemovableHandle.remove``); 13.2 runs models of two depths and wants a hook; 17.3 refuses
a prediction read from the matrix's record by the code that asks for the check.
"""
import builtins
import collections
import ctypes
import functools
import json
import math
import operator
import sys
import weakref
from pathlib import Path

import numpy
import pytest
import torch
import torch.nn.modules.module as module_globals
from torch import nn

import hooklab
from exercise_support import reference_answer
from hooklab.course import exercises
from hooklab.course.hook_matrix import Observation

RECORD = Path(__file__).resolve().parents[2] / "docs" / "hook_matrix.json"
KEYS_17_3 = ("param-hook@used-twice", "full-backward-hook@used-twice", "forward-hook@apply", "forward-hook@checkpoint")


# ---- 16.2: host reads (the task forbids them) ---------------------------------------------------------------------

_FLOAT = torch.Tensor.__float__   # bound when this file is imported, long before any check
_TOLIST = torch.Tensor.tolist


def norm_of(model):
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]))


def reading(read):
    """16.2 answered right, except that it also reads the norm on the host by ``read``."""
    def log_norm(history, spikes, step, model, limit):
        norm = norm_of(model)
        history[step % len(history)] = norm
        read(norm)
        spikes += norm > limit
    return log_norm


HOST_READS = {
    "Tensor.__float__ called directly": lambda t: torch.Tensor.__float__(t),
    "Tensor.__float__ bound before the check": lambda t: _FLOAT(t),
    "Tensor.tolist bound before the check": lambda t: _TOLIST(t),
    "torch._C.TensorBase.tolist": lambda t: torch._C.TensorBase.tolist(t),
    "torch._C.TensorBase.item": lambda t: torch._C.TensorBase.item(t),
    "memoryview(t.numpy())": lambda t: memoryview(t.numpy()),
    "str(t)": str,
    "an f-string of t": lambda t: f"{t}",
    "operator.methodcaller('item')": operator.methodcaller("item"),
    "numpy.from_dlpack(t)": lambda t: numpy.from_dlpack(t),
    "ctypes.string_at(t.data_ptr())": lambda t: ctypes.string_at(t.data_ptr(), 4),
    "bytes(t.untyped_storage())": lambda t: bytes(t.untyped_storage()),
    "getattr(t, 'numpy')(force=True)": lambda t: t.numpy(force=True),
    "math.isclose(t, 0.0)": lambda t: math.isclose(t, 0.0),
}


def log_norm_unusual(history, spikes, step, model, limit):
    """Right: index_copy_, torch.where and add_, nothing read on the host."""
    norm = norm_of(model)
    history.index_copy_(0, torch.tensor([step % history.numel()]), norm.reshape(1))
    spikes.add_(torch.where(norm > limit, 1.0, 0.0))


def history_in_torch(history, spikes, step, model, limit):
    """Every step's norm appended to a list kept in torch's own module dict."""
    torch.__dict__.setdefault("_my_history", []).append(norm_of(model))
    reference_answer("16.2")(history, spikes, step, model, limit)


def steps_in_torch(history, spikes, step, model, limit):
    """Every step's number (no tensor) appended to a list kept in torch's module dict: grows at every check."""
    torch.__dict__.setdefault("_my_steps", []).append(step)
    reference_answer("16.2")(history, spikes, step, model, limit)


# ---- 16.1: the optimizer in backward ------------------------------------------------------------------------------

def keeps_by_default(model, lr, micro_batches, _keep=[]):  # noqa: B006  the leak under test
    _keep.append(model)
    return reference_answer("16.1")(model, lr, micro_batches)


CACHE = {}


def keeps_by_id(model, lr, micro_batches):
    CACHE[id(model)] = model
    return reference_answer("16.1")(model, lr, micro_batches)


def keeps_in_builtins(model, lr, micro_batches):
    builtins.__dict__.setdefault("_kept_models", []).append(model)
    return reference_answer("16.1")(model, lr, micro_batches)


def keeps_on_a_library_class(model, lr, micro_batches):
    if "_kept" not in vars(torch.optim.SGD):
        torch.optim.SGD._kept = []
    torch.optim.SGD._kept.append(model)
    return reference_answer("16.1")(model, lr, micro_batches)


@functools.cache
def opt_for(p, lr):
    return torch.optim.SGD([p], lr=lr)


def cached_optimizers(model, lr, micro_batches):
    arrived = {p: 0 for p in model.parameters()}

    def step(p):
        arrived[p] += 1
        if arrived[p] % micro_batches == 0:
            opt_for(p, lr).step()
            p.grad = None

    scope = hooklab.HookScope()
    for p in model.parameters():
        scope.add(p.register_post_accumulate_grad_hook(step))
    return scope


def cycle_the_collector_frees(model, lr, micro_batches):
    model._me = [model]  # a cycle: freed by the collector, not a leak
    return reference_answer("16.1")(model, lr, micro_batches)


def patches_post_accumulate(model, lr, micro_batches):
    original = torch.Tensor.register_post_accumulate_grad_hook
    torch.Tensor.register_post_accumulate_grad_hook = lambda self, hook: original(self, hook)
    return reference_answer("16.1")(model, lr, micro_batches)


def patches_remove(model, lr, micro_batches):
    torch.utils.hooks.RemovableHandle.remove = lambda self: None
    return reference_answer("16.1")(model, lr, micro_batches)


class ScopeMaker:
    """Right: a callable object that returns a HookScope."""

    def __call__(self, model, lr, micro_batches):
        return reference_answer("16.1")(model, lr, micro_batches)


# ---- 13.1, 13.2 -------------------------------------------------------------------------------------------------

def hard_coded_producer(model, x):
    return ("0", 1)


@functools.cache
def names_of(model):
    return {m: n for n, m in model.named_modules() if n}


def cached_names(model, x):
    names, calls, found = names_of(model), {}, []

    def count(module, args):
        if module in names:
            calls[names[module]] = calls.get(names[module], 0) + 1

    def look(module, args, output):
        outputs = output if isinstance(output, tuple) else (output,)
        if module in names and not found and not all(torch.isfinite(t).all() for t in outputs):
            found.append((names[module], calls[names[module]]))

    with hooklab.HookScope() as scope:
        for m in model.modules():
            scope.add(m.register_forward_pre_hook(count))
            scope.add(m.register_forward_hook(look))
        model(x)
    return found[0] if found else None


def global_hooks_producer(model, x):
    """Right: one global pre-hook and one global hook, the pair built as a list then made a tuple."""
    names = {m: n for n, m in model.named_modules() if n}
    calls, found = {}, []

    def count(module, args):
        if module in names:
            calls[names[module]] = calls.get(names[module], 0) + 1

    def look(module, args, output):
        outputs = output if isinstance(output, tuple) else (output,)
        if module in names and not found and not all(torch.isfinite(t).all() for t in outputs):
            found.append([names[module], calls[names[module]]])

    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_pre_hook(count))
        scope.add(module_globals.register_module_forward_hook(look))
        model(x)
    return tuple(found[0]) if found else None


def keyed_by_submodule(model):
    counts, names = {}, {m: n for n, m in model.named_modules() if n}

    def hook(module, args, output):
        counts[names[module]] = counts.get(names[module], 0) + 1

    for m in names:
        m.register_forward_hook(hook)
    return counts


def weak_keys(model):
    """Right: the names in a WeakKeyDictionary (no strong reference to the submodules)."""
    names = weakref.WeakKeyDictionary({m: n for n, m in model.named_modules() if n})
    counts = {}

    def hook(module, args, output):
        counts[names[module]] = counts.get(names[module], 0) + 1

    for m in list(names.keys()):
        m.register_forward_hook(hook)
    return counts


def hard_coded_counts(model):
    return {"0": 2, "1": 2, "2": 2}


# ---- 17.1, 17.2, 17.3 -----------------------------------------------------------------------------------------------

def silent_from_the_record(cells):
    record = json.loads(RECORD.read_text(encoding="utf-8"))["cells"]
    return sorted(k for k, c in record.items() if c.get("status") == "observed" and c.get("calls") == 0)


def silent_with_filter(cells):
    """Right: filter and .get."""
    return sorted(filter(lambda k: cells[k].get("status") == "observed" and cells[k].get("calls") == 0
                         and not cells[k].get("error"), cells))


def patches_judge(cells):
    from hooklab.course.exercises import nb17
    nb17._judge_silent = lambda got, cells: None
    return []


def patches_sorted(cells):
    builtins.sorted = lambda values, **kwargs: list(values)
    return reference_answer("17.1")(cells)


def patches_register_hook(h):
    original = torch.Tensor.register_hook
    torch.Tensor.register_hook = lambda self, hook: original(self, hook)
    return reference_answer("17.2")(h)


def never_removes(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


def removes_through_a_scope(h):
    """Right: the handles handed to a HookScope, removed by it before backward."""
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    scope = hooklab.HookScope()
    for handle in rig.handles:
        scope.add(handle)
    scope.remove()
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


def predictions_from_the_record():
    cells = json.loads(RECORD.read_text(encoding="utf-8"))["cells"]
    return {key: cells[key]["calls"] for key in KEYS_17_3}


def predictions_through_from_dict():
    with open(RECORD, encoding="utf-8") as record:
        cells = json.load(record)["cells"]
    return {key: Observation.from_dict(cells[key]).calls for key in KEYS_17_3}


# ---- 00.1, 03.3, 05.2, 08.1 ----------------------------------------------------------------------------------------

def zeros_as_a_tensor(model, x):
    counts = []
    with hooklab.HookScope() as scope:
        scope.add(model[2].register_forward_pre_hook(lambda module, args: counts.append((args[0] == 0).sum())))
        model(x)
    return counts[0]


def zeros_without_a_hook(model, x):
    with torch.no_grad():
        return int((torch.relu(model[0](x)) == 0).sum())


def counts_by_apply(model, x):
    counts = collections.Counter()
    with hooklab.HookScope() as scope:
        model.apply(lambda m: scope.add(m.register_forward_hook(
            lambda module, args, output: counts.update([type(module).__name__]))))
        model(x)
    return dict(counts)


SEEN_MODELS = []


def keeps_every_model(model, x):
    SEEN_MODELS.append(model)
    return reference_answer("03.3")(model, x)


SEEN = {}


def keeps_x_and_y(model, x, y):
    SEEN[len(SEEN) % 1] = (x, y)
    return reference_answer("05.2")(model, x, y)


def norms_without_a_hook(model, x, y):
    """Right: one norm per layer (weight and bias together), read from .grad after backward."""
    torch.nn.functional.cross_entropy(model(x), y).backward()
    norms = []
    for m in model.modules():
        grads = [p.grad.flatten() for p in m.parameters(recurse=False) if p.grad is not None]
        if grads:
            norms.append(float(torch.linalg.vector_norm(torch.cat(grads))))
    return norms


def shapes_by_one_global_hook(model, x):
    names, shapes = {m: n for n, m in model.named_modules()}, {}

    def hook(module, args, output):
        if isinstance(module, nn.Linear) and module in names:
            shapes[names[module]] = tuple(output.shape)

    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(hook))
        model(x)
    return shapes


def keeps_on_main(model, x):
    main = sys.modules["__main__"]
    if not hasattr(main, "_models"):
        main._models = []
    main._models.append(model)
    return reference_answer("08.1")(model, x)


# ---- the table ------------------------------------------------------------------------------------------------------

def _row(key, name, answer, status, reason=None, says=None):
    """``answer``: the answer, or a function of no argument that makes it (a value read from the record is read when
    the row runs, by this file: the code that asks for the check)."""
    return pytest.param(key, answer, status, reason, says, id=f"{key} {name}")


TABLE = [
    *[_row("16.2", name, reading(read), "wrong", "host-read", "host") for name, read in HOST_READS.items()
      if name != "memoryview(t.numpy())"],
    _row("16.2", "memoryview(t.numpy())", reading(HOST_READS["memoryview(t.numpy())"]), "wrong", "host-read",
         "`.numpy()`"),
    _row("16.2", "memoryview(t)", reading(memoryview), "wrong", "raised", "memoryview"),
    _row("16.2", "correct, unusual (index_copy_, torch.where, add_)", log_norm_unusual, "correct"),
    _row("16.2", "unbounded history in torch.__dict__", history_in_torch, "wrong", "kept-reference",
         "`torch._my_history`"),
    _row("16.2", "unbounded step list in torch.__dict__", steps_in_torch, "wrong", "growth", "`torch._my_steps`"),
    _row("16.1", "closure default keeps every model", keeps_by_default, "wrong", "kept-reference",
         "a default argument of `keeps_by_default`"),
    _row("16.1", "global dict keyed by id(model)", keeps_by_id, "wrong", "kept-reference", "the global `CACHE`"),
    _row("16.1", "models kept in builtins", keeps_in_builtins, "wrong", "kept-reference", "`builtins._kept_models`"),
    _row("16.1", "models kept on torch.optim.SGD._kept", keeps_on_a_library_class, "wrong", "kept-reference",
         "SGD._kept"),
    _row("16.1", "lru_cache of optimizers keyed by parameter", cached_optimizers, "wrong", "kept-reference",
         "the global `opt_for`"),
    _row("16.1", "a cycle the collector frees", cycle_the_collector_frees, "correct"),
    _row("16.1", "patched Tensor.register_post_accumulate_grad_hook", patches_post_accumulate, "wrong",
         "patched-checker", "register_post_accumulate_grad_hook"),
    _row("16.1", "patched RemovableHandle.remove", patches_remove, "wrong", "patched-checker",
         "RemovableHandle.remove"),
    _row("16.1", "correct, unusual: a callable object", ScopeMaker(), "correct"),
    _row("13.1", "hard-coded ('0', 1)", hard_coded_producer, "wrong", "module"),
    _row("13.1", "lru_cache'd helper keyed by the model", cached_names, "wrong", "kept-reference",
         "the global `names_of`"),
    _row("13.1", "correct, unusual: global hooks, tuple from a list", global_hooks_producer, "correct"),
    _row("13.2", "dict keyed by the submodules (cycle)", keyed_by_submodule, "wrong", "submodule-cycle"),
    _row("13.2", "correct, unusual: WeakKeyDictionary", weak_keys, "correct"),
    _row("13.2", "hard-coded dict, no hook", hard_coded_counts, "wrong", "no-hook", "no forward hook"),
    _row("17.1", "read from docs/hook_matrix.json", silent_from_the_record, "wrong", "answer-machinery",
         "record"),
    _row("17.1", "correct, unusual: filter and .get", silent_with_filter, "correct"),
    _row("17.1", "patched nb17._judge_silent", patches_judge, "wrong", "patched-checker", "_judge_silent"),
    _row("17.1", "patched builtins.sorted", patches_sorted, "wrong", "patched-checker", "builtins.sorted"),
    _row("17.2", "patched Tensor.register_hook", patches_register_hook, "wrong", "patched-checker",
         "register_hook"),
    _row("17.2", "handles not removed", never_removes, "wrong"),
    _row("17.2", "correct, unusual: removed through a HookScope", removes_through_a_scope, "correct"),
    _row("17.3", "read from docs/hook_matrix.json", predictions_from_the_record, "wrong", "answer-machinery",
         "docs/hook_matrix.json"),
    _row("17.3", "read through Observation.from_dict(record)", predictions_through_from_dict, "wrong",
         "answer-machinery", "docs/hook_matrix.json"),
    _row("17.3", "hard-coded right prediction", lambda: dict(reference_answer("17.3")), "correct"),
    _row("17.3", "four ints as a list", lambda: [1, 2, 2, 2], "correct"),
    _row("17.3", "wrong prediction", lambda: [1, 1, 2, 2], "wrong", "per-call"),
    _row("17.3", "True values", lambda: [True, 2, 2, 2], "wrong", "four-ints"),
    _row("00.1", "hard-coded 3", lambda model, x: 3, "wrong", "count"),
    _row("00.1", "a 0-d tensor from a pre-hook", zeros_as_a_tensor, "wrong", "tensor-not-int"),
    _row("00.1", "no hook at all (the value is right)", zeros_without_a_hook, "correct"),
    _row("03.3", "correct, unusual: model.apply and Counter", counts_by_apply, "correct"),
    _row("03.3", "a global list keeps every model", keeps_every_model, "wrong", "kept-reference",
         "the global `SEEN_MODELS`"),
    _row("05.2", "a global dict keeps x and y", keeps_x_and_y, "wrong", "kept-reference", "the global `SEEN`"),
    _row("05.2", "correct, unusual: no hook, .grad per layer", norms_without_a_hook, "correct"),
    _row("08.1", "correct, unusual: one global hook filtered by isinstance", shapes_by_one_global_hook, "correct"),
    _row("08.1", "models kept on sys.modules['__main__']", keeps_on_main, "wrong", "kept-reference",
         "`__main__._models`"),
]


@pytest.fixture
def clean_namespaces():
    """What the leaky answers leave in the process's namespaces, removed after each row."""
    sorted_before, remove_before = builtins.sorted, torch.utils.hooks.RemovableHandle.remove
    yield
    builtins.__dict__.pop("_kept_models", None)
    torch.__dict__.pop("_my_history", None)
    torch.__dict__.pop("_my_steps", None)
    if "_kept" in vars(torch.optim.SGD):
        del torch.optim.SGD._kept
    sys.modules["__main__"].__dict__.pop("_models", None)
    CACHE.clear(), SEEN.clear(), SEEN_MODELS.clear(), opt_for.cache_clear(), names_of.cache_clear()
    assert builtins.sorted is sorted_before and torch.utils.hooks.RemovableHandle.remove is remove_before


@pytest.mark.usefixtures("clean_namespaces")
@pytest.mark.parametrize("key, answer, status, reason, says", TABLE)
def test_every_answer_of_the_table(key, answer, status, reason, says):
    if exercises._get(key).data:
        answer = answer()  # read here, by the code that asks for the check
    result = exercises.verdict(key, answer)
    assert result.status == status, result
    if reason is not None:
        assert result.reason == reason, result
    if says is not None:
        assert says in result.en, result


def test_the_table_holds_every_answer_of_the_review():
    """Every answer of the review's table (45 rows over 11 exercises, four of which name two answers and one three: 54
    answers, which its text counts as 52 over 12 exercises), and one more here: a history of step numbers, which only
    grows."""
    assert len(TABLE) == 55
    assert len({row.values[0] for row in TABLE}) == 11


def test_a_patched_remove_is_blamed_and_put_back_and_the_next_answer_is_judged_right(clean_namespaces):
    remove = torch.utils.hooks.RemovableHandle.remove
    result = exercises.verdict("16.1", patches_remove)
    assert (result.status, result.reason) == ("wrong", "patched-checker"), result
    assert "torch.utils.hooks.RemovableHandle.remove" in result.en and "RemovableHandle.remove" in result.zh
    assert "hooks are still on the model" not in result.en
    assert torch.utils.hooks.RemovableHandle.remove is remove
    assert exercises.verdict("16.1", reference_answer("16.1")).status == "correct"


def test_a_host_read_bound_before_the_check_is_named_by_its_route():
    result = exercises.verdict("16.2", reading(lambda t: _TOLIST(t)))
    assert "first by `.tolist()`" in result.en, result
    result = exercises.verdict("16.2", reading(lambda t: ctypes.string_at(t.data_ptr(), 4)))
    assert "`t.data_ptr()`" in result.en, result
    assert sys.getprofile() is None  # the watch is gone after the check


def test_turning_the_watch_off_is_a_patch():
    def unwatched(history, spikes, step, model, limit):
        sys.setprofile(None)
        reading(lambda t: _TOLIST(t))(history, spikes, step, model, limit)

    result = exercises.verdict("16.2", unwatched)
    assert (result.status, result.reason) == ("wrong", "patched-checker"), result
    assert "sys.setprofile" in result.en


def test_13_2_wants_the_counts_of_each_model_it_runs():
    def counts_for_three_layers(model):  # hooks, but a fixed model in mind
        counts = {"0": 2, "1": 2, "2": 2}
        model[0].register_forward_hook(lambda *args: None)
        return counts

    result = exercises.verdict("13.2", counts_for_three_layers)
    assert (result.status, result.reason) == ("wrong", "counts"), result


def test_17_3_a_record_read_elsewhere_is_not_this_cells():
    """Notebook 17 reads the record in a cell of its own (section 1): a prediction checked from another cell (here:
    another file, ``exec``-ed) is judged on its own."""
    json.loads(RECORD.read_text(encoding="utf-8"))  # read by this file
    namespace = {"exercises": exercises, "answer": dict(reference_answer("17.3"))}
    exec(compile("result = exercises.verdict('17.3', answer)", "<another cell>", "exec"), namespace)
    assert namespace["result"].status == "correct", namespace["result"]
    assert exercises.verdict("17.3", reference_answer("17.3")).reason == "answer-machinery"  # this file's read
    assert exercises.verdict("17.3", reference_answer("17.3")).status == "correct"  # forgotten once judged
