"""opacus: ``GradSampleModule`` (what ``PrivacyEngine.make_private`` wraps a model in) registers a forward hook that
stores each trainable layer's inputs and a full backward hook that turns them into per-sample gradients in
``param.grad_sample``; the hooks stay until ``_close()``."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/meta-pytorch/opacus/blob/v1.6.0/opacus/"
LIBRARY = Library(
    slug="opacus", name="opacus", category="privacy",
    entry="opacus.GradSampleModule(model)  # or PrivacyEngine().make_private(module=..., optimizer=..., ...)",
    names=("GradSampleModule", "PrivacyEngine", "make_private", "DPOptimizer", "add_hooks", "remove_hooks",
           "capture_activations_hook", "capture_backprops_hook", "grad_sample", "_forward_counter",
           "_current_grad_sample", "activations", "forbid_grad_accumulation", "_close", "cleanup",
           "disable_hooks", "enable_hooks"),
    sources=(_SRC + "grad_sample/grad_sample_module.py#L43-L79", _SRC + "grad_sample/grad_sample_module.py#L170-L250",
             _SRC + "grad_sample/grad_sample_module.py#L268-L365", _SRC + "grad_sample/gsm_base.py#L111-L128",
             _SRC + "grad_sample/gsm_base.py#L217-L218", _SRC + "privacy_engine.py#L307-L475"),
    words={
        "en": {"summary": "Every submodule with trainable parameters of its own gets a forward hook "
                          "(`capture_activations_hook`, which appends the detached inputs to `module.activations` "
                          "in training mode with gradients on) and a full backward hook (`capture_backprops_hook`, "
                          "which pops them and writes per-sample gradients to `param.grad_sample`). The model is "
                          "wrapped: the layers are under `_module.`. Two backward passes without an optimizer step "
                          "give a list of two `grad_sample` tensors, not a sum; `make_private` with Poisson "
                          "sampling forbids that and raises on the second backward.",
               "remove": "`gsm._close()` (or `gsm.cleanup()`) removes the hooks and deletes `grad_sample`, "
                         "`_forward_counter` and the other attributes it put on parameters; "
                         "`gsm.disable_hooks()` only makes the hooks return early. Use `gsm._module` to get the "
                         "unwrapped model: the wrapper's `state_dict()` keys start with `_module.`.",
               "api": "No callback API: its hooks sit in PyTorch's dicts in registration order, so a user's full "
                      "backward hook registered before wrapping runs before `grad_sample` is written and one "
                      "registered after sees it. `DPOptimizer.step()` clips and noises from `grad_sample` and "
                      "overwrites `p.grad`."},
        "zh": {"summary": "每个自身带可训练参数的子模块都会挂上一个前向钩子（`capture_activations_hook`：在训练模式且"
                          "开启梯度时，把分离后的输入追加到 `module.activations`）和一个完整反向钩子"
                          "（`capture_backprops_hook`：取出这些输入，把逐样本梯度写进 `param.grad_sample`）。模型被"
                          "包了一层，各层的路径前面多了 `_module.`。两次反向之间不做优化器更新，得到的是两个 "
                          "`grad_sample` 张量组成的列表，而不是相加；`make_private` 开启泊松采样时直接禁止这样做，"
                          "第二次反向就会报错。",
               "remove": "`gsm._close()`（或 `gsm.cleanup()`）会移除钩子，并删掉它挂在参数上的 `grad_sample`、"
                         "`_forward_counter` 等属性；`gsm.disable_hooks()` 只是让钩子直接返回。要拿到原模型，用 "
                         "`gsm._module`：包装后 `state_dict()` 的键都带着 `_module.` 前缀。",
               "api": "opacus 没有回调 API：它的钩子按注册顺序放在 PyTorch 的钩子字典里，所以在包装之前注册的完整"
                      "反向钩子运行时 `grad_sample` 还没写入，包装之后注册的就能看到它。`DPOptimizer.step()` 用 "
                      "`grad_sample` 做裁剪和加噪，并覆盖 `p.grad`。"},
    },
    surprises=(
        {"fact": "facts.extra_forward_then_step_grad_sample",
         "en": "One extra forward with gradients on in training mode (a validation pass without `no_grad`) "
               "leaves an input in `module.activations`: after the next forward and backward, `grad_sample` is "
               "`None`.",
         "zh": "在训练模式、开着梯度时多跑一次前向（比如验证时忘了 `no_grad`），`module.activations` 里就会"
               "留下一份输入：下一次前向加反向之后，`grad_sample` 是 `None`。"},
        {"fact": "facts.eval_mode_backward",
         "en": "Backward through a model in `eval()` raises: the forward hook skips storing inputs in eval mode, "
               "but the backward hook still runs and finds none.",
         "zh": "模型处在 `eval()` 时做反向会报错：前向钩子在 eval 模式下不保存输入，反向钩子却照样运行，"
               "找不到输入。"},
        {"fact": "facts.checkpoint_grad_sample",
         "en": "Under non-reentrant activation checkpointing the recomputed forward runs the forward hook again "
               "and stores the inputs twice: the first layer's `grad_sample` stays `None` after backward.",
         "zh": "在非重入式激活检查点下，重算的那遍前向会再次触发前向钩子，输入被存了两份：反向之后第一层的 "
               "`grad_sample` 仍是 `None`。"},
    ),
)
TARGET = "0"


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    from opacus import GradSampleModule
    return GradSampleModule(model)


def remove(model: nn.Module) -> nn.Module:
    model._close()
    return model


def _outcome(fn) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the library's refusal is the fact
        return f"raises {type(exc).__name__}"
    return "runs"


def facts() -> dict:
    from opacus import GradSampleModule, PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset
    (x,) = inputs()
    model = build()
    has: dict[str, bool] = {}

    def _user_backward(label):
        def hook(module, grad_input, grad_output):
            has.setdefault(label, getattr(module.weight, "grad_sample", None) is not None)
        return hook
    model[0].register_full_backward_hook(_user_backward("yours, before"))
    gsm = GradSampleModule(model)
    model[0].register_full_backward_hook(_user_backward("yours, after"))
    gsm(x).pow(2).sum().backward()
    gsm(x).pow(2).sum().backward()
    sample = model[0].weight.grad_sample
    out = {"user_full_backward_sees_grad_sample": has,
           "grad_sample_after_two_backward": f"list of {len(sample)}" if isinstance(sample, list) else "tensor"}
    gsm._close()
    out["close_leaves_param_attributes"] = sorted(k for p in model.parameters() for k in vars(p))
    model = build()
    gsm = GradSampleModule(model)
    gsm(x)
    gsm(x).sum().backward()
    out["extra_forward_then_step_grad_sample"] = "None" if model[0].weight.grad_sample is None else "set"
    from torch.utils.checkpoint import checkpoint
    model = build()
    gsm = GradSampleModule(model)
    checkpoint(gsm, x, use_reentrant=False).sum().backward()
    out["checkpoint_grad_sample"] = {name: "None" if p.grad_sample is None else "set"
                                     for name, p in model.named_parameters() if name.endswith("weight")}
    gsm = GradSampleModule(build().eval())
    out["eval_mode_backward"] = _outcome(lambda: gsm(x).sum().backward())
    model = build()
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8)), batch_size=4)
    private, _opt, _loader = PrivacyEngine().make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=data,
        noise_multiplier=1.0, max_grad_norm=1.0)
    out["make_private_wraps_in"] = type(private).__name__
    private(x).sum().backward()
    out["make_private_second_backward"] = _outcome(lambda: private(x).sum().backward())
    return out
