"""Every exercise checker accepts right answers written differently and rejects the typical wrong ones."""
import functools

import pytest
import torch

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict
from hooklab.course import exercises
from hooklab.course.exercises import _support

# ---- 00.1 count the zeros of the ReLU output ----------------------------------------------

def zeros_by_hook_then_remove(model, x):
    found = {}
    def hook(module, args, out):
        found["n"] = (out == 0).sum()  # returns None: a returned value would replace the output

    handle = model[1].register_forward_hook(hook)
    try:
        model(x)
    finally:
        handle.remove()
    return int(found["n"])


def zeros_without_hooks(model, x):
    return int((torch.relu(model[0](x)) == 0).sum())


def zeros_leaving_hook(model, x):
    found = []
    model[1].register_forward_hook(lambda m, a, out: found.append(int((out == 0).sum())))
    model(x)
    return found[0]


def zeros_hook_returning_value(model, x):
    found = []
    with hooklab.HookScope() as scope:
        # this hook RETURNS the count, which replaces the ReLU output: the next layer then fails
        scope.add(model[1].register_forward_hook(lambda m, a, out: (out == 0).sum()))
        scope.add(model[1].register_forward_hook(lambda m, a, out: found.append(out)))
        model(x)
    return int(found[0])


def zeros_of_final_output(model, x):
    return int((model(x) == 0).sum())


def zero_fraction(model, x):
    return float((torch.relu(model[0](x)) == 0).float().mean())


def zeros_of_input(model, x):
    return int((x == 0).sum())


@pytest.mark.parametrize("answer", [run_solution("00.1")["count_relu_zeros"], zeros_by_hook_then_remove,
                                    zeros_without_hooks])
def test_00_1_accepts_right_answers(answer):
    assert verdict("00.1", answer) == "correct"


def zeros_on_the_first_linear(model, x):
    found = {}
    with hooklab.HookScope() as scope:
        scope.add(model[0].register_forward_hook(lambda m, a, out: found.update(n=int((out == 0).sum()))))
        model(x)
    return found["n"]


def zeros_seen_by_a_pre_hook(model, x):
    found = {}
    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_pre_hook(lambda m, args: found.update(n=int((args[0] == 0).sum()))))
        model(x)
    return found["n"]


def zeros_hook_returning_an_int(model, x):
    found = []
    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_hook(lambda m, a, out: found.append(int((out == 0).sum())) or found[-1]))
        model(x)
    return found[0]


def zeros_raising(model, x):
    raise ValueError("not yet")


def zeros_off_by_one(model, x):
    return zeros_without_hooks(model, x) + 1


@pytest.mark.parametrize("answer, reason", [(zeros_leaving_hook, "hook-left"),
                                            (zeros_hook_returning_value, "hook-return-replaced-output"),
                                            (zeros_hook_returning_an_int, "hook-return-replaced-output"),
                                            (zeros_of_final_output, "not-relu-output"),
                                            (zero_fraction, "fraction-not-count"),
                                            (zeros_of_input, "not-relu-output"),
                                            (zeros_on_the_first_linear, "not-relu-output"),
                                            (zeros_seen_by_a_pre_hook, "not-relu-output"),
                                            (zeros_off_by_one, "count"), (zeros_raising, "raised"), ("count_relu_zeros", "not-a-function")])
def test_00_1_rejects_wrong_answers(answer, reason):
    assert judged("00.1", answer) == ("wrong", reason)


def test_00_1_a_forgotten_global_hook_is_wrong_and_removed():
    from torch.nn.modules.module import register_module_forward_hook

    def zeros_with_global_hook(model, x):
        found = []
        register_module_forward_hook(lambda m, a, out: found.append(out) if m is model[1] else None)
        model(x)
        return int((found[0] == 0).sum())

    assert judged("00.1", zeros_with_global_hook) == ("wrong", "global-hook-left")
    assert hooklab.hook_inventory(None) == []  # the check removed it


def test_00_1_asks_for_an_int_not_a_tensor():
    def zeros_as_tensor(model, x):
        return int(zeros_by_hook_then_remove(model, x)) * torch.ones((), dtype=torch.long)

    status, zh, en, reason = hooklab.course.exercises.verdict("00.1", zeros_as_tensor)
    assert (status, reason) == ("wrong", "tensor-not-int") and "not a tensor" in en and "张量" in zh


