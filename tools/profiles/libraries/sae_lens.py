"""sae_lens: ``HookedSAETransformer.add_sae`` registers no hook; it swaps the TransformerLens ``HookPoint`` at the
SAE's ``hook_name`` for an ``_SAEWrapper`` module (setattr on the parent), and ``reset_saes`` puts a *new*
``HookPoint`` back, so hooks that were on the original one are gone for good."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/jbloomAus/SAELens/blob/v6.54.12/sae_lens/analysis/hooked_sae_transformer.py"
LIBRARY = Library(
    slug="sae_lens", name="sae-lens", import_name="sae_lens", requirement="sae-lens==6.54.12",
    category="interpretability and attribution",
    entry="HookedSAETransformer(cfg).add_sae(StandardSAE(StandardSAEConfig(d_in=16, d_sae=32, metadata=...)))",
    names=("HookedSAETransformer", "SAE", "StandardSAE", "StandardSAEConfig", "SAEMetadata", "_SAEWrapper",
           "add_sae", "reset_saes", "run_with_saes", "run_with_cache_with_saes", "run_with_hooks_with_saes",
           "saes", "set_deep_attr", "hook_sae_input", "hook_sae_acts_post", "hook_sae_output", "hook_sae_error",
           "use_error_term"),
    sources=(_SRC + "#L21-L123", _SRC + "#L144-L158", _SRC + "#L199-L269", _SRC + "#L271-L333",
             _SRC + "#L391-L418", _SRC + "#L507-L550"),
    words={
        "en": {"summary": "`add_sae(sae)` builds an `_SAEWrapper` around the SAE (the SAE sits in the wrapper's "
                          "`__dict__`, not as a submodule) and `setattr`s it in place of the `HookPoint` at "
                          "`sae.cfg.metadata.hook_name`; the SAE's own hook points (`hook_sae_input`, "
                          "`hook_sae_acts_post`, `hook_sae_output`...) appear under that path in `hook_dict`. "
                          "PyTorch's hook dicts gain nothing, and the SAE's weights are neither in "
                          "`model.parameters()` nor in `model.state_dict()`. `run_with_saes` and the `saes()` "
                          "context do the same for one call and reset at the end.",
               "remove": "`model.reset_saes()` (or leaving `run_with_saes`) removes the wrapper but installs a "
                         "fresh `HookPoint()`: PyTorch hooks and TransformerLens hooks that were on the original "
                         "`HookPoint` do not come back. Register hooks after `reset_saes`, or by name through "
                         "`add_hook` / `run_with_hooks` each time.",
               "api": "Hooks go on the SAE's hook points by name (`blocks.0.hook_resid_post.hook_sae_acts_post`) "
                      "with TransformerLens's `add_hook` / `run_with_hooks_with_saes`; they are the SAE's own "
                      "`HookPoint` objects, so they stay with the SAE across `add_sae` / `reset_saes`. While an "
                      "SAE is attached, a hook on the replaced `HookPoint` no longer runs."},
        "zh": {"summary": "`add_sae(sae)` 用一个 `_SAEWrapper` 包住 SAE（SAE 存在包装器的 `__dict__` 里，不是子模块），"
                          "再用 `setattr` 把它放到 `sae.cfg.metadata.hook_name` 处，顶替原来的 `HookPoint`；SAE "
                          "自己的钩子点（`hook_sae_input`、`hook_sae_acts_post`、`hook_sae_output` 等）以该路径为前缀"
                          "出现在 `hook_dict` 里。PyTorch 的钩子字典什么也没多，SAE 的权重既不在 "
                          "`model.parameters()` 里，也不在 `model.state_dict()` 里。`run_with_saes` 和 `saes()` "
                          "上下文只在一次调用期间这样做，结束时复位。",
               "remove": "`model.reset_saes()`（或离开 `run_with_saes`）会移走包装器，但放回去的是一个全新的 "
                         "`HookPoint()`：原来那个 `HookPoint` 上的 PyTorch 钩子和 TransformerLens 钩子都回不来了。"
                         "请在 `reset_saes` 之后再注册钩子，或每次都通过 `add_hook` / `run_with_hooks` 按名字添加。",
               "api": "钩子按名字挂到 SAE 的钩子点上（`blocks.0.hook_resid_post.hook_sae_acts_post`），用 "
                      "TransformerLens 的 `add_hook` / `run_with_hooks_with_saes`；这些是 SAE 自己的 `HookPoint` "
                      "对象，所以在 `add_sae` / `reset_saes` 之间跟着 SAE 走。SAE 挂上期间，被顶替的 `HookPoint` "
                      "上的钩子不再运行。"},
    },
    surprises=(
        {"fact": "facts.user_hook_fires",
         "en": "A PyTorch hook on a `HookPoint` stops running once an SAE is attached there, and does not run "
               "again after `reset_saes()` or after `run_with_saes` returns: both put a new `HookPoint` in place.",
         "zh": "挂在 `HookPoint` 上的 PyTorch 钩子，在那里挂上 SAE 之后就不再运行；`reset_saes()` 之后、"
               "`run_with_saes` 返回之后也不会再运行：两者放回去的都是一个新的 `HookPoint`。"},
        {"fact": "facts.sae_parameters_in_model",
         "en": "The attached SAE's weights are not in `model.parameters()` or `model.state_dict()`: an optimizer "
               "built from the model, `model.to(...)` and a checkpoint all miss them.",
         "zh": "挂上的 SAE 的权重不在 `model.parameters()` 或 `model.state_dict()` 里：用模型参数建的优化器、"
               "`model.to(...)` 和检查点都会漏掉它们。"},
    ),
)
TARGET = "blocks.0.hook_resid_post"


def build() -> nn.Module:
    from sae_lens import HookedSAETransformer
    from transformer_lens import HookedTransformerConfig
    cfg = HookedTransformerConfig(n_layers=1, d_model=16, n_ctx=8, d_head=4, n_heads=4, d_mlp=32, d_vocab=11,
                                  act_fn="relu", seed=0, device="cpu")
    return HookedSAETransformer(cfg)


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.tensor([[1, 2, 3, 4]]),)


def _sae():
    from sae_lens import StandardSAE, StandardSAEConfig
    from sae_lens.saes.sae import SAEMetadata
    torch.manual_seed(3)
    return StandardSAE(StandardSAEConfig(d_in=16, d_sae=32, metadata=SAEMetadata(hook_name=TARGET)))


def apply(model: nn.Module) -> nn.Module:
    model.add_sae(_sae())
    return model


def remove(model: nn.Module) -> nn.Module:
    model.reset_saes()
    return model


def facts() -> dict:
    model, (tokens,) = build(), inputs()
    original = model.get_submodule(TARGET)
    fired: list[str] = []
    original.register_forward_hook(lambda m, a, o: fired.append("pytorch"))
    model.add_hook(TARGET, lambda act, hook: fired.append("transformer_lens"))
    keys, params = sorted(model.state_dict()), len(list(model.parameters()))
    sae = _sae()
    runs: dict[str, list[str]] = {}
    for label, step in (("before add_sae", lambda: None), ("with SAE", lambda: model.add_sae(sae)),
                        ("after reset_saes", model.reset_saes)):
        step()
        fired.clear()
        model(tokens)
        runs[label] = list(fired)
        if label == "with SAE":
            out = {"replaced_by": type(model.get_submodule(TARGET)).__name__,
                   "sae_parameters_in_model": len(list(model.parameters())) - params,
                   "state_dict_keys_same": sorted(model.state_dict()) == keys,
                   "sae_hook_points": sorted(k.rsplit(".", 1)[-1] for k in model.hook_dict
                                             if k.startswith(TARGET + "."))}
    out["user_hook_fires"] = runs
    out["original_hook_point_back_after_reset"] = model.get_submodule(TARGET) is original
    model = build()
    original = model.get_submodule(TARGET)
    model.run_with_saes(tokens, saes=[sae])
    out["original_hook_point_back_after_run_with_saes"] = model.get_submodule(TARGET) is original
    return out
