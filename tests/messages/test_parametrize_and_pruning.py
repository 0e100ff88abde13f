"""Trigger tests: the messages of parametrizations (``torch.nn.utils.parametrize``), pruning (a forward pre-hook) and
the old hook-based ``weight_norm`` / ``spectral_norm``."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize, prune

from message_triggers import fix, fixes_of, trigger, triggers_of


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


@fix("parametrizationlist-requires-one-or-more-modules-d37600",
     en="register parametrizations with register_parametrization, which builds the ParametrizationList",
     zh="用 register_parametrization 注册参数化，由它来构建 ParametrizationList")
def parametrization_list_built_by_register_parametrization():
    m = _register(_Param())
    return type(m.parametrizations.weight).__name__, len(m.parametrizations.weight)


@trigger("right-inverse-must-return-a-tensor-or-a-sequence-0f79b3")
def right_inverse_returns_a_number():
    _register(_Param(inverse=lambda x: 1))


@fix("right-inverse-must-return-a-tensor-or-a-sequence-0f79b3",
     en="right_inverse returns a tensor (the original from which forward rebuilds the value)",
     zh="right_inverse 返回张量（forward 由它重建出参数值）")
def right_inverse_returns_a_tensor():
    m = _linear()
    before = m.weight.detach().clone()
    _register(_Param(forward=lambda x: x * 2, inverse=lambda x: x / 2), m)
    return torch.allclose(m.weight, before)


@trigger("right-inverse-must-return-a-tensor-or-a-sequence-892e4a")
def right_inverse_returns_a_sequence_with_a_number():
    _register(_Param(inverse=lambda x: (x, 1)))


@fix("right-inverse-must-return-a-tensor-or-a-sequence-892e4a",
     en="right_inverse returns a sequence of tensors only, and forward takes as many",
     zh="right_inverse 返回的序列里只能是张量，forward 接收同样多个")
def right_inverse_returns_a_sequence_of_tensors():
    m = _linear()
    before = m.weight.detach().clone()
    _register(_Param(forward=lambda a, b: a + b, inverse=lambda x: (x / 2, x / 2)), m)
    return torch.allclose(m.weight, before), sorted(n for n, _ in m.parametrizations.weight.named_parameters())


@trigger("when-right-inverse-outputs-one-tensor-it-may-not-8a0060")
def right_inverse_changes_the_dtype():
    _register(_Param(inverse=lambda x: x.double()))


@fix("when-right-inverse-outputs-one-tensor-it-may-not-8a0060",
     en="convert the module first (m.double()), then register a right_inverse that keeps the dtype",
     zh="先转换模块（m.double()），再注册不改变 dtype 的 right_inverse")
def module_converted_before_the_parametrization():
    m = _linear().double()
    _register(_Param(), m)
    return str(m.parametrizations.weight.original.dtype)


@trigger("when-right-inverse-outputs-one-tensor-it-may-not-18e5a0")
def right_inverse_changes_the_device():
    _register(_Param(inverse=lambda x: x.to("meta")))


@fix("when-right-inverse-outputs-one-tensor-it-may-not-18e5a0",
     en="move the module first (m.to(device)), then register a right_inverse that keeps the device",
     zh="先移动模块（m.to(device)），再注册不改变设备的 right_inverse")
def module_moved_before_the_parametrization():
    m = _linear().to("meta")
    _register(_Param(), m)
    return str(m.parametrizations.weight.original.device)


@trigger("a-parametrization-must-return-a-tensor-got-30157f")
def parametrization_returns_a_number():
    _register(_Param(forward=lambda x: 1))


@fix("a-parametrization-must-return-a-tensor-got-30157f",
     en="a parametrization's forward returns a tensor",
     zh="参数化的 forward 要返回张量")
def parametrization_returns_a_tensor():
    m = _linear()
    before = m.weight.detach().clone()
    _register(_Param(forward=lambda x: x * 2), m)
    return torch.allclose(m.weight, before * 2)


@trigger("registering-a-parametrization-may-not-change-the-dtype-o-f67ff0")
def parametrization_changes_the_dtype():
    _register(_Param(forward=lambda x: x.double()))


@fix("registering-a-parametrization-may-not-change-the-dtype-o-f67ff0",
     en="a parametrization that changes the dtype is registered with unsafe=True",
     zh="会改变 dtype 的参数化要用 unsafe=True 注册")
def parametrization_changes_the_dtype_with_unsafe():
    m = _linear()
    parametrize.register_parametrization(m, "weight", _Param(forward=lambda x: x.double()), unsafe=True)
    return str(m.weight.dtype)


@trigger("registering-a-parametrization-may-not-change-the-shape-o-70fb0b")
def parametrization_changes_the_shape():
    _register(_Param(forward=lambda x: x[:1]))


@fix("registering-a-parametrization-may-not-change-the-shape-o-70fb0b",
     en="a parametrization that changes the shape is registered with unsafe=True",
     zh="会改变形状的参数化要用 unsafe=True 注册")
def parametrization_changes_the_shape_with_unsafe():
    m = _linear()
    parametrize.register_parametrization(m, "weight", _Param(forward=lambda x: x[:1]), unsafe=True)
    return tuple(m.weight.shape)


@trigger("module-does-not-have-a-parameter-a-buffer-or-3632a4")
def parametrization_of_a_missing_parameter():
    parametrize.register_parametrization(_linear(), "scale", _Param())


@fix("module-does-not-have-a-parameter-a-buffer-or-3632a4",
     en="parametrize a tensor the module has: register the parameter (or buffer) first",
     zh="只能参数化模块已有的张量：先注册这个参数（或 buffer）")
def parametrization_of_a_registered_parameter():
    m = _linear()
    m.register_parameter("scale", nn.Parameter(torch.ones(2)))
    parametrize.register_parametrization(m, "scale", _Param(forward=lambda x: x * 2))
    return m.scale.tolist()


# --- a second parametrization on the same tensor ------------------------------------------------------------

def _second(param: nn.Module) -> None:
    _register(param, _register(_Param()))


@trigger("a-parametrization-must-return-a-tensor-got-46f747")
def second_parametrization_returns_a_number():
    _second(_Param(forward=lambda x: 1))


@fix("a-parametrization-must-return-a-tensor-got-46f747",
     en="every parametrization of the list returns a tensor, the second as well",
     zh="参数化列表里的每一个都要返回张量，第二个也一样")
def second_parametrization_returns_a_tensor():
    m = _linear()
    before = m.weight.detach().clone()
    _register(_Param(forward=lambda x: x * 2), _register(_Param(), m))
    return len(m.parametrizations.weight), torch.allclose(m.weight, before * 2)


@trigger("registering-a-parametrization-may-not-change-the-dtype-o-cf74ab")
def second_parametrization_changes_the_dtype():
    _second(_Param(forward=lambda x: x.double()))


@fix("registering-a-parametrization-may-not-change-the-dtype-o-cf74ab",
     en="a second parametrization that changes the dtype is registered with unsafe=True",
     zh="会改变 dtype 的第二个参数化要用 unsafe=True 注册")
def second_parametrization_changes_the_dtype_with_unsafe():
    m = _register(_Param())
    parametrize.register_parametrization(m, "weight", _Param(forward=lambda x: x.double()), unsafe=True)
    return len(m.parametrizations.weight), str(m.weight.dtype)


@trigger("registering-a-parametrization-may-not-change-the-shape-o-18cb0e")
def second_parametrization_changes_the_shape():
    _second(_Param(forward=lambda x: x[:1]))


@fix("registering-a-parametrization-may-not-change-the-shape-o-18cb0e",
     en="a second parametrization that changes the shape is registered with unsafe=True",
     zh="会改变形状的第二个参数化要用 unsafe=True 注册")
def second_parametrization_changes_the_shape_with_unsafe():
    m = _register(_Param())
    parametrize.register_parametrization(m, "weight", _Param(forward=lambda x: x[:1]), unsafe=True)
    return len(m.parametrizations.weight), tuple(m.weight.shape)


@trigger("parametrization-right-inverse-must-return-a-tensor-got-07663a")
def second_parametrization_right_inverse_returns_a_number():
    _second(_Param(inverse=lambda x: 1))


@fix("parametrization-right-inverse-must-return-a-tensor-got-07663a",
     en="a second parametrization's right_inverse returns a tensor",
     zh="第二个参数化的 right_inverse 也要返回张量")
def second_parametrization_right_inverse_returns_a_tensor():
    m = _linear()
    before = m.weight.detach().clone()
    _register(_Param(forward=lambda x: x * 2, inverse=lambda x: x / 2), _register(_Param(), m))
    return len(m.parametrizations.weight), torch.allclose(m.weight, before)


@trigger("the-tensor-returned-by-parametrization-right-inverse-mus-4907bc")
def second_parametrization_right_inverse_changes_the_dtype():
    _second(_Param(inverse=lambda x: x.double()))


@fix("the-tensor-returned-by-parametrization-right-inverse-mus-4907bc",
     en="a second parametrization whose right_inverse changes the dtype is registered with unsafe=True",
     zh="right_inverse 会改变 dtype 的第二个参数化要用 unsafe=True 注册")
def second_parametrization_right_inverse_changes_the_dtype_with_unsafe():
    m = _register(_Param())
    parametrize.register_parametrization(m, "weight", _Param(forward=lambda x: x.float(),
                                                             inverse=lambda x: x.double()), unsafe=True)
    return len(m.parametrizations.weight), str(m.weight.dtype)


@trigger("the-tensor-returned-by-parametrization-right-inverse-mus-f97326")
def second_parametrization_right_inverse_changes_the_shape():
    _second(_Param(inverse=lambda x: x[:1]))


@fix("the-tensor-returned-by-parametrization-right-inverse-mus-f97326",
     en="a second parametrization whose right_inverse changes the shape is registered with unsafe=True",
     zh="right_inverse 会改变形状的第二个参数化要用 unsafe=True 注册")
def second_parametrization_right_inverse_changes_the_shape_with_unsafe():
    m = _register(_Param())
    parametrize.register_parametrization(m, "weight", _Param(forward=lambda x: x.repeat(2, 1),
                                                             inverse=lambda x: x[:1]), unsafe=True)
    return len(m.parametrizations.weight), tuple(m.weight.shape)


# --- assigning to a parametrized tensor (right_inverse again) -----------------------------------------------

@trigger("parametrization-does-not-implement-right-inverse-8e9cf7")
def assigning_through_a_parametrization_without_right_inverse():
    m = _register(_NoInverse())
    m.weight = torch.ones(2, 2)


@fix("parametrization-does-not-implement-right-inverse-8e9cf7",
     en="to assign to a parametrized tensor, the parametrization implements right_inverse",
     zh="要给参数化后的张量赋值，参数化必须实现 right_inverse")
def assigning_through_a_parametrization_with_right_inverse():
    m = _register(_Param(forward=lambda x: x * 2, inverse=lambda x: x / 2))
    m.weight = torch.ones(2, 2)
    return m.weight.tolist()


@trigger("right-inverse-should-return-a-tensor-got-077542")
def assigning_when_right_inverse_returns_a_number():
    _register(_Param(later=lambda x: 1)).weight = torch.ones(2, 2)


@fix("right-inverse-should-return-a-tensor-got-077542",
     en="right_inverse returns a tensor when a value is assigned, too",
     zh="赋值时调用的 right_inverse 同样要返回张量")
def assigning_when_right_inverse_returns_a_tensor():
    m = _register(_Param(later=lambda x: x))
    m.weight = torch.ones(2, 2)
    return m.weight.tolist()


@trigger("the-tensor-returned-by-right-inverse-has-dtype-while-feb8b6")
def assigning_when_right_inverse_changes_the_dtype():
    _register(_Param(later=lambda x: x.double())).weight = torch.ones(2, 2)


@fix("the-tensor-returned-by-right-inverse-has-dtype-while-feb8b6",
     en="right_inverse keeps the dtype of original when a value is assigned",
     zh="赋值时 right_inverse 返回的张量要和 original 的 dtype 一致")
def assigning_when_right_inverse_keeps_the_dtype():
    m = _register(_Param(later=lambda x: x.to(torch.float32)))
    m.weight = torch.ones(2, 2, dtype=torch.float64)
    return str(m.weight.dtype), m.weight.tolist()


@trigger("right-inverse-must-return-a-sequence-of-tensors-got-faddc9")
def assigning_when_a_two_tensor_right_inverse_returns_one():
    _register(_Pair(later=lambda x: x)).weight = torch.ones(2, 2)


@fix("right-inverse-must-return-a-sequence-of-tensors-got-faddc9",
     en="a right_inverse that made two originals returns two tensors on every assignment",
     zh="当初返回两个张量的 right_inverse，每次赋值都要返回两个张量")
def assigning_when_a_two_tensor_right_inverse_returns_two():
    m = _register(_Pair(later=lambda x: (x / 2, x / 2)))
    m.weight = torch.ones(2, 2)
    return m.weight.tolist()


@trigger("right-inverse-must-return-a-sequence-of-tensors-of-0f06ea")
def assigning_when_a_two_tensor_right_inverse_returns_three():
    _register(_Pair(later=lambda x: (x, x, x))).weight = torch.ones(2, 2)


@fix("right-inverse-must-return-a-sequence-of-tensors-of-0f06ea",
     en="right_inverse returns as many tensors as there are originals (here two)",
     zh="right_inverse 返回的张量个数要和 original 的个数相同（这里是两个）")
def assigning_when_a_two_tensor_right_inverse_returns_as_many():
    m = _register(_Pair(later=lambda x: (x / 4, x * 3 / 4)))
    m.weight = torch.ones(2, 2)
    return m.weight.tolist()


@trigger("tensor-returned-by-right-inverse-has-dtype-while-origina-babe00")
def assigning_when_a_two_tensor_right_inverse_changes_a_dtype():
    _register(_Pair(later=lambda x: (x, x.double()))).weight = torch.ones(2, 2)


@fix("tensor-returned-by-right-inverse-has-dtype-while-origina-babe00",
     en="each tensor right_inverse returns keeps the dtype of its original",
     zh="right_inverse 返回的每个张量都要和对应 original 的 dtype 一致")
def assigning_when_a_two_tensor_right_inverse_keeps_the_dtypes():
    m = _register(_Pair(later=lambda x: (x / 2, x / 2)))
    m.weight = torch.ones(2, 2)
    return str(m.parametrizations.weight.original1.dtype), m.weight.tolist()


@trigger("right-inverse-must-return-a-sequence-of-tensors-or-71ccc4")
def assigning_when_a_two_tensor_right_inverse_returns_a_number():
    _register(_Pair(later=lambda x: (x, 1))).weight = torch.ones(2, 2)


@fix("right-inverse-must-return-a-sequence-of-tensors-or-71ccc4",
     en="every entry right_inverse returns is a tensor",
     zh="right_inverse 返回的每一项都要是张量")
def assigning_when_a_two_tensor_right_inverse_returns_tensors():
    m = _register(_Pair(later=lambda x: (x, torch.zeros_like(x))))
    m.weight = torch.ones(2, 2)
    return m.weight.tolist()


# --- removing, caching, tracing -----------------------------------------------------------------------------

@trigger("module-does-not-have-a-parametrization-on-1df0f2")
def removing_a_parametrization_that_is_not_there():
    parametrize.remove_parametrizations(_linear(), "weight")


@fix("module-does-not-have-a-parametrization-on-1df0f2",
     en="remove a parametrization only where parametrize.is_parametrized says there is one",
     zh="先用 parametrize.is_parametrized 确认有参数化，再移除")
def removing_a_parametrization_only_where_there_is_one():
    modules = [_linear(), _register(_Param())]
    for m in modules:
        if parametrize.is_parametrized(m, "weight"):
            parametrize.remove_parametrizations(m, "weight")
    return [parametrize.is_parametrized(m) for m in modules]


@trigger("cannot-leave-unparametrized-leave-parametrized-false-a-t-d1f4ca")
def removing_a_two_tensor_parametrization_without_its_value():
    parametrize.remove_parametrizations(_register(_Pair()), "weight", leave_parametrized=False)


@fix("cannot-leave-unparametrized-leave-parametrized-false-a-t-d1f4ca",
     en="a tensor parametrized by several tensors is removed with leave_parametrized=True (it keeps its value)",
     zh="由多个张量参数化的张量，移除时用 leave_parametrized=True（保留当前值）")
def removing_a_two_tensor_parametrization_keeping_its_value():
    m = _linear()
    before = m.weight.detach().clone()
    parametrize.remove_parametrizations(_register(_Pair(), m), "weight", leave_parametrized=True)
    return parametrize.is_parametrized(m), torch.allclose(m.weight, before)


@trigger("cannot-trace-a-model-while-caching-parametrizations-673f9e")
def tracing_inside_parametrize_cached():
    m = _register(_Param())
    with parametrize.cached():
        torch.jit.trace(m, torch.ones(1, 2))


@fix("cannot-trace-a-model-while-caching-parametrizations-673f9e",
     en="trace outside parametrize.cached() (cache only around eager forward passes)",
     zh="在 parametrize.cached() 之外做 trace（缓存只用于即时执行的前向）")
def tracing_outside_parametrize_cached():
    m = _register(_Param())
    traced = torch.jit.trace(m, torch.ones(1, 2))
    with parametrize.cached():
        eager = m(torch.ones(1, 2))
    return torch.allclose(traced(torch.ones(1, 2)), eager)


@trigger("parametrization-is-not-working-with-scripting-7a6199")
def calling_a_scripted_parametrized_module():
    class Double(nn.Module):
        def forward(self, x):
            return 2 * x
    scripted = torch.jit.script(_register(Double()))  # scripting succeeds ...
    scripted(torch.ones(1, 2))                         # ... the call reads the parametrized weight and fails


@fix("parametrization-is-not-working-with-scripting-7a6199",
     en="remove the parametrization (leave_parametrized=True keeps its value) before torch.jit.script",
     zh="先移除参数化（leave_parametrized=True 保留其值），再 torch.jit.script")
def scripting_after_removing_the_parametrization():
    class Double(nn.Module):
        def forward(self, x):
            return 2 * x
    m = _register(Double())
    eager = m(torch.ones(1, 2))
    parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
    scripted = torch.jit.script(m)
    return torch.allclose(scripted(torch.ones(1, 2)), eager)


# --- pruning, weight_norm, spectral_norm --------------------------------------------------------------------

@trigger("avoid-adding-multiple-pruning-hooks-to-the-same-tensor-27b21f")
def two_pruning_hooks_on_one_tensor():
    m = _linear()
    prune.l1_unstructured(m, "weight", amount=0.5)
    method = next(h for h in m._forward_pre_hooks.values() if isinstance(h, prune.BasePruningMethod))
    m.register_forward_pre_hook(method)
    prune.l1_unstructured(m, "weight", amount=0.5)


@fix("avoid-adding-multiple-pruning-hooks-to-the-same-tensor-27b21f",
     en="prune the same tensor again with prune.* itself: it combines the masks in one PruningContainer hook",
     zh="再次剪枝同一个张量时直接调用 prune.*：它会把掩码合并到一个 PruningContainer 钩子里")
def pruning_one_tensor_twice():
    m = _linear()
    prune.l1_unstructured(m, "weight", amount=0.5)
    prune.l1_unstructured(m, "weight", amount=0.5)
    hooks = [type(h).__name__ for h in m._forward_pre_hooks.values()]
    return hooks, int((m.weight == 0).sum())


@trigger("cannot-register-two-weight-norm-hooks-on-the-same-0830dc")
def old_weight_norm_twice():
    nn.utils.weight_norm(nn.utils.weight_norm(_linear()))


@fix("cannot-register-two-weight-norm-hooks-on-the-same-0830dc",
     en="apply weight norm once, with torch.nn.utils.parametrizations.weight_norm",
     zh="权重归一化只加一次，用 torch.nn.utils.parametrizations.weight_norm")
def weight_norm_once():
    m = nn.utils.parametrizations.weight_norm(_linear())
    return sorted(n for n, _ in m.named_parameters())


@trigger("cannot-register-two-spectral-norm-hooks-on-the-same-d2f311")
def old_spectral_norm_twice():
    nn.utils.spectral_norm(nn.utils.spectral_norm(_linear()))


@fix("cannot-register-two-spectral-norm-hooks-on-the-same-d2f311",
     en="apply spectral norm once, with torch.nn.utils.parametrizations.spectral_norm",
     zh="谱归一化只加一次，用 torch.nn.utils.parametrizations.spectral_norm")
def spectral_norm_once():
    m = nn.utils.parametrizations.spectral_norm(_linear())
    return sorted(n for n, _ in m.named_parameters())


@trigger("torch-nn-utils-weight-norm-is-deprecated-in-favor-3520eb")
def old_weight_norm_called():
    nn.utils.weight_norm(_linear())


@fix("torch-nn-utils-weight-norm-is-deprecated-in-favor-3520eb",
     en="use torch.nn.utils.parametrizations.weight_norm (a parametrization, not hooks)",
     zh="改用 torch.nn.utils.parametrizations.weight_norm（参数化实现，不再用钩子）")
def weight_norm_as_a_parametrization():
    m = nn.utils.parametrizations.weight_norm(_linear())
    return sorted(n for n, _ in m.named_parameters())


@trigger("the-module-passed-to-weightnorm-can-t-have-uninitialized-0a5950")
def old_weight_norm_on_a_lazy_module():
    nn.utils.weight_norm(nn.LazyLinear(2))


@fix("the-module-passed-to-weightnorm-can-t-have-uninitialized-0a5950",
     en="run one forward pass so the lazy module has its weight, then apply weight norm",
     zh="先跑一次前向让惰性模块初始化权重，再加权重归一化")
def weight_norm_on_a_lazy_module_after_a_forward():
    m = nn.LazyLinear(2)
    m(torch.ones(1, 3))
    m = nn.utils.parametrizations.weight_norm(m)
    return sorted((n, tuple(p.shape)) for n, p in m.named_parameters())


@trigger("weight-norm-of-not-found-in-80ea50")
def old_weight_norm_removed_where_there_is_none():
    nn.utils.remove_weight_norm(_linear())


@fix("weight-norm-of-not-found-in-80ea50",
     en="remove weight norm only from a module that has it (parametrize.is_parametrized tells)",
     zh="只从确实加了权重归一化的模块上移除它（用 parametrize.is_parametrized 判断）")
def weight_norm_removed_where_there_is_one():
    m = nn.utils.parametrizations.weight_norm(_linear())
    if parametrize.is_parametrized(m, "weight"):
        parametrize.remove_parametrizations(m, "weight")
    return parametrize.is_parametrized(m), sorted(n for n, _ in m.named_parameters())


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


@fix("calling-remove-parametrizations-with-leave-parametrized-87f107",
     en="for a tensor subclass without set_(), opt into the swap path: "
        "torch.__future__.set_swap_module_params_on_conversion(True)",
     zh="张量子类没有可用的 set_() 时，改走交换路径："
        "torch.__future__.set_swap_module_params_on_conversion(True)")
def parametrization_removed_from_a_tensor_subclass_by_swapping():
    m = _linear()
    m.weight = nn.Parameter(m.weight.detach().as_subclass(_CannotSet))
    parametrize.register_parametrization(m, "weight", _Double())
    expected = m.weight.detach().clone()
    _CannotSet.refuse = True
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
        _CannotSet.refuse = False
    return parametrize.is_parametrized(m), torch.allclose(m.weight, expected)


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