def test_00_1_blank_start_is_not_solved():
    def count_relu_zeros(model, x):
        pass
    assert judged("00.1", count_relu_zeros) == ("not solved", "blank")
    assert judged("00.1", None) == ("not solved", "blank")


# ---- 00.2 predict the firing order ------------------------------------------------------

def test_00_2_accepts_the_real_order_as_list_or_tuple():
    order = run_solution("00.2")["my_order"]
    assert verdict("00.2", order) == "correct"
    assert verdict("00.2", tuple(order)) == "correct"


@pytest.mark.parametrize("answer, reason", [
    (["tensor", "post_accumulate_grad", "node_pre", "node_post"], "order"),  # leaf first: the usual wrong guess
    (["node_post", "node_pre", "tensor", "post_accumulate_grad"], "order"),
    (["node_pre", "node_post", "post_accumulate_grad", "tensor"], "order"),
    (["node_pre", "node_post", "tensor"], "not-the-four-names"),             # one missing
    (["node_pre", "node_post", "tensor", "tensor"], "not-the-four-names"),
    ("node_pre node_post tensor post_accumulate_grad", "not-the-four-names"),
])
def test_00_2_rejects_wrong_orders(answer, reason):
    assert judged("00.2", answer) == ("wrong", reason)


def test_00_2_blank_start_is_not_solved():
    assert judged("00.2", []) == ("not solved", "blank")


# ---- 00.3 count saved tensors -------------------------------------------------------------

def saved_with_counter_object(model, x):
    class Counter:
        n = 0

        def pack(self, t):
            self.n += 1
            return t

    counter = Counter()
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        model(x)
    return counter.n


def saved_counting_unpacks(model, x):
    n = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: n.append(1) or t):
        model(x)
    return len(n)  # unpack never runs without backward


def saved_counting_parameters(model, x):
    return len(list(model.parameters()))


def saved_always_with_grad(model, x):
    return saved_with_counter_object(model, x.detach().requires_grad_(True))


@pytest.mark.parametrize("answer", [run_solution("00.3")["count_saved"], saved_with_counter_object])
def test_00_3_accepts_right_answers(answer):
    assert verdict("00.3", answer) == "correct"


SAVED_SO_FAR = []


def saved_into_a_list_never_cleared(model, x):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: SAVED_SO_FAR.append(1) or t, lambda t: t):
        model(x)
    return len(SAVED_SO_FAR)


def saved_distinct_tensors(model, x):
    seen = set()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.add(id(t)) or t, lambda t: t):
        model(x)
    return len(seen)


def saved_outside_the_context(model, x):
    n = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: n.append(1) or t, lambda t: t):
        pass
    model(x)
    return len(n)


@pytest.mark.parametrize("answer, reason", [(saved_counting_unpacks, "nothing-packed"),
                                            (saved_outside_the_context, "nothing-packed"),
                                            (saved_counting_parameters, "count"), (saved_always_with_grad, "count"),
                                            (saved_distinct_tensors, "distinct-tensors")])
def test_00_3_rejects_wrong_answers(answer, reason):
    assert judged("00.3", answer) == ("wrong", reason)


def test_00_3_a_count_kept_across_calls_is_named():
    SAVED_SO_FAR.clear()
    try:
        assert judged("00.3", saved_into_a_list_never_cleared) == ("wrong", "kept-across-calls")
    finally:
        SAVED_SO_FAR.clear()


def test_00_3_asks_for_an_int():
    assert judged("00.3", lambda model, x: float(saved_with_counter_object(model, x))) == ("wrong", "not-an-int")


@pytest.mark.parametrize("yours, truth, reason", [(0.04, 0.2, "squared"), (3.0, 9.0, "square-root"),
                                                  (-2.5, 2.5, "sign"), (2.5, 2.5, None), (0.5, 0.2, None)])
