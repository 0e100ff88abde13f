"""diffusers: its ``HookRegistry`` (``apply_group_offloading``, ``apply_layerwise_casting``, the caches) replaces
``forward`` on each module instance with a chain of ``ModelHook`` ``pre_forward`` / ``post_forward`` calls that runs
inside ``__call__``, between the user's forward pre-hooks and forward hooks."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/huggingface/diffusers/blob/v0.42.1/src/diffusers/hooks/"
LIBRARY = Library(
    slug="diffusers", name="diffusers", category="distributed and memory",
    entry="diffusers.hooks.apply_group_offloading(unet, onload_device='cpu', offload_type='leaf_level')",
    names=("HookRegistry", "ModelHook", "HookFunctionReference", "_diffusers_hook", "register_hook", "remove_hook",
           "pre_forward", "post_forward", "new_forward", "apply_group_offloading", "GroupOffloadingHook",
           "enable_group_offload", "apply_layerwise_casting", "LayerwiseCastingHook", "enable_layerwise_casting",
           "apply_first_block_cache", "FirstBlockCacheConfig"),
    sources=(V + "hooks.py#L95-L169", V + "hooks.py#L205-L276", V + "group_offloading.py#L370-L451",
             V + "group_offloading.py#L818-L928", V + "group_offloading.py#L170",
             V + "layerwise_casting.py#L40-L72"),
    words={
        "en": {"summary": "Each hook goes into a `HookRegistry` kept in the module's `_diffusers_hook` attribute, "
                          "and `register_hook` sets a new `forward` on the instance that calls the hook's "
                          "`pre_forward`, the previous `forward` and `post_forward`. PyTorch's hook dicts stay empty; "
                          "the user's forward pre-hooks run before diffusers' `pre_forward` and the user's forward "
                          "hooks after its `post_forward`, so with layerwise casting a user's hook sees the weights "
                          "in the storage dtype (e.g. `float8_e4m3fn`), never in the compute dtype (and backward "
                          "through it fails: the weights are already back in the storage dtype).",
               "remove": "`module._diffusers_hook.remove_hook(name, recurse=True)` on each hooked module (names: "
                         "`\"group_offloading\"`, `\"layerwise_casting\"`, ...): it puts the previous `forward` "
                         "back (`ModelMixin` has `enable_group_offload()` but no method to disable it). Layerwise "
                         "casting cannot be removed: its `deinitalize_hook` raises `NotImplementedError` (load the "
                         "model again).",
               "api": "Subclass `ModelHook` (`initialize_hook`, `pre_forward`, `post_forward`, optional "
                      "`new_forward`, `deinitalize_hook`) and `HookRegistry.check_if_exists_or_initialize(module)"
                      ".register_hook(hook, name)`. The hook registered last is outermost: its `pre_forward` runs "
                      "first and its `post_forward` last."},
        "zh": {"summary": "每个钩子放进模块属性 `_diffusers_hook` 里的 `HookRegistry`，`register_hook` 在实例上设置"
                          "一个新的 `forward`，依次调用钩子的 `pre_forward`、原先的 `forward` 和 `post_forward`。"
                          "PyTorch 的钩子字典保持为空；用户的前向前置钩子在 diffusers 的 `pre_forward` 之前运行，"
                          "前向钩子在它的 `post_forward` 之后运行。所以在逐层类型转换下，用户钩子看到的权重永远是存储"
                          "类型（如 `float8_e4m3fn`），看不到计算类型（反向传播也会失败：那时权重已经转回存储类型）。",
               "remove": "在每个挂了钩子的模块上调用 `module._diffusers_hook.remove_hook(name, recurse=True)`"
                         "（名字如 `\"group_offloading\"`、`\"layerwise_casting\"`），原先的 `forward` 会被放回去"
                         "（`ModelMixin` 有 `enable_group_offload()`，却没有关闭它的方法）。逐层类型转换无法撤销："
                         "它的 `deinitalize_hook` 直接抛 `NotImplementedError`，只能重新加载模型。",
               "api": "继承 `ModelHook`（`initialize_hook`、`pre_forward`、`post_forward`，可选 `new_forward`、"
                      "`deinitalize_hook`），再用 `HookRegistry.check_if_exists_or_initialize(module)"
                      ".register_hook(hook, name)` 注册。最后注册的钩子在最外层：它的 `pre_forward` 最先运行，"
                      "`post_forward` 最后运行。"},
    },
    surprises=(
        {"fact": "facts.layerwise_casting_weight_dtype_seen_by_user_hooks",
         "en": "With `apply_layerwise_casting` the user's forward pre-hook and forward hook both see the weight in "
               "the storage dtype: the cast up and back down happens inside the replaced `forward`.",
         "zh": "用了 `apply_layerwise_casting` 之后，用户的前向前置钩子和前向钩子看到的权重都是存储类型："
               "升精度和降回去都发生在被替换的 `forward` 里面。"},
        {"fact": "probe.survives.deepcopy",
         "en": "A model with group offloading cannot be deep-copied: each `ModuleGroup` keeps a `TorchDeviceBackend` "
               "that holds the `torch.cpu` / `torch.cuda` module, and `copy.deepcopy` raises `TypeError`.",
         "zh": "开启分组卸载的模型无法 `copy.deepcopy`：每个 `ModuleGroup` 都持有一个 `TorchDeviceBackend`，"
               "里面存着 `torch.cpu` / `torch.cuda` 这个 Python 模块对象，深拷贝时抛 `TypeError`。"},
        {"fact": "facts.registry_order",
         "en": "In one module's `HookRegistry` the hook registered last runs its `pre_forward` first.",
         "zh": "同一个模块的 `HookRegistry` 里，最后注册的钩子最先运行 `pre_forward`。"},
    ),
)
TARGET = "conv_in"


def build() -> nn.Module:
    from diffusers import UNet2DModel
    return UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
                       norm_num_groups=4, down_block_types=("DownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "UpBlock2D"))


def inputs() -> tuple[torch.Tensor, ...]:
    return torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)), torch.tensor([3])


def apply(model: nn.Module) -> nn.Module:
    from diffusers.hooks import apply_group_offloading
    apply_group_offloading(model, onload_device=torch.device("cpu"), offload_device=torch.device("cpu"),
                           offload_type="leaf_level")
    return model


def remove(model: nn.Module) -> nn.Module:
    for module in model.modules():
        if hasattr(module, "_diffusers_hook"):
            module._diffusers_hook.remove_hook("group_offloading", recurse=False)
    return model


def facts() -> dict:
    from diffusers.hooks import HookRegistry, ModelHook, apply_layerwise_casting

    model = build()
    apply_layerwise_casting(model, storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)
    seen: dict[str, str] = {}

    def note(kind: str):  # a user's hook that only looks (returns None)
        return lambda module, *_: seen.__setitem__(kind, str(module.weight.dtype).removeprefix("torch."))

    model.conv_in.register_forward_pre_hook(note("forward_pre"))
    model.conv_in.register_forward_hook(note("forward"))
    out = model(*inputs()).sample
    try:
        out.float().pow(2).mean().backward()
        backward = "runs"
    except RuntimeError as exc:
        backward = f"raises {type(exc).__name__}"
    try:
        model.conv_in._diffusers_hook.remove_hook("layerwise_casting")
        removal = "removed"
    except NotImplementedError as exc:
        removal = f"raises {type(exc).__name__}"

    log: list[str] = []

    class Logged(ModelHook):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def pre_forward(self, module, *args, **kwargs):
            log.append(f"{self.name}: pre_forward")
            return args, kwargs

        def post_forward(self, module, output):
            log.append(f"{self.name}: post_forward")
            return output

    layer = nn.Linear(2, 2)
    layer.register_forward_pre_hook(lambda *_: log.append("yours: forward_pre"))
    layer.register_forward_hook(lambda *_: log.append("yours: forward"))
    registry = HookRegistry.check_if_exists_or_initialize(layer)
    registry.register_hook(Logged("registered first"), "first")
    registry.register_hook(Logged("registered second"), "second")
    layer(torch.ones(1, 2))
    return {"layerwise_casting_weight_dtype_seen_by_user_hooks": seen, "layerwise_casting_backward": backward,
            "layerwise_casting_remove_hook": removal, "registry_order": log}
