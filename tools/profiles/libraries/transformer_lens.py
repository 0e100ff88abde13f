"""transformer_lens: every activation passes through an identity ``HookPoint`` module; ``add_hook`` puts the user's
``fn(activation, hook)`` there as a plain PyTorch forward hook (``dir="bwd"``: a full backward hook) and keeps the
handle in ``hook_point.fwd_hooks`` / ``bwd_hooks``, which ``reset_hooks`` removes."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/TransformerLensOrg/TransformerLens/blob/v3.9.0/transformer_lens/"
LIBRARY = Library(
    slug="transformer_lens", name="transformer-lens", import_name="transformer_lens",
    requirement="transformer-lens==3.9.0", category="interpretability and attribution",
    entry="model.add_hook('blocks.0.hook_resid_post', fn)  # HookedTransformer(HookedTransformerConfig(...))",
    names=("HookedTransformer", "HookedTransformerConfig", "HookedRootModule", "HookPoint", "LensHandle",
           "add_hook", "add_perma_hook", "reset_hooks", "remove_all_hook_fns", "run_with_hooks", "run_with_cache",
           "hooks", "hook_dict", "ActivationCache", "fwd_hooks", "bwd_hooks", "reset_hooks_end"),
    sources=(_SRC + "hook_points.py#L142-L290", _SRC + "hook_points.py#L331-L353",
             _SRC + "HookedRootModule.py#L104-L116", _SRC + "HookedRootModule.py#L248-L323",
             _SRC + "HookedRootModule.py#L381-L443"),
    words={
        "en": {"summary": "The model is a tree of ordinary modules with `HookPoint`s (identity modules) at every "
                          "activation: `blocks.0.hook_resid_post`, `blocks.0.attn.hook_pattern`... "
                          "`add_hook(name, fn)` wraps `fn(activation, hook)` and registers it with "
                          "`register_forward_hook` on that `HookPoint` (`dir=\"bwd\"`: "
                          "`register_full_backward_hook`); `run_with_hooks` and `run_with_cache` add hooks for "
                          "one call and remove them at its end. Nothing else is put on the model. TransformerLens "
                          "4.0 removed `HookedTransformer` in favour of `TransformerBridge`; `HookPoint` stays.",
               "remove": "`model.reset_hooks()` removes every hook added through TransformerLens (not the "
                         "permanent ones: `including_permanent=True`) and leaves hooks registered with PyTorch's "
                         "own `register_*_hook` on a `HookPoint`. `hook_point.remove_hooks()` alone removes only "
                         "forward hooks: its `dir` defaults to `\"fwd\"`.",
               "api": "Hook functions `fn(activation, hook)` return `None` or a replacement. They sit in the "
                      "`HookPoint`'s PyTorch dicts, so TransformerLens hooks and a user's PyTorch hooks on the "
                      "same `HookPoint` run in registration order (`add_hook(..., prepend=True)` goes first). "
                      "`run_with_hooks(bwd_hooks=...)` logs a warning that the backward hooks are removed before "
                      "any backward; they still run in the backward of that call, since PyTorch takes a module's "
                      "full backward hooks when its forward runs, and are gone for the next step."},
        "zh": {"summary": "模型由普通模块组成，每个激活值都经过一个 `HookPoint`（恒等模块）："
                          "`blocks.0.hook_resid_post`、`blocks.0.attn.hook_pattern` 等。`add_hook(name, fn)` "
                          "把 `fn(activation, hook)` 包一层，再用 `register_forward_hook` 注册到那个 `HookPoint` "
                          "上（`dir=\"bwd\"` 时用 `register_full_backward_hook`）；`run_with_hooks` 和 "
                          "`run_with_cache` 只在一次调用期间添加钩子，结束时移除。除此之外它不往模型上加任何东西。"
                          "TransformerLens 4.0 移除了 `HookedTransformer`，改用 `TransformerBridge`，`HookPoint` "
                          "仍然保留。",
               "remove": "`model.reset_hooks()` 会移除所有通过 TransformerLens 添加的钩子（永久钩子除外，需要 "
                         "`including_permanent=True`），而用 PyTorch 自己的 `register_*_hook` 挂在 `HookPoint` 上的"
                         "钩子不受影响。单独调用 `hook_point.remove_hooks()` 只移除前向钩子：它的 `dir` 默认是 "
                         "`\"fwd\"`。",
               "api": "钩子函数签名是 `fn(activation, hook)`，返回 `None` 或替换值。它们就放在 `HookPoint` 的 "
                      "PyTorch 钩子字典里，所以同一个 `HookPoint` 上的 TransformerLens 钩子和用户的 PyTorch 钩子按"
                      "注册顺序运行（`add_hook(..., prepend=True)` 排在最前）。`run_with_hooks(bwd_hooks=...)` 会"
                      "打出一条警告，说反向钩子在反向之前就被移除了；实际上它们仍会在这次调用的反向中运行，因为 PyTorch "
                      "在模块前向时就取定了它的完整反向钩子，到下一步才真正消失。"},
    },
    surprises=(
        {"fact": "facts.run_with_hooks_bwd_fires",
         "en": "`run_with_hooks` warns that it removes backward hooks before a backward can occur, yet they run "
               "once in the backward of that forward: PyTorch fixes a module's full backward hooks during its "
               "forward. The next step no longer has them.",
         "zh": "`run_with_hooks` 警告说反向钩子会在反向之前被移除，可它们仍会在那次前向对应的反向中运行一次："
               "PyTorch 在模块前向时就取定了完整反向钩子。到下一步它们才不在了。"},
        {"fact": "facts.hook_point_remove_hooks_leaves_bwd",
         "en": "`hook_point.remove_hooks()` leaves the backward hooks in place: its `dir` defaults to `\"fwd\"` "
               "(`model.reset_hooks()` defaults to both).",
         "zh": "`hook_point.remove_hooks()` 不会移除反向钩子：它的 `dir` 默认是 `\"fwd\"`"
               "（而 `model.reset_hooks()` 默认两个方向都移除）。"},
    ),
)
TARGET = "blocks.0.hook_resid_post"


def build() -> nn.Module:
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    cfg = HookedTransformerConfig(n_layers=1, d_model=16, n_ctx=8, d_head=4, n_heads=4, d_mlp=32, d_vocab=11,
                                  act_fn="relu", seed=0, device="cpu")
    return HookedTransformer(cfg)


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.tensor([[1, 2, 3, 4]]),)


def _keep(activation, hook):
    hook.ctx["seen"] = hook.ctx.get("seen", 0) + 1


def apply(model: nn.Module) -> nn.Module:
    model.add_hook(TARGET, _keep)
    model.add_hook(TARGET, _keep, dir="bwd")
    return model


def remove(model: nn.Module) -> nn.Module:
    model.reset_hooks()
    return model


def facts() -> dict:
    model, (tokens,) = build(), inputs()
    point = model.get_submodule(TARGET)
    log: list[str] = []

    def _torch(label):
        return lambda *args: log.append(label)
    point.register_forward_hook(_torch("yours, before: forward"))
    point.register_full_backward_hook(_torch("yours, before: backward"))
    model.add_hook(TARGET, lambda a, hook: log.append("add_hook fwd"))
    model.add_hook(TARGET, lambda a, hook: log.append("add_hook fwd, prepend"), prepend=True)
    model.add_hook(TARGET, lambda a, hook: log.append("add_hook bwd"), dir="bwd")
    point.register_forward_hook(_torch("yours, after: forward"))
    point.register_full_backward_hook(_torch("yours, after: backward"))
    model(tokens).sum().backward()
    out = {"order": list(log)}
    model.reset_hooks()
    out["reset_hooks_keeps_pytorch_hooks"] = [len(point._forward_hooks), len(point._backward_hooks)]
    log.clear()
    model.run_with_hooks(tokens, fwd_hooks=[(TARGET, lambda a, hook: log.append("fwd"))],
                         bwd_hooks=[(TARGET, lambda a, hook: log.append("bwd"))]).sum().backward()
    model(tokens).sum().backward()
    out["run_with_hooks_bwd_fires"] = log.count("bwd")
    with model.hooks(bwd_hooks=[(TARGET, lambda a, hook: log.append("bwd kept"))], reset_hooks_end=False):
        model(tokens).sum().backward()
    out["hooks_reset_hooks_end_false_bwd_fires"] = log.count("bwd kept")
    model.reset_hooks()
    model.add_hook(TARGET, _keep)
    model.add_hook(TARGET, _keep, dir="bwd")
    point.remove_hooks()
    out["hook_point_remove_hooks_leaves_bwd"] = len(point.bwd_hooks)
    model.reset_hooks()
    grads: list[bool] = []
    point.register_forward_hook(lambda *a: grads.append(torch.is_grad_enabled()))
    _logits, cache = model.run_with_cache(tokens)
    out.update(run_with_cache_grad_enabled=grads[-1], run_with_cache_hooks_left=len(point.fwd_hooks),
               cache_has_target=TARGET in cache, hook_points=len(model.hook_dict))
    return out