def test_a_usual_slip_of_a_value_is_named(yours, truth, reason):
    if reason is None:
        _support.expect_no_slip(yours, truth, ("值", "the value"))
        return
    with pytest.raises(_support.Wrong) as wrong:
        _support.expect_no_slip(yours, truth, ("值", "the value"))
    assert wrong.value.reason == reason


# ---- the framework ------------------------------------------------------------------------

def test_check_prints_the_verdict_in_both_languages(capsys):
    hooklab.course.check("00.2", [])
    out = capsys.readouterr().out.splitlines()
    assert out == ["[00.2] 尚未完成：把四个名字按你预测的顺序填进 `my_order`。",
                   "[00.2] not solved yet: put the four names into `my_order` in the order you predict."]
    hooklab.course.check("00.2", run_solution("00.2")["my_order"])
    assert capsys.readouterr().out.splitlines() == ["[00.2] 正确！", "[00.2] correct!"]


def test_learner_errors_become_a_verdict_not_a_traceback(capsys):
    def broken(model, x):
        raise ValueError("oops")
    hooklab.course.check("00.1", broken)
    assert "[00.1] not right yet: your function raised ValueError: oops" in capsys.readouterr().out


def test_checking_leaves_the_learners_random_state_alone():
    torch.manual_seed(42)
    expected = torch.rand(3)
    torch.manual_seed(42)
    assert verdict("00.1", run_solution("00.1")["count_relu_zeros"]) == "correct"
    assert torch.equal(torch.rand(3), expected)


def test_hint_and_solution_print(capsys):
    hooklab.course.hint("00.3")
    hooklab.course.solution("00.3")
    out = capsys.readouterr().out
    assert "[00.3] 提示：" in out and "[00.3] hint:" in out and "def count_saved" in out


def test_a_mistyped_key_gives_one_bilingual_line_listing_the_keys(capsys):
    hooklab.course.check("1.3", None)                           # the learner meant "01.3"
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    line = out[0]
    assert line.startswith("[1.3] 没有这道练习") and "no such exercise" in line
    assert "“01.3”" in line and "did you mean '01.3'" in line
    assert line.endswith(", ".join(sorted(exercises._REGISTRY)))   # every valid key, in order


@pytest.mark.parametrize("show", [hooklab.course.hint, hooklab.course.solution])
def test_hint_and_solution_with_an_unknown_key_print_one_line(show, capsys):
    show("01.9")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("[01.9] 没有这道练习 / no such exercise.") and "01.3" in out[0]


def test_verdict_with_an_unknown_key_raises_a_key_error_with_that_line():
    with pytest.raises(KeyError, match="no such exercise") as raised:
        exercises.verdict("99.9", None)
    assert isinstance(raised.value, exercises.UnknownExercise)
    assert str(raised.value).count("\n") == 0 and "00.1, 00.2, 00.3" in str(raised.value)


def test_hints_have_no_raw_line_breaks():
    exercises._load_all()
    for key in exercises._REGISTRY:
        plain, markdown = exercises.hint_text(key)
        zh_line, en_line = plain.split("\n")               # exactly one line per language
        assert zh_line.startswith(f"[{key}] 提示：") and en_line.startswith(f"[{key}] hint: ")
        paragraphs = markdown.split("\n\n")
        assert len(paragraphs) == 2 and not any("\n" in p for p in paragraphs)
        assert all(p.count("`") % 2 == 0 for p in paragraphs), f"{key}: unpaired backtick in the hint"


