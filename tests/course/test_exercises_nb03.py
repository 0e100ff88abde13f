"""Notebook 03's exercise checkers accept right answers written differently and reject the typical wrong ones."""
import pytest
import torch
import torch.nn.modules.module as module_globals

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict


@pytest.fixture(autouse=True)
def no_global_hooks_leak():
    """A checker must clean up the global hooks a wrong answer leaves behind."""
    before = len(hooklab.hook_inventory(None))
    yield
    assert len(hooklab.hook_inventory(None)) == before


# ---- 03.1 clamp the input with a pre-hook, return the handle -----------------------------

def clamp_with_torch_clamp(module, low, high):
    def pre_hook(mod, args):
        return (torch.clamp(args[0], min=low, max=high), *args[1:])  # a whole tuple works too
    handle = module.register_forward_pre_hook(pre_hook)
    return handle


def clamp_in_a_scope_kept_open(module, low, high):
    scope = hooklab.HookScope()  # not entered: the caller's .remove() on it removes the hook
    scope.add(module.register_forward_pre_hook(lambda m, args: args[0].clamp(low, high)))
    return scope


def clamp_in_place(module, low, high):
    return module.register_forward_pre_hook(lambda m, args: args[0].clamp_(low, high))


def clamp_the_output(module, low, high):
    return module.register_forward_hook(lambda m, args, out: out.clamp(low, high))


def clamp_hard_coded(module, low, high):
    return module.register_forward_pre_hook(lambda m, args: args[0].clamp(-1, 1))


def clamp_returning_the_hook(module, low, high):
    def clamp(m, args):
        return args[0].clamp(low, high)
    module.register_forward_pre_hook(clamp)
    return clamp


def clamp_inside_with_block(module, low, high):
    with hooklab.HookScope() as scope:
        handle = scope.add(module.register_forward_pre_hook(lambda m, args: args[0].clamp(low, high)))
    return handle  # already removed when the with block ended


def clamp_registered_twice(module, low, high):
    module.register_forward_pre_hook(lambda m, args: args[0].clamp(low, high))
    return module.register_forward_pre_hook(lambda m, args: args[0].clamp(low, high))


def clamp_hook_returns_nothing(module, low, high):
    def clamp(m, args):
        args[0].clamp(low, high)  # computed, then thrown away
    return module.register_forward_pre_hook(clamp)


def clamp_forgot_return(module, low, high):
    module.register_forward_pre_hook(lambda m, args: args[0].clamp(low, high))


def clamp_with_global_hook(module, low, high):
    return module_globals.register_module_forward_pre_hook(lambda m, args: args[0].clamp(low, high))


def clamp_with_a_global_hook_on_every_linear(module, low, high):
    def clamp(m, args):
        if isinstance(m, torch.nn.Linear):                 # still every Linear of the process, not only this one
            return (torch.clamp(args[0], min=low, max=high),)
    return module_globals.register_module_forward_pre_hook(clamp)


def clamp_min_and_max_swapped(module, low, high):
    return module.register_forward_pre_hook(lambda m, args: (torch.clamp(args[0], min=high, max=low),))


@pytest.mark.parametrize("answer", [run_solution("03.1")["clamp_inputs"], clamp_with_torch_clamp,
                                    clamp_in_a_scope_kept_open])
def test_03_1_accepts_right_answers(answer):
    assert verdict("03.1", answer) == "correct"


def clamp_breaks_the_shape(module, low, high):
    return module.register_forward_pre_hook(lambda m, args: args[0][:, :1].clamp(low, high))


def clamp_and_halve(module, low, high):
    return module.register_forward_pre_hook(lambda m, args: args[0].clamp(low, high) / 2)


def clamp_by_replacing_forward(module, low, high):
    plain = module.forward
    module.forward = lambda x: plain(x.clamp(low, high))     # changes the module for good
    return module.register_forward_pre_hook(lambda m, args: None)


@pytest.mark.parametrize("answer, reason", [
    (clamp_in_place, "in-place"), (clamp_the_output, "not-a-pre-hook"), (clamp_hard_coded, "hard-coded-limits"),
    (clamp_returning_the_hook, "not-a-handle"), (clamp_inside_with_block, "removed-on-return"),
    (clamp_registered_twice, "hook-left-after-remove"), (clamp_hook_returns_nothing, "not-returned"),
    (clamp_forgot_return, "returned-none"), (clamp_with_global_hook, "global-not-on-module"),
    (clamp_with_a_global_hook_on_every_linear, "global-not-on-module"), (clamp_min_and_max_swapped, "bounds-swapped"),
    ("clamp_inputs", "not-a-function"), (clamp_breaks_the_shape, "forward-raised"), (clamp_and_halve, "output"),
    (clamp_by_replacing_forward, "module-changed")])
