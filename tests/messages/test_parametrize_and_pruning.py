"""Trigger tests: the messages of parametrizations (``torch.nn.utils.parametrize``), pruning (a forward pre-hook) and
the old hook-based ``weight_norm`` / ``spectral_norm``."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize, prune

from message_triggers import trigger, triggers_of


class _Param(nn.Module):
    """A parametrization whose forward and right_inverse are given (``later``: what right_inverse returns once the
    parametrization is registered, to reach the checks made when a value is assigned)."""

    def __init__(self, forward=None, inverse=None, later=None):
        super().__init__()
        self._forward, self._inverse, self._later = forward, inverse, later
        self.registered = False

    def forward(self, *x):
        return self._forward(*x) if self._forward else x[0]

    def right_inverse(self, x):
        if self.registered and self._later is not None:
            return self._later(x)
        return self._inverse(x) if self._inverse else x


class _NoInverse(nn.Module):
    def forward(self, x):
        return x


class _Pair(nn.Module):
    """Parametrized by two tensors (right_inverse splits, forward adds)."""

    def __init__(self, later=None):
        super().__init__()
        self.later, self.registered = later, False

    def forward(self, a, b):
        return a + b

    def right_inverse(self, x):
        if self.registered and self.later is not None:
            return self.later(x)
        return x / 2, x / 2


def _linear() -> nn.Linear:
    return nn.Linear(2, 2)


def _register(param: nn.Module, module: nn.Module | None = None) -> nn.Module:
    module = module if module is not None else _linear()
    parametrize.register_parametrization(module, "weight", param)
    param.registered = True
    return module


# --- registering ------------------------------------------------------------------------------------------

@trigger("parametrizationlist-requires-one-or-more-modules-d37600")
def parametrization_list_without_modules():
    parametrize.ParametrizationList([], torch.ones(2))


@trigger("right-inverse-must-return-a-tensor-or-a-sequence-0f79b3")
def right_inverse_returns_a_number():
    _register(_Param(inverse=lambda x: 1))


@trigger("right-inverse-must-return-a-tensor-or-a-sequence-892e4a")
def right_inverse_returns_a_sequence_with_a_number():
    _register(_Param(inverse=lambda x: (x, 1)))


@trigger("when-right-inverse-outputs-one-tensor-it-may-not-8a0060")
def right_inverse_changes_the_dtype():
    _register(_Param(inverse=lambda x: x.double()))


@trigger("when-right-inverse-outputs-one-tensor-it-may-not-18e5a0")
def right_inverse_changes_the_device():
    _register(_Param(inverse=lambda x: x.to("meta")))


@trigger("a-parametrization-must-return-a-tensor-got-30157f")
def parametrization_returns_a_number():
    _register(_Param(forward=lambda x: 1))


@trigger("registering-a-parametrization-may-not-change-the-dtype-o-f67ff0")
def parametrization_changes_the_dtype():
    _register(_Param(forward=lambda x: x.double()))


@trigger("registering-a-parametrization-may-not-change-the-shape-o-70fb0b")
def parametrization_changes_the_shape():
    _register(_Param(forward=lambda x: x[:1]))


@trigger("module-does-not-have-a-parameter-a-buffer-or-3632a4")
def parametrization_of_a_missing_parameter():
    parametrize.register_parametrization(_linear(), "scale", _Param())


# --- a second parametrization on the same tensor ------------------------------------------------------------

def _second(param: nn.Module) -> None:
    _register(param, _register(_Param()))


@trigger("a-parametrization-must-return-a-tensor-got-46f747")
def second_parametrization_returns_a_number():
    _second(_Param(forward=lambda x: 1))


@trigger("registering-a-parametrization-may-not-change-the-dtype-o-cf74ab")
def second_parametrization_changes_the_dtype():
    _second(_Param(forward=lambda x: x.double()))


@trigger("registering-a-parametrization-may-not-change-the-shape-o-18cb0e")
def second_parametrization_changes_the_shape():
    _second(_Param(forward=lambda x: x[:1]))


@trigger("parametrization-right-inverse-must-return-a-tensor-got-07663a")
def second_parametrization_right_inverse_returns_a_number():
    _second(_Param(inverse=lambda x: 1))


@trigger("the-tensor-returned-by-parametrization-right-inverse-mus-4907bc")
def second_parametrization_right_inverse_changes_the_dtype():
    _second(_Param(inverse=lambda x: x.double()))


@trigger("the-tensor-returned-by-parametrization-right-inverse-mus-f97326")
def second_parametrization_right_inverse_changes_the_shape():
    _second(_Param(inverse=lambda x: x[:1]))


# --- assigning to a parametrized tensor (right_inverse again) -----------------------------------------------

@trigger("parametrization-does-not-implement-right-inverse-8e9cf7")
def assigning_through_a_parametrization_without_right_inverse():
    m = _register(_NoInverse())
    m.weight = torch.ones(2, 2)


@trigger("right-inverse-should-return-a-tensor-got-077542")
def assigning_when_right_inverse_returns_a_number():
    _register(_Param(later=lambda x: 1)).weight = torch.ones(2, 2)


@trigger("the-tensor-returned-by-right-inverse-has-dtype-while-feb8b6")
def assigning_when_right_inverse_changes_the_dtype():
    _register(_Param(later=lambda x: x.double())).weight = torch.ones(2, 2)


@trigger("right-inverse-must-return-a-sequence-of-tensors-got-faddc9")
def assigning_when_a_two_tensor_right_inverse_returns_one():
    _register(_Pair(later=lambda x: x)).weight = torch.ones(2, 2)


@trigger("right-inverse-must-return-a-sequence-of-tensors-of-0f06ea")
def assigning_when_a_two_tensor_right_inverse_returns_three():
    _register(_Pair(later=lambda x: (x, x, x))).weight = torch.ones(2, 2)


@trigger("tensor-returned-by-right-inverse-has-dtype-while-origina-babe00")
def assigning_when_a_two_tensor_right_inverse_changes_a_dtype():
    _register(_Pair(later=lambda x: (x, x.double()))).weight = torch.ones(2, 2)


@trigger("right-inverse-must-return-a-sequence-of-tensors-or-71ccc4")
def assigning_when_a_two_tensor_right_inverse_returns_a_number():
    _register(_Pair(later=lambda x: (x, 1))).weight = torch.ones(2, 2)


# --- removing, caching, tracing -----------------------------------------------------------------------------

@trigger("module-does-not-have-a-parametrization-on-1df0f2")
def removing_a_parametrization_that_is_not_there():
    parametrize.remove_parametrizations(_linear(), "weight")


@trigger("cannot-leave-unparametrized-leave-parametrized-false-a-t-d1f4ca")
def removing_a_two_tensor_parametrization_without_its_value():
    parametrize.remove_parametrizations(_register(_Pair()), "weight", leave_parametrized=False)


@trigger("cannot-trace-a-model-while-caching-parametrizations-673f9e")
def tracing_inside_parametrize_cached():
    m = _register(_Param())
    with parametrize.cached():
        torch.jit.trace(m, torch.ones(1, 2))


@trigger("parametrization-is-not-working-with-scripting-7a6199")
def calling_a_scripted_parametrized_module():
    class Double(nn.Module):
        def forward(self, x):
            return 2 * x
    scripted = torch.jit.script(_register(Double()))  # scripting succeeds ...
    scripted(torch.ones(1, 2))                         # ... the call reads the parametrized weight and fails


# --- pruning, weight_norm, spectral_norm --------------------------------------------------------------------

@trigger("avoid-adding-multiple-pruning-hooks-to-the-same-tensor-27b21f")
def two_pruning_hooks_on_one_tensor():
    m = _linear()
    prune.l1_unstructured(m, "weight", amount=0.5)
    method = next(h for h in m._forward_pre_hooks.values() if isinstance(h, prune.BasePruningMethod))
    m.register_forward_pre_hook(method)
    prune.l1_unstructured(m, "weight", amount=0.5)


@trigger("cannot-register-two-weight-norm-hooks-on-the-same-0830dc")
def old_weight_norm_twice():
    nn.utils.weight_norm(nn.utils.weight_norm(_linear()))


@trigger("cannot-register-two-spectral-norm-hooks-on-the-same-d2f311")
def old_spectral_norm_twice():
    nn.utils.spectral_norm(nn.utils.spectral_norm(_linear()))


@trigger("torch-nn-utils-weight-norm-is-deprecated-in-favor-3520eb")
def old_weight_norm_called():
    nn.utils.weight_norm(_linear())


@trigger("the-module-passed-to-weightnorm-can-t-have-uninitialized-0a5950")
def old_weight_norm_on_a_lazy_module():
    nn.utils.weight_norm(nn.LazyLinear(2))


@trigger("weight-norm-of-not-found-in-80ea50")
def old_weight_norm_removed_where_there_is_none():
    nn.utils.remove_weight_norm(_linear())


class _CannotSet(torch.Tensor):
    refuse = False  # registering a parametrization calls set_() too: refuse only when it is removed

    def set_(self, *args, **kwargs):
        if _CannotSet.refuse:
            raise RuntimeError("this tensor subclass does not implement set_()")
        return super().set_(*args, **kwargs)


class _Double(nn.Module):
    def forward(self, w):
        return w * 2


@trigger("calling-remove-parametrizations-with-leave-parametrized-87f107")
def parametrization_removed_from_a_tensor_subclass_without_set():
    from torch.nn.utils import parametrize
    m = _linear()
    m.weight = nn.Parameter(m.weight.detach().as_subclass(_CannotSet))
    parametrize.register_parametrization(m, "weight", _Double())
    _CannotSet.refuse = True
    try:
        parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
    finally:
        _CannotSet.refuse = False


test_trigger = triggers_of(__name__)