def test_in_a_notebook_hints_and_solutions_render_as_markdown(monkeypatch, capsys):
    import IPython.display
    shown = []
    monkeypatch.setattr(exercises, "_in_notebook", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    hooklab.course.hint("01.2")
    hooklab.course.solution("01.2")
    assert capsys.readouterr().out == ""                 # nothing printed as raw text
    (hint_obj, raw1), (solution_obj, raw2) = shown
    assert raw1 and raw2
    assert hint_obj["text/markdown"] == exercises.hint_text("01.2")[1]
    assert hint_obj["text/plain"] == exercises.hint_text("01.2")[0]
    assert solution_obj["text/markdown"].count("```") == 2 and "def zero_nan_grads" in solution_obj["text/markdown"]


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        exercises.exercise("00.1", hint=("", ""), solution="")(lambda answer: None)


def test_a_solution_section_runs_on_its_own_and_is_what_solution_shows():
    """solutions/nb00.py: the section after `# [00.3]` is the code shown, and it defines the declared answer."""
    code = exercises.solution_text("00.3")[0].split("\n", 1)[1]
    assert code.startswith("def count_saved(model, x):") and "# [00." not in code
    assert exercises._get("00.3").answer == "count_saved" and callable(run_solution("00.3")["count_saved"])


def test_a_check_runs_with_gradients_even_under_no_grad_or_inference_mode():
    key, answer = "00.2", run_solution("00.2")["my_order"]
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            assert verdict(key, answer) == "correct"
            assert not torch.is_grad_enabled()   # the learner's mode is back afterwards


def test_a_check_puts_back_what_the_answer_changed_and_stops_a_slow_answer(monkeypatch):
    import time

    from hooklab.course import exercises as ex
    threads = torch.get_num_threads()

    def meddling(model, x):
        torch.set_num_threads(threads + 1)
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        return 0

    verdict("00.1", meddling)
    assert torch.get_num_threads() == threads and torch.is_grad_enabled()
    assert torch.get_default_dtype() == torch.float32

    def endless_loop(model, x):
        while True:
            pass

    def endless_wait(model, x):
        while True:
            time.sleep(0.05)

    monkeypatch.setattr(ex, "CHECK_TIME_LIMIT", 1)
    cpu = time.process_time()
    status, zh, en, reason = ex.verdict("00.1", endless_loop)
    assert (status, reason) == ("wrong", "too-slow") and "did not finish within 1 s of CPU time" in en and "1 秒" in zh
    # stopped by the CPU time it used, whatever the load (the alarm looks once a second): not by the clock
    assert time.process_time() - cpu < 5
    status, zh, en, reason = ex.verdict("00.1", endless_wait)  # no CPU used: the wall-clock guard (x the load)
    assert (status, reason) == ("wrong", "too-slow") and "wait for something that never comes" in en
    assert "did not finish within 1 s (stretched for the machine's load)" in en and "1 秒" in zh


def test_a_check_puts_back_anomaly_mode_print_options_and_every_rng():
    import random

    import numpy as np
    from torch._tensor_str import get_printoptions

    def meddling(model, x):
        torch.autograd.set_detect_anomaly(True)
        torch.set_printoptions(precision=1)
        torch.use_deterministic_algorithms(True, warn_only=True)
        random.seed(1)
        np.random.seed(1)
        return run_solution("00.1")["count_relu_zeros"](model, x)

    options = get_printoptions()
    random.seed(42)
    np.random.seed(42)
    expected = (random.random(), np.random.rand())
    random.seed(42)
    np.random.seed(42)
    try:
        assert verdict("00.1", meddling) == "correct"
        assert not torch.is_anomaly_enabled() and get_printoptions() == options
        assert not torch.are_deterministic_algorithms_enabled()
        assert (random.random(), np.random.rand()) == expected
    finally:
        torch.autograd.set_detect_anomaly(False)
        torch.set_printoptions(**options)
        torch.use_deterministic_algorithms(False)


def test_a_check_runs_in_float32_without_anomaly_mode_and_gives_the_learners_back():
    seen = []

    def spy(model, x):
        seen.append((torch.get_default_dtype(), torch.is_anomaly_enabled()))
        return 0

    torch.set_default_dtype(torch.float64)
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    try:
        verdict("00.1", spy)
        assert seen and set(seen) == {(torch.float32, False)}
        assert torch.get_default_dtype() == torch.float64
        assert torch.is_anomaly_enabled() and not torch.is_anomaly_check_nan_enabled()
    finally:
        torch.set_default_dtype(torch.float32)
        torch.autograd.set_detect_anomaly(False)


def test_an_answer_that_leaves_saved_tensor_hooks_active_is_wrong_and_they_are_ended():
    right = run_solution("00.1")["count_relu_zeros"]

    def right_but_leaves_hooks(model, x):
        torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t).__enter__()  # never exited
        return right(model, x)

    status, zh, en, reason = exercises.verdict("00.1", right_but_leaves_hooks)
    assert (status, reason) == ("wrong", "saved-hooks-left") and "saved-tensor hooks" in en and "saved_tensors_hooks" in zh
    assert hooklab.hook_inventory(None) == []  # popped: nothing left active

    # the learner's own context, active around the check, is not touched
    pack, unpack = (lambda t: t), (lambda t: t)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        assert verdict("00.1", right) == "correct"
        assert verdict("00.1", right_but_leaves_hooks) == "wrong"
        assert [e.kind for e in hooklab.hook_inventory(None)] == ["saved_tensors"]
    assert hooklab.hook_inventory(None) == []