def test_03_1_rejects_wrong_answers(answer, reason):
    assert judged("03.1", answer) == ("wrong", reason)


def test_03_1_explains_the_with_block_and_the_missing_return():
    _, zh, en, _ = hooklab.course.exercises.verdict("03.1", clamp_inside_with_block)
    assert "HookScope" in en and "HookScope" in zh
    assert "returned None: return the handle that `register_forward_pre_hook` gave you" in \
        hooklab.course.exercises.verdict("03.1", clamp_forgot_return)[2]


def test_03_1_blank_start_is_not_solved():
    def clamp_inputs(module, low, high):
        pass
    assert verdict("03.1", clamp_inputs) == "not solved"
    assert verdict("03.1", None) == "not solved"


# ---- 03.2 double c, positional or keyword ------------------------------------------------

def double_c_by_name(module, args, kwargs):
    if "c" in kwargs:
        kwargs = dict(kwargs)
        kwargs["c"] = 2 * kwargs["c"]
        return args, kwargs
    a, b, c = args
    return (a, b, c + c), kwargs


def double_c_list_edit(module, args, kwargs):
    args, kwargs = list(args), dict(kwargs)
    if len(args) == 3:
        args[2] = args[2] * 2
    else:
        kwargs["c"] = kwargs["c"] * 2
    return tuple(args), kwargs


def double_c_positional_only(module, args, kwargs):
    return (*args[:2], args[2] * 2), kwargs  # IndexError when c is a keyword


def double_c_keyword_only(module, args, kwargs):
    if "c" in kwargs:
        return args, {**kwargs, "c": kwargs["c"] * 2}
    return None  # forgets the positional case


def double_c_in_place(module, args, kwargs):
    if len(args) > 2:
        return (*args[:2], args[2] * 2), kwargs
    kwargs["c"] *= 2  # tensor *= 2 changes the caller's c
    return args, kwargs


def double_c_by_editing_the_kwargs_dict(module, args, kwargs):
    if "c" in kwargs:
        kwargs["c"] = kwargs["c"] * 2  # a new tensor in the dict torch passes on: works for keywords
    # ... but returns None: a positional c stays as it is


def double_c_returns_only_args(module, args, kwargs):
    if len(args) > 2:
        return (*args[:2], args[2] * 2)
    return args


def double_c_by_ten(module, args, kwargs):  # copied from the notebook's shift_a_and_c
    if len(args) > 2:
        return (*args[:2], args[2] * 10), kwargs
    return args, {**kwargs, "c": kwargs["c"] * 10}


def double_a_instead(module, args, kwargs):
    return (args[0] * 2, *args[1:]), kwargs


@pytest.mark.parametrize("answer", [run_solution("03.2")["double_c"], double_c_by_name, double_c_list_edit])
def test_03_2_accepts_right_answers(answer):
    assert verdict("03.2", answer) == "correct"


def double_c_only_prints(module, args, kwargs):
    print(len(args), sorted(kwargs))                          # looks, returns None: nothing changes


@pytest.mark.parametrize("answer, reason", [
    (double_c_positional_only, "call-raised"), (double_c_keyword_only, "c-unchanged"), (double_c_in_place, "in-place"),
    (double_c_by_editing_the_kwargs_dict, "c-unchanged"), (double_c_returns_only_args, "call-raised"),
    (double_c_by_ten, "c-wrong-value"), (double_a_instead, "other-argument-changed"),
    (double_c_only_prints, "hook-returned-none")])
def test_03_2_rejects_wrong_answers(answer, reason):
    assert judged("03.2", answer) == ("wrong", reason)


def test_03_2_says_what_forward_received():
    assert "`c` multiplied by 10" in hooklab.course.exercises.verdict("03.2", double_c_by_ten)[2]
    assert "in place" in hooklab.course.exercises.verdict("03.2", double_c_in_place)[2]
    assert "`c` unchanged" in hooklab.course.exercises.verdict("03.2", double_c_keyword_only)[2]


