import warnings

import pytest
import torch

import hooklab
import hooklab.course


def test_prints_the_error_type_and_first_sentence_and_returns_none(capsys):
    assert hooklab.course.attempt(lambda: torch.ones(2).backward()) is None
    out = capsys.readouterr().out
    assert out.startswith("RuntimeError: element 0 of tensors does not require grad")
    assert out.count("\n") == 1


def test_prints_each_warning_and_returns_the_result(capsys):
    def warns_twice(x, *, scale):
        warnings.warn("first thing. More detail", UserWarning, stacklevel=1)
        warnings.warn("second thing", DeprecationWarning, stacklevel=1)
        return x * scale

    assert hooklab.course.attempt(warns_twice, 2, scale=3) == 6
    assert capsys.readouterr().out.splitlines() == ["UserWarning: first thing", "DeprecationWarning: second thing"]


def test_says_when_nothing_happened_unless_quiet(capsys):
    assert hooklab.course.attempt(lambda: 5) == 5
    assert capsys.readouterr().out == "ran without error\n"
    hooklab.course.attempt(lambda: 5, quiet=True)
    assert capsys.readouterr().out == ""


def test_warnings_filters_are_restored():
    before = list(warnings.filters)
    hooklab.course.attempt(lambda: warnings.warn("x", stacklevel=1))
    assert warnings.filters == before


def test_keyboard_interrupt_is_not_swallowed():
    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hooklab.course.attempt(interrupt)


def test_a_non_callable_is_a_clear_error():
    with pytest.raises(TypeError, match="needs something to call"):
        hooklab.course.attempt(torch.ones(2))