def test_an_unexpected_error_inside_a_checker_is_a_wrong_verdict_naming_it(monkeypatch, capsys):
    def broken_checker(answer):
        raise RuntimeError("Float did not match Double\nmore detail")

    monkeypatch.setitem(exercises._REGISTRY, "99.1", exercises.Exercise("99.1", broken_checker, None, False, ("", ""), ""))
    status, zh, en, reason = exercises.verdict("99.1", lambda: 0)
    assert (status, reason) == ("wrong", "checker-error")
    assert en.startswith("the check stopped on an unexpected RuntimeError: Float did not match Double (")
    assert "RuntimeError" in zh and "more detail" not in en
    hooklab.course.check("99.1", lambda: 0)
    assert "[99.1] not right yet: the check stopped on an unexpected RuntimeError" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="Float did not match Double"):  # the tests' strict mode: a crash fails
        exercises.verdict("99.1", lambda: 0, strict=True)


def test_a_function_that_ran_and_returned_none_is_not_right_yet_not_unsolved(capsys):
    def zero_nan_grads(t, replaced):       # forgot the return
        def hook(grad):
            return torch.nan_to_num(grad, nan=0.0)
        t.register_hook(hook)

    hooklab.course.check("01.2", zero_nan_grads)
    out = capsys.readouterr().out.splitlines()
    assert out == ["[01.2] 还不对：你的函数运行了，却返回了 None；请返回 `register_hook` 给你的句柄（handle）。",
                   "[01.2] not right yet: your function ran but returned None: return the handle that "
                   "`register_hook` gave you."]

    def count_relu_zeros(model, x):        # no return where nothing specific is asked for
        model(x)
    status, _, en, reason = exercises.verdict("00.1", count_relu_zeros)
    assert (status, reason) == ("wrong", "returned-none")
    assert en == "your function ran but returned None: did you forget the `return`?"


@pytest.mark.parametrize("source", ["def f(a, b):\n    pass", "def f(a, b):\n    # your code here\n    pass",
                                    "def f(*args, **kwargs):\n    ...", "def f(a):\n    'doc'\n    return None",
                                    "f = lambda a, b: None"])
def test_a_blank_function_is_the_starting_point(source):
    namespace = {}
    exec(source, namespace)
    assert _support._blank(namespace["f"]) and not _support.started(namespace["f"])


@pytest.mark.parametrize("answer", [lambda a: a, lambda a: print(a), len, functools.partial(print, 1)])
def test_any_other_callable_is_started(answer):
    assert _support.started(answer)


def test_solution_load_puts_the_code_into_the_next_cell(monkeypatch, capsys):
    import IPython

    class Shell:
        kernel = object()
        loaded = []

        def set_next_input(self, text, replace=False):
            self.loaded.append((text, replace))

    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    hooklab.course.solution("01.2", load=True)
    (text, replace), = Shell.loaded
    assert not replace and text == exercises.solution_text("01.2")[0]
    assert text.startswith("# [01.2] reference solution / 参考答案\ndef zero_nan_grads(")
    assert capsys.readouterr().out == "[01.2] 参考答案已放进下面的新单元格。\n[01.2] the reference solution is in a new cell below.\n"


def test_solution_load_outside_ipython_says_so_and_prints_the_code(capsys):
    hooklab.course.solution("01.2", load=True)  # pytest runs no IPython shell
    out = capsys.readouterr().out
    assert "load=True puts the solution into the next cell, which needs IPython" in out
    assert "def zero_nan_grads(t, replaced):" in out
    with pytest.raises(TypeError, match="load must be True or False"):
        hooklab.course.solution("01.2", load="yes")
