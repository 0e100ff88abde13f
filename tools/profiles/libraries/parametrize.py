"""torch (``torch.nn.utils.parametrize`` and ``parametrizations.weight_norm``): not a hook but a class swap: the module
becomes ``Parametrized<Name>`` whose ``weight`` is a property recomputed on every access; the old
``torch.nn.utils.weight_norm`` is a forward pre-hook instead."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/nn/utils"
LIBRARY = Library(
    title='torch.nn.utils.parametrize', slug="parametrize", name="torch", category="quantization and compression",
    entry="torch.nn.utils.parametrizations.weight_norm(model[0])",
    names=("register_parametrization", "remove_parametrizations", "is_parametrized", "cached", "ParametrizationList",
           "parametrizations.weight_norm", "_WeightNorm", "_weight_norm_compat_hook", "torch.nn.utils.weight_norm",
           "WeightNorm", "remove_weight_norm", "type_before_parametrizations", "original0", "original1"),
    sources=(f"{SRC}/parametrize.py#L34-L73", f"{SRC}/parametrize.py#L344-L390",
             f"{SRC}/parametrize.py#L393-L447", f"{SRC}/parametrize.py#L696-L796",
             f"{SRC}/parametrizations.py#L336-L400", f"{SRC}/weight_norm.py#L31-L68"),
    words={
        "en": {"summary": "PyTorch's own parametrizations change the module's class, not its hooks: "
                          "`register_parametrization` (and `parametrizations.weight_norm`, built on it) swaps the "
                          "class for a generated `Parametrized<Name>` subclass whose `weight` is a property: every "
                          "read runs the parametrization on `parametrizations.weight.original` (`original0` / "
                          "`original1` for weight norm). Your module hooks stay where they were and still fire. "
                          "`weight_norm` also adds a load-state-dict pre-hook that accepts old `weight_g` / "
                          "`weight_v` keys. The deprecated `torch.nn.utils.weight_norm` is different: a forward "
                          "pre-hook (`WeightNorm`) that recomputes `weight` before each forward.",
               "remove": "`torch.nn.utils.parametrize.remove_parametrizations(module, 'weight')` gives the class "
                         "back and keeps the current value as a parameter; weight norm's load-state-dict pre-hook "
                         "stays. The old hook form: `torch.nn.utils.remove_weight_norm(module)`.",
               "api": "A parametrization is an `nn.Module` with `forward(original)` and optionally "
                      "`right_inverse`; several on one tensor run in registration order. "
                      "`with torch.nn.utils.parametrize.cached():` computes each parametrized tensor once per "
                      "block instead of once per access."},
        "zh": {"summary": "PyTorch 自带的参数化改的是模块的类，而不是钩子：`register_parametrization`（以及基于它的 "
                          "`parametrizations.weight_norm`）把类换成生成的子类 `Parametrized<Name>`，其中 `weight` 是属性："
                          "每次读取都要对 `parametrizations.weight.original`（weight norm 是 `original0` / `original1`）"
                          "跑一遍参数化。你的模块钩子原地不动，照常触发。`weight_norm` 还会加一个 load-state-dict "
                          "前置钩子，用来接收旧的 `weight_g` / `weight_v` 键。已弃用的 `torch.nn.utils.weight_norm` 则不同："
                          "它是一个前向前置钩子（`WeightNorm`），每次前向之前重算 `weight`。",
               "remove": "`torch.nn.utils.parametrize.remove_parametrizations(module, 'weight')` 把类换回去，并把当前值"
                         "保留为参数；weight norm 的 load-state-dict 前置钩子会留下。旧的钩子形式用 "
                         "`torch.nn.utils.remove_weight_norm(module)`。",
               "api": "参数化就是一个带 `forward(original)`（可选 `right_inverse`）的 `nn.Module`；同一张量上的多个"
                      "参数化按注册顺序运行。`with torch.nn.utils.parametrize.cached():` 让每个参数化张量在块内只算"
                      "一次，而不是每读一次算一次。"}},
    surprises=(
        {"fact": "facts.parametrization_calls",
         "en": "The parametrization runs on every read of `module.weight`, not once per forward: logging or "
               "regularising the weight outside forward costs a recomputation each time (unless inside "
               "`parametrize.cached()`).",
         "zh": "每读一次 `module.weight` 参数化就跑一次，而不是每次前向一次：在前向之外记录或正则化权重都要重算"
               "（除非放在 `parametrize.cached()` 里）。"},
        {"fact": "probe.removed",
         "en": "`remove_parametrizations` leaves `weight_norm`'s load-state-dict pre-hook on the module.",
         "zh": "`remove_parametrizations` 之后，`weight_norm` 的 load-state-dict 前置钩子仍留在模块上。"},
        {"fact": "facts.pickle",
         "en": "`torch.save(model)` (pickling the module) raises for a parametrized model; `deepcopy` and "
               "`state_dict()` work.",
         "zh": "对参数化过的模型 `torch.save(model)`（即 pickle 整个模块）会报错；`deepcopy` 和 `state_dict()` 没问题。"}),
)
TARGET = "0"
PROBES = {"deepcopy"}
SKIPPED = {"deepcopy": "a deep-copied load-state-dict hook (torch's _WrappedHook) loses its name, so the probe reads "
                       "the kept hook as lost; measured as a fact"}


def apply(model: nn.Module) -> nn.Module:
    from torch.nn.utils.parametrizations import weight_norm
    weight_norm(model[0])
    return model


def remove(model: nn.Module) -> nn.Module:
    from torch.nn.utils import parametrize
    parametrize.remove_parametrizations(model[0], "weight")
    return model


class _Counting(nn.Module):
    """An identity parametrization that counts its calls."""

    calls = 0

    def forward(self, x):
        _Counting.calls += 1
        return x


def facts() -> dict:
    """The class swap, calls of a parametrization per forward / per read / under ``cached()``, which gradient hooks
    fire, pickling, and what the old ``torch.nn.utils.weight_norm`` puts on a module."""
    import copy
    import pickle
    import warnings

    from torch.nn.utils import parametrize
    torch.manual_seed(0)
    model, fired = build(), []
    model[0].weight.register_hook(lambda g: fired.append("register_parametrization"))
    parametrize.register_parametrization(model[0], "weight", _Counting())
    calls = {}
    for label, run in (("one forward", lambda: model(*inputs())), ("two reads of .weight", lambda: (
            model[0].weight, model[0].weight)), ("two reads inside cached()", lambda: _cached_reads(model))):
        _Counting.calls = 0
        run()
        calls[label] = _Counting.calls
    model(*inputs()).sum().backward()
    normed = build()
    normed[0].weight.register_hook(lambda g: fired.append("weight_norm"))
    apply(normed)(*inputs()).sum().backward()
    twin = copy.deepcopy(normed)
    copied = {"class": type(twin[0]).__name__, "parametrized": parametrize.is_parametrized(twin[0], "weight"),
              "load_state_dict_pre_hooks": len(twin[0]._load_state_dict_pre_hooks)}
    try:
        pickle.dumps(normed)
        pickled = "pickles"
    except Exception as exc:  # noqa: BLE001 - the refusal is the fact
        pickled = f"raises {type(exc).__name__}"
    old = build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.nn.utils.weight_norm(old[0])
    return {"class_after": type(normed[0]).__name__, "still_an_instance_of_linear": isinstance(normed[0], nn.Linear),
            "parametrization_calls": calls,
            "hook_on_weight_before_fires": {k: k in fired for k in ("register_parametrization", "weight_norm")},
            "pickle": pickled, "deepcopy": copied, "state_dict_keys_of_layer": sorted(normed[0].state_dict()),
            "old_weight_norm": {"class_after": type(old[0]).__name__,
                                "forward_pre_hooks": [type(h).__name__ for h in old[0]._forward_pre_hooks.values()],
                                "layer_parameters": sorted(n for n, _ in old[0].named_parameters())}}


def _cached_reads(model: nn.Module) -> None:
    from torch.nn.utils import parametrize
    with parametrize.cached():
        model[0].weight, model[0].weight  # noqa: B018 - two reads are the point