def test_03_2_blank_start_is_not_solved():
    def double_c(module, args, kwargs):
        pass
    assert judged("03.2", double_c) == ("not solved", "hook-returned-none")
    assert verdict("03.2", None) == "not solved"


# ---- 03.3 count the calls per module class -----------------------------------------------

def count_with_local_hooks_and_counter(model, x):
    from collections import Counter
    counts = Counter()
    with hooklab.HookScope() as scope:
        for module in model.modules():  # each module once; its hook fires on every call
            scope.add(module.register_forward_pre_hook(lambda m, args: counts.update([type(m).__name__])))
        model(x)
    return counts


def count_with_global_pre_hook(model, x):
    counts = {}
    handle = module_globals.register_module_forward_pre_hook(
        lambda m, args: counts.__setitem__(type(m).__name__, counts.get(type(m).__name__, 0) + 1))
    try:
        model(x)
    finally:
        handle.remove()
    return counts


def count_modules_not_calls(model, x):
    counts = {}
    for module in model.modules():
        counts[type(module).__name__] = counts.get(type(module).__name__, 0) + 1
    return counts


def count_pre_and_post(model, x):
    counts = {}

    def count(module, *rest):
        counts[type(module).__name__] = counts.get(type(module).__name__, 0) + 1
    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_pre_hook(count))
        scope.add(module_globals.register_module_forward_hook(count))
        model(x)
    return counts


def count_leaving_global_hook(model, x):
    counts = {}
    module_globals.register_module_forward_hook(
        lambda m, args, out: counts.__setitem__(type(m).__name__, counts.get(type(m).__name__, 0) + 1))
    model(x)
    return counts


def count_children_only(model, x):
    counts = {}
    with hooklab.HookScope() as scope:
        for child in model.children():
            scope.add(child.register_forward_hook(
                lambda m, a, o: counts.__setitem__(type(m).__name__, counts.get(type(m).__name__, 0) + 1)))
        model(x)
    return counts


def count_by_module_name(model, x):
    names = {m: n for n, m in model.named_modules()}
    counts = {}
    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(
            lambda m, a, o: counts.__setitem__(names.get(m, "?"), counts.get(names.get(m, "?"), 0) + 1)))
        model(x)
    return counts


def count_keyed_by_class(model, x):
    counts = {}
    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(
            lambda m, a, o: counts.__setitem__(type(m), counts.get(type(m), 0) + 1)))
        model(x)
    return counts


@pytest.mark.parametrize("answer", [run_solution("03.3")["count_calls"], count_with_local_hooks_and_counter,
                                    count_with_global_pre_hook])
def test_03_3_accepts_right_answers(answer):
    assert verdict("03.3", answer) == "correct"


def count_as_a_list(model, x):
    names = []
    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(lambda m, a, o: names.append(type(m).__name__)))
        model(x)
    return names


def count_leaving_a_local_hook(model, x):
    counts = {}
    model.register_forward_hook(lambda m, a, o: None)
    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(
            lambda m, a, o: counts.__setitem__(type(m).__name__, counts.get(type(m).__name__, 0) + 1)))
        model(x)
    return counts


TALLY = {}


def count_into_a_module_level_dict(model, x):
    def tally(m, a, o):
        TALLY[type(m).__name__] = TALLY.get(type(m).__name__, 0) + 1   # never cleared between calls
    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(tally))
        model(x)
    return dict(TALLY)


@pytest.mark.parametrize("answer, reason", [
    (count_into_a_module_level_dict, "kept-across-calls"), (count_modules_not_calls, "counts"), (count_pre_and_post, "counts"), (count_leaving_global_hook, "global-hook-left"),
    (count_children_only, "counts"), (count_by_module_name, "counts"), (count_keyed_by_class, "keys-not-names"),
    (count_as_a_list, "not-a-dict"), (count_leaving_a_local_hook, "hook-left")])
def test_03_3_rejects_wrong_answers(answer, reason):
    assert judged("03.3", answer) == ("wrong", reason)


def test_03_3_removes_a_leaked_global_hook_and_says_so():
    before = len(hooklab.hook_inventory(None))
    _, zh, en, _ = hooklab.course.exercises.verdict("03.3", count_leaving_global_hook)
    assert "still registered" in en and "钩子" in zh
    assert len(hooklab.hook_inventory(None)) == before


def test_03_3_blank_start_is_not_solved():
    def count_calls(model, x):
        pass
    assert verdict("03.3", count_calls) == "not solved"
    assert verdict("03.3", None) == "not solved"
