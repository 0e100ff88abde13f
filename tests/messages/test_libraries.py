"""Trigger tests: the pinned libraries' own messages about hooks (accelerate, diffusers, PEFT, captum, timm,
Lightning). Small models built from code or configs; nothing is downloaded."""
from __future__ import annotations

import sys
import warnings

import pytest
import torch
from torch import nn

from message_triggers import fix, fix_all, fixes_of, outcome, registered_fixes, trigger, triggers_of


@pytest.fixture(autouse=True)
def _peft_warn_once_caches_cleared():
    """PEFT's ShiRA and Super-Tuning layers warn about hooks once per layer through a functools.lru_cache on the
    layer, which keeps every layer it warned about, and the model and hooks behind it, alive for the process: each
    test empties it, so no hooked module outlives the test that made it."""
    yield
    for name in ("peft.tuners.shira.layer", "peft.tuners.supertuning.layer"):
        warn_once = getattr(sys.modules.get(name), "_warn_once_about_module_hooks", None)
        if warn_once is not None:
            warn_once.cache_clear()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


# --- accelerate ---------------------------------------------------------------------------------------------

@trigger("you-shouldn-t-move-a-model-that-is-dispatched-dedc65")
def accelerate_dispatched_model_moved():
    from accelerate import dispatch_model
    model = dispatch_model(_mlp(), device_map={"0": "cpu", "1": "cpu", "2": "cpu"}, force_hooks=True)
    model.to("cpu")


class _SlidingConfig:
    layer_types = ["full_attention", "sliding_attention"]


@trigger("context-parallelism-does-not-support-attention-layers-of-bdd4e8")
def accelerate_context_parallel_hooks_on_a_sliding_window_model():
    from accelerate.big_modeling import _attach_context_parallel_hooks  # what context parallelism calls
    model = _mlp()
    model.config = _SlidingConfig()
    _attach_context_parallel_hooks(model)


# --- diffusers ----------------------------------------------------------------------------------------------

class _Blocks(nn.Module):
    """A tiny transformer-like module: its blocks in ``transformer_blocks``, as diffusers' helpers look for."""

    def __init__(self):
        super().__init__()
        self.transformer_blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x):
        for block in self.transformer_blocks:
            x = block(x)
        return x


@trigger("hook-with-name-already-exists-in-the-registry-please-93ba3f")
def diffusers_two_hooks_with_one_name():
    from diffusers.hooks import HookRegistry, ModelHook
    registry = HookRegistry.check_if_exists_or_initialize(_mlp())
    registry.register_hook(ModelHook(), "mine")
    registry.register_hook(ModelHook(), "mine")


@trigger("this-hook-is-stateful-and-needs-to-implement-the-aae5a4")
def diffusers_stateful_hook_without_reset_state():
    from diffusers.hooks import HookRegistry, ModelHook

    class Stateful(ModelHook):
        _is_stateful = True
    registry = HookRegistry.check_if_exists_or_initialize(_mlp())
    registry.register_hook(Stateful(), "stateful")
    registry.reset_stateful_hooks()


def _layer_skip(**options):
    from diffusers.hooks import LayerSkipConfig, apply_layer_skip
    apply_layer_skip(_Blocks(), LayerSkipConfig(**options))


@trigger("cannot-set-both-skip-attention-and-skip-attention-scores-4b8134")
def diffusers_layer_skip_of_attention_and_its_scores():
    _layer_skip(indices=[0], skip_attention=True, skip_attention_scores=True)


@trigger("cannot-set-skip-attention-scores-to-true-when-dropout-ba5987")
def diffusers_layer_skip_of_scores_with_dropout():
    _layer_skip(indices=[0], skip_attention=False, skip_attention_scores=True, dropout=0.5)


@trigger("layer-index-list-is-empty-please-provide-a-non-866f72")
def diffusers_layer_skip_of_no_layer():
    _layer_skip(indices=[])


@trigger("could-not-find-a-suitable-identifier-for-the-transformer-776f39")
def diffusers_layer_skip_on_a_model_without_blocks():
    from diffusers.hooks import LayerSkipConfig, apply_layer_skip
    apply_layer_skip(_mlp(), LayerSkipConfig(indices=[0]))


@trigger("could-not-find-in-the-provided-module-or-configured-a5709f")
def diffusers_layer_skip_with_a_wrong_fqn():
    _layer_skip(indices=[0], fqn="blocks")


@trigger("could-not-find-any-transformer-blocks-matching-the-provi-90da1f")
def diffusers_layer_skip_of_a_missing_index():
    _layer_skip(indices=[7], fqn="transformer_blocks")


@trigger("mag-ratios-must-be-provided-for-magcache-inference-becau-8bc72b")
def diffusers_magcache_without_ratios():
    from diffusers.hooks import MagCacheConfig
    MagCacheConfig()


@trigger("magcache-no-transformer-blocks-found-to-apply-hooks-01530e")
def diffusers_magcache_on_a_model_without_blocks():
    from diffusers.hooks import MagCacheConfig, apply_mag_cache
    apply_mag_cache(_mlp(), MagCacheConfig(calibrate=True))


@trigger("cannot-apply-group-offloading-to-a-module-that-is-bdf4d5")
def diffusers_group_offloading_after_accelerate_offloading():
    from accelerate import cpu_offload
    from diffusers.hooks import apply_group_offloading
    model = _mlp()
    cpu_offload(model, execution_device=torch.device("cpu"))
    apply_group_offloading(model, onload_device=torch.device("cpu"), offload_type="block_level", num_blocks_per_group=1)


# --- PEFT ---------------------------------------------------------------------------------------------------

def _lora(train: bool):
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(_mlp(), LoraConfig(target_modules=["0"], r=2))
    return model.train(train)


@trigger("cannot-pass-adapter-names-when-the-model-is-in-1fdc04")
def peft_adapter_names_in_training_mode():
    _lora(True)(torch.ones(1, 4), adapter_names=["default"])


@trigger("trying-to-infer-with-non-existing-adapter-s-6a4c85")
def peft_adapter_names_of_a_missing_adapter():
    _lora(False)(torch.ones(1, 4), adapter_names=["other"])


@trigger("got-adapter-names-of-type-expected-a-list-of-c52141")
def peft_adapter_names_not_a_list_under_beam_search():
    from collections import UserList
    _lora(False)(torch.ones(1, 4), adapter_names=UserList(["default"]), num_beams=2)


@trigger("if-sim-thresh-is-a-tensor-with-more-than-892b06")
def peft_eva_svd_hook_with_a_wrong_threshold():
    from peft.tuners.lora.eva import SVDHook
    SVDHook(n_components=2, sim_thresh=torch.ones(3), name="layer")


@trigger("one-of-the-base-layers-adapted-with-shira-has-979564")
def peft_shira_on_a_layer_with_a_hook():
    from peft import ShiraConfig, get_peft_model
    model = _mlp()
    model[0].register_forward_hook(lambda *args: None)
    peft_model = get_peft_model(model, ShiraConfig(target_modules=["0"], r=2))
    peft_model(torch.ones(1, 4))


# --- captum -------------------------------------------------------------------------------------------------

@trigger("setting-forward-backward-hooks-and-attributes-on-non-lin-750559")
def captum_deeplift_attribution():
    from captum.attr import DeepLift
    DeepLift(_mlp()).attribute(torch.ones(1, 4), target=0)


@trigger("setting-backward-hooks-on-relu-activations-the-hooks-wil-3d4494")
def captum_guided_backprop_attribution():
    from captum.attr import GuidedBackprop
    GuidedBackprop(_mlp()).attribute(torch.ones(1, 4, requires_grad=True), target=0)


@trigger("given-model-must-be-an-instance-of-torch-nn-9309c7")
def captum_guided_backprop_of_a_function():
    from captum.attr import GuidedBackprop
    GuidedBackprop(lambda x: x)


@trigger("module-is-being-used-more-than-once-in-the-ce73a3")
def captum_lrp_with_a_layer_used_twice():
    from captum.attr import LRP

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 4)

        def forward(self, x):
            return self.layer(self.layer(x))
    LRP(Twice()).attribute(torch.ones(1, 4), target=0)


@trigger("forward-hook-did-not-obtain-any-outputs-for-given-3ffd5e")
def captum_layer_attribution_of_an_unused_layer():
    from captum.attr import LayerActivation

    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.used(x)
    model = WithUnused()
    LayerActivation(model, model.unused).attribute(torch.ones(1, 4))


@trigger("backward-hooks-not-supported-for-module-with-1-output-17513d")
def captum_deeplift_on_a_max_pool_returning_indices():
    from captum.attr import DeepLift

    class PoolWithIndices(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool, self.layer = nn.MaxPool1d(2, return_indices=True), nn.Linear(2, 1)

        def forward(self, x):
            return self.layer(self.pool(x)[0])
    DeepLift(PoolWithIndices()).attribute(torch.ones(1, 1, 4), target=0)


@trigger("backward-hooks-not-supported-for-module-with-1-input-360281")
def captum_sample_gradients_of_a_linear_with_two_inputs():
    from captum._utils.sample_gradient import SampleGradientWrapper  # what TracInCP's per-sample gradients use

    class ScaledLinear(nn.Linear):  # a Linear subclass (hooked like a Linear) whose forward takes a second input
        def forward(self, x, scale):
            return super().forward(x) * scale
    layer = ScaledLinear(4, 2)
    SampleGradientWrapper(layer).add_hooks()
    layer(torch.ones(3, 4, requires_grad=True), torch.ones(3, 1))


# --- timm ---------------------------------------------------------------------------------------------------

@trigger("unsupported-hook-type-64c111")
def timm_feature_hooks_of_an_unknown_type():
    from timm.models._features import FeatureHooks
    model = _mlp()
    FeatureHooks([{"module": "0", "hook_type": "backward"}], model.named_modules())


@trigger("return-layers-are-not-present-in-model-ba787f")
def timm_feature_hook_net_of_a_missing_layer():
    from timm.models._features import FeatureHookNet
    model = _mlp()
    model.feature_info = [{"module": "missing", "num_chs": 4, "reduction": 1}]
    FeatureHookNet(model, out_indices=(0,), flatten_sequential=True)


@trigger("please-provide-hook-fns-for-each-hook-fn-locs-3508f9")
def timm_activation_stats_hook_with_unmatched_lists():
    from timm.utils.model import ActivationStatsHook
    ActivationStatsHook(_mlp(), hook_fn_locs=["0", "2"], hook_fns=[lambda *args: None])


# diffusers' context-parallel hooks check their plan before they shard anything: one process, no device mesh

def _context_parallel(forward, plan=None, gather=None):
    from diffusers.hooks import HookRegistry
    from diffusers.hooks.context_parallel import ContextParallelGatherHook, ContextParallelSplitHook

    class Model(nn.Module):
        pass
    Model.forward = forward
    model = Model()
    registry = HookRegistry.check_if_exists_or_initialize(model)
    if gather is None:
        registry.register_hook(ContextParallelSplitHook(plan, parallel_config=None), "cp_split")
    else:
        registry.register_hook(ContextParallelGatherHook(gather, parallel_config=None), "cp_gather")
    return model


def _cp_input(**options):
    from diffusers.models._modeling_parallel import ContextParallelInput
    return ContextParallelInput(**{"split_dim": 1, "expected_dims": 2, **options})


@trigger("expected-input-model-plan-to-have-elements-but-got-3bea0d")
def diffusers_context_parallel_plan_shorter_than_the_input_list():
    model = _context_parallel(lambda self, xs: xs[0], {"xs": [_cp_input(), _cp_input()]})
    model([torch.ones(2, 4)] * 3)


@trigger("unsupported-input-type-59b453")
def diffusers_context_parallel_input_that_is_no_tensor():
    model = _context_parallel(lambda self, x: torch.ones(1), {"x": _cp_input()})
    model(3)


@trigger("expected-input-tensor-to-have-dimensions-but-got-dimensi-79aa21")
def diffusers_context_parallel_input_of_other_dimensions():
    model = _context_parallel(lambda self, x: x, {"x": _cp_input(expected_dims=3)})
    model(torch.ones(2, 4))


@trigger("expected-output-to-be-a-tensor-or-a-list-2302a1")
def diffusers_context_parallel_output_that_is_a_dict():
    model = _context_parallel(lambda self, x: {"out": x}, {"x": _cp_input(expected_dims=3)})
    model(torch.ones(2, 4))


@trigger("index-out-of-bounds-for-output-of-length-277258")
def diffusers_context_parallel_output_index_past_the_outputs():
    model = _context_parallel(lambda self, x: x, {3: _cp_input(split_output=True)})
    model(torch.ones(2, 4))


@trigger("expected-output-to-have-elements-but-got-4861b0")
def diffusers_context_parallel_gather_of_fewer_outputs():
    model = _context_parallel(lambda self, x: x, gather=[None, None])
    model(torch.ones(2, 4))


@trigger("beam-search-not-yet-supported-for-alora-bc48b7")
def peft_alora_generation_with_beam_search():
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(_tiny_llama(), LoraConfig(r=2, target_modules=["q_proj", "v_proj"],
                                                                alora_invocation_tokens=[5, 6], task_type="CAUSAL_LM"))
    model.generate(input_ids=torch.tensor([[1, 2, 5, 6, 3]]), max_new_tokens=2, num_beams=2, do_sample=False)


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


@trigger("multiple-invocations-of-peft-forward-hooks-before-backwa-68848b")
def peft_alora_with_gradient_checkpointing_two_forwards_before_backward():
    from peft import LoraConfig, get_peft_model
    model = _tiny_llama()
    model.gradient_checkpointing_enable()
    model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], alora_invocation_tokens=[5, 6],
                                             task_type="CAUSAL_LM"))
    model.train()
    ids = torch.tensor([[1, 2, 5, 6, 3]])
    (model(input_ids=ids, labels=ids).loss + model(input_ids=ids, labels=ids).loss).backward()


@trigger("invalid-value-found-in-input-please-check-your-input-5a0433")
def peft_corda_preprocessing_on_data_with_nan():
    from peft import LoraConfig
    from peft.tuners.lora.config import CordaConfig
    from peft.tuners.lora.corda import preprocess_corda
    model = _mlp()
    config = LoraConfig(r=2, target_modules=["0"], init_lora_weights="corda", corda_config=CordaConfig())
    data = [torch.randn(8, 4), torch.full((8, 4), float("nan"))]
    preprocess_corda(model, config, run_model=lambda: [model(x) for x in data])


@trigger("one-of-the-base-layers-adapted-with-super-tuning-3098e7")
def peft_super_tuning_on_a_layer_with_a_forward_hook():
    import peft
    model = _mlp()
    model[0].register_forward_hook(lambda m, i, o: None)
    peft.get_peft_model(model, peft.SupertuningConfig(target_modules=["0"], sparsity=0.5))(torch.ones(1, 4))


@trigger("magcache-dimension-mismatch-input-residual-cannot-apply-d54755")
def diffusers_mag_cache_step_with_another_sequence_length():
    from diffusers.hooks import MagCacheConfig, apply_mag_cache
    from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry

    class Block(nn.Module):  # a transformer block as diffusers' registry describes one
        def forward(self, hidden_states):
            return hidden_states * 2
    TransformerBlockRegistry.register(Block, TransformerBlockMetadata(return_hidden_states_index=0))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer_blocks = nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for block in self.transformer_blocks:
                x = block(x)
            return x
    model = Transformer()
    apply_mag_cache(model, MagCacheConfig(mag_ratios=torch.ones(4), num_inference_steps=4, retention_ratio=0.0,
                                          threshold=10.0, max_skip_steps=10))
    model(torch.ones(1, 8, 4))  # computed: its residual is kept
    model(torch.ones(1, 4, 4))  # skipped: the kept residual is for 8 positions


# --- fixes: each trigger's program corrected as its message (or the library's docs) says --------------------------

def _same(a, b) -> bool:
    return bool(torch.allclose(a, b, atol=1e-6))


@fix("you-shouldn-t-move-a-model-that-is-dispatched-dedc65",
     en="take accelerate's hooks off (remove_hook_from_module), then move the model",
     zh="先用 remove_hook_from_module 摘掉 accelerate 的钩子，再移动模型")
def accelerate_remove_the_dispatch_hooks_then_move():
    from accelerate import dispatch_model
    from accelerate.hooks import remove_hook_from_module
    model = dispatch_model(_mlp(), device_map={"0": "cpu", "1": "cpu", "2": "cpu"}, force_hooks=True)
    x = torch.ones(1, 4)
    expected = model(x)
    remove_hook_from_module(model, recurse=True)  # the hooks own the devices: take them off, then move
    model.to("cpu")
    return {"hooks_left": sum(hasattr(m, "_hf_hook") for m in model.modules()), "same_output": _same(model(x), expected)}


@fix("context-parallelism-does-not-support-attention-layers-of-bdd4e8",
     en="context parallelism on a model whose layers all use full causal attention",
     zh="只对所有层都是完整因果注意力的模型使用上下文并行")
def accelerate_context_parallel_hooks_on_a_full_attention_model():
    from accelerate.big_modeling import _attach_context_parallel_hooks
    model = _tiny_llama()  # Llama: full causal attention in every layer (no sliding window), as context parallelism needs
    _attach_context_parallel_hooks(model)
    seen = []
    model.model.layers[0].self_attn.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append((kwargs.get("attention_mask"), kwargs.get("is_causal"))), with_kwargs=True)
    ids = torch.tensor([[1, 2, 3, 4]])
    model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return {"mask_dropped": seen[0][0] is None, "is_causal": seen[0][1]}


def _dit():
    """A tiny DiT: two of diffusers' BasicTransformerBlock (attention + feed-forward) in ``transformer_blocks``."""
    from diffusers.models.attention import BasicTransformerBlock

    class DiT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(8, 2, 4) for _ in range(2)])

        def forward(self, hidden_states):
            for block in self.transformer_blocks:
                hidden_states = block(hidden_states)
            return hidden_states
    torch.manual_seed(0)
    return DiT().eval()


def _layer_skip_fixed(**options):
    """The tiny DiT with layer skip on block 0: does the output change; with the whole block skipped, is it block 1
    alone; with its attention scores skipped, does its self-attention return its projected values?"""
    from diffusers.hooks import LayerSkipConfig, apply_layer_skip
    model, x = _dit(), torch.randn(1, 3, 8, generator=torch.Generator().manual_seed(0))
    attention, seen = model.transformer_blocks[0].attn1, {}
    handle = attention.register_forward_hook(lambda m, args, out: seen.update(h=args[0], out=out))
    try:
        with torch.no_grad():
            plain, block_1_alone = model(x), model.transformer_blocks[1](x)
            apply_layer_skip(model, LayerSkipConfig(**options))
            out = model(x)
            if options.get("skip_attention_scores"):
                values = attention.to_out[0](attention.to_v(seen["h"]))  # softmax(QK^T)V with the scores left out
                return {"changed": not _same(out, plain), "attention_returns_values": _same(seen["out"], values)}
    finally:
        handle.remove()
    return {"changed": not _same(out, plain), "is_block_1_alone": _same(out, block_1_alone)}


@fix("hook-with-name-already-exists-in-the-registry-please-93ba3f",
     en="give each hook its own name in the HookRegistry (or remove_hook the old one first)",
     zh="在 HookRegistry 里给每个钩子起不同的名字（或先 remove_hook 旧的）")
def diffusers_two_hooks_with_two_names():
    from diffusers.hooks import HookRegistry, ModelHook
    registry = HookRegistry.check_if_exists_or_initialize(_mlp())
    registry.register_hook(ModelHook(), "mine")
    registry.register_hook(ModelHook(), "mine_too")  # another name (or registry.remove_hook("mine") first)
    return sorted(registry.hooks)


@fix("this-hook-is-stateful-and-needs-to-implement-the-aae5a4",
     en="a stateful hook implements reset_state, which reset_stateful_hooks calls",
     zh="有状态的钩子实现 reset_state，reset_stateful_hooks 会调用它")
def diffusers_stateful_hook_with_reset_state():
    from diffusers.hooks import HookRegistry, ModelHook

    class Counting(ModelHook):
        _is_stateful = True

        def __init__(self):
            super().__init__()
            self.calls = 0

        def pre_forward(self, module, *args, **kwargs):
            self.calls += 1
            return args, kwargs

        def reset_state(self, module):
            self.calls = 0
            return module
    model, hook = _mlp(), Counting()
    registry = HookRegistry.check_if_exists_or_initialize(model)
    registry.register_hook(hook, "stateful")
    model(torch.ones(1, 4))
    before = hook.calls
    registry.reset_stateful_hooks()
    return {"calls_before_reset": before, "calls_after_reset": hook.calls}


@fix("cannot-set-both-skip-attention-and-skip-attention-scores-4b8134",
     en="skip the attention scores only: skip_attention=False, skip_attention_scores=True",
     zh="只跳过注意力分数：skip_attention=False，skip_attention_scores=True")
def diffusers_layer_skip_of_attention_scores_only():
    return _layer_skip_fixed(indices=[0], skip_attention=False, skip_attention_scores=True, skip_ff=False)


@fix("cannot-set-skip-attention-scores-to-true-when-dropout-ba5987",
     en="skip_attention_scores with dropout=1.0, the only dropout it takes",
     zh="skip_attention_scores 只能配 dropout=1.0")
def diffusers_layer_skip_of_scores_with_the_default_dropout():
    return _layer_skip_fixed(indices=[0], skip_attention=False, skip_attention_scores=True, skip_ff=False, dropout=1.0)


@fix("layer-index-list-is-empty-please-provide-a-non-866f72",
     en="list the blocks to skip in indices (here block 0)",
     zh="在 indices 里列出要跳过的块（这里是第 0 块）")
def diffusers_layer_skip_of_the_first_layer():
    return _layer_skip_fixed(indices=[0])


@fix("could-not-find-a-suitable-identifier-for-the-transformer-776f39",
     en="a model whose blocks sit in a ModuleList of a usual name (transformer_blocks), or give fqn",
     zh="模型的块放在常用名字的 ModuleList（transformer_blocks）里，或者给出 fqn")
def diffusers_layer_skip_on_a_model_with_transformer_blocks():
    return _layer_skip_fixed(indices=[0])  # blocks found by their usual name, transformer_blocks


@fix("could-not-find-in-the-provided-module-or-configured-a5709f",
     en="fqn names the ModuleList of blocks: transformer_blocks",
     zh="fqn 要指向块所在的 ModuleList：transformer_blocks")
def diffusers_layer_skip_with_the_right_fqn():
    return _layer_skip_fixed(indices=[0], fqn="transformer_blocks")


@fix("could-not-find-any-transformer-blocks-matching-the-provi-90da1f",
     en="indices within the number of blocks (two blocks: 0 and 1)",
     zh="indices 不超过块的数量（两块：0 和 1）")
def diffusers_layer_skip_of_an_existing_index():
    return _layer_skip_fixed(indices=[0], fqn="transformer_blocks")  # 2 blocks: indices 0 and 1


def _mag_cache_model():
    from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry

    class Block(nn.Module):  # a transformer block as diffusers' registry describes one
        def forward(self, hidden_states):
            return hidden_states * 2
    TransformerBlockRegistry.register(Block, TransformerBlockMetadata(return_hidden_states_index=0))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer_blocks = nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for block in self.transformer_blocks:
                x = block(x)
            return x
    return Transformer()


@fix("mag-ratios-must-be-provided-for-magcache-inference-becau-8bc72b",
     en="run once with MagCacheConfig(calibrate=True) to get the model's mag_ratios",
     zh="先用 MagCacheConfig(calibrate=True) 跑一遍，得到模型的 mag_ratios")
def diffusers_magcache_calibrated_first():
    from diffusers.hooks import MagCacheConfig, apply_mag_cache
    model = _mag_cache_model()
    apply_mag_cache(model, MagCacheConfig(calibrate=True, num_inference_steps=2))  # step 1 of the message's advice
    outputs = [model(torch.ones(1, 2, 4)) for _ in range(2)]  # calibration skips nothing
    return {"steps": len(outputs), "all_computed": all(_same(o, torch.full((1, 2, 4), 4.0)) for o in outputs)}


@fix("magcache-no-transformer-blocks-found-to-apply-hooks-01530e",
     en="MagCache on a model with registered transformer blocks in transformer_blocks",
     zh="对 transformer_blocks 里有已注册 Transformer 块的模型使用 MagCache")
def diffusers_magcache_on_a_model_with_blocks():
    from diffusers.hooks import MagCacheConfig, apply_mag_cache
    model = _mag_cache_model()
    apply_mag_cache(model, MagCacheConfig(calibrate=True))
    return {"hooked_blocks": sum(hasattr(b, "_diffusers_hook") for b in model.transformer_blocks)}


@fix("magcache-dimension-mismatch-input-residual-cannot-apply-d54755",
     en="reset the cache's state (reset_stateful_hooks) before a generation of another size",
     zh="换尺寸生成之前先用 reset_stateful_hooks 重置缓存状态")
def diffusers_mag_cache_reset_between_generations():
    from diffusers.hooks import HookRegistry, MagCacheConfig, apply_mag_cache
    model = _mag_cache_model()
    apply_mag_cache(model, MagCacheConfig(mag_ratios=torch.ones(4), num_inference_steps=4, retention_ratio=0.0,
                                          threshold=10.0, max_skip_steps=10))
    model(torch.ones(1, 8, 4))  # one generation at 8 positions
    HookRegistry.check_if_exists_or_initialize(model).reset_stateful_hooks()  # what a pipeline does between runs
    out = model(torch.ones(1, 4, 4))  # the next one at 4: computed afresh, no residual of the last
    return {"shape": list(out.shape), "computed": _same(out, torch.full((1, 4, 4), 4.0))}


@fix("cannot-apply-group-offloading-to-a-module-that-is-bdf4d5",
     en="remove accelerate's offloading hooks before applying group offloading",
     zh="先摘掉 accelerate 的卸载钩子，再用分组卸载")
def diffusers_group_offloading_after_removing_accelerate_hooks():
    from accelerate import cpu_offload
    from accelerate.hooks import remove_hook_from_module
    from diffusers.hooks import apply_group_offloading
    model = _mlp()
    x = torch.ones(1, 4)
    cpu_offload(model, execution_device=torch.device("cpu"))
    expected = model(x)
    remove_hook_from_module(model, recurse=True)  # one offloading strategy at a time
    apply_group_offloading(model, onload_device=torch.device("cpu"), offload_type="block_level", num_blocks_per_group=1)
    return {"same_output": _same(model(x), expected)}


# PEFT

@fix("cannot-pass-adapter-names-when-the-model-is-in-1fdc04",
     en="adapter_names is for inference: call model.eval() first",
     zh="adapter_names 用于推理：先调用 model.eval()")
def peft_adapter_names_in_eval_mode():
    model = _lora(True)
    model.eval()  # adapter_names is for inference
    x = torch.ones(2, 4)
    out = model(x, adapter_names=["default", "__base__"])  # row 0 with the adapter, row 1 without
    with model.disable_adapter():
        base = model(x)
    return {"shape": list(out.shape), "row_1_is_base": _same(out[1], base[1]), "row_0_is_adapted": _same(out[0], model(x)[0])}


@fix("trying-to-infer-with-non-existing-adapter-s-6a4c85",
     en="name adapters that exist: the keys of peft_config",
     zh="只写存在的适配器名：peft_config 的键")
def peft_adapter_names_of_an_existing_adapter():
    model = _lora(False)
    x = torch.ones(1, 4)
    names = sorted(model.peft_config)  # the adapters that exist: ["default"]
    return {"adapters": names, "same_as_active": _same(model(x, adapter_names=names[:1]), model(x))}


@fix("got-adapter-names-of-type-expected-a-list-of-c52141",
     en="under beam search, adapter_names is a list of str, one per row",
     zh="束搜索时 adapter_names 是字符串列表，每行一个")
def peft_adapter_names_as_a_list_under_beam_search():
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(_tiny_llama(), LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    model.eval()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = model.generate(input_ids=ids, adapter_names=["default", "__base__"], max_new_tokens=2, num_beams=2,
                         do_sample=False)  # a list, one name per row
    return {"shape": list(out.shape)}


@fix("if-sim-thresh-is-a-tensor-with-more-than-892b06",
     en="sim_thresh is a scalar or a tensor of shape (n_components,)",
     zh="sim_thresh 是标量或形状为 (n_components,) 的张量")
def peft_eva_svd_hook_with_one_threshold_per_component():
    from peft.tuners.lora.eva import SVDHook
    layer = nn.Linear(4, 4)
    hook = SVDHook(n_components=2, sim_thresh=torch.full((2,), 0.99), name="layer")  # shape (n_components,)
    handle = layer.register_forward_hook(hook)
    try:
        torch.manual_seed(0)
        for _ in range(3):
            layer(torch.randn(16, 4))
    finally:
        handle.remove()
    return {"components": list(hook.svd.components_.shape), "converged_shape": list(hook.converged.shape)}


@fix("one-of-the-base-layers-adapted-with-shira-has-979564",
     en="register the hook on the adapted layer, after get_peft_model",
     zh="在 get_peft_model 之后把钩子注册到适配后的层上")
def peft_shira_with_the_hook_on_the_adapted_layer():
    from peft import ShiraConfig, get_peft_model
    peft_model = get_peft_model(_mlp(), ShiraConfig(target_modules=["0"], r=2))
    calls = []
    adapted = peft_model.get_submodule("base_model.model.0")  # the same path, after applying the config
    handle = adapted.register_forward_hook(lambda *args: calls.append(1))
    try:
        peft_model(torch.ones(1, 4))
    finally:
        handle.remove()
    return {"hook_calls": len(calls)}


@fix("one-of-the-base-layers-adapted-with-super-tuning-3098e7",
     en="register the hook on the adapted layer, after get_peft_model",
     zh="在 get_peft_model 之后把钩子注册到适配后的层上")
def peft_super_tuning_with_the_hook_on_the_adapted_layer():
    import peft
    peft_model = peft.get_peft_model(_mlp(), peft.SupertuningConfig(target_modules=["0"], sparsity=0.5))
    calls = []
    handle = peft_model.get_submodule("base_model.model.0").register_forward_hook(lambda m, i, o: calls.append(1))
    try:
        peft_model(torch.ones(1, 4))
    finally:
        handle.remove()
    return {"hook_calls": len(calls)}


def _alora():
    from peft import LoraConfig, get_peft_model
    return get_peft_model(_tiny_llama(), LoraConfig(r=2, target_modules=["q_proj", "v_proj"],
                                                     alora_invocation_tokens=[5, 6], task_type="CAUSAL_LM"))


@fix("beam-search-not-yet-supported-for-alora-bc48b7",
     en="generate from an aLoRA model with num_beams=1",
     zh="用 aLoRA 模型生成时设 num_beams=1")
def peft_alora_generation_with_greedy_search():
    out = _alora().generate(input_ids=torch.tensor([[1, 2, 5, 6, 3]]), max_new_tokens=2, num_beams=1, do_sample=False)
    return {"shape": list(out.shape)}


@fix("multiple-invocations-of-peft-forward-hooks-before-backwa-68848b",
     en="one forward per backward (gradients accumulate over the two losses)",
     zh="每次反向传播只对应一次前向（两个损失的梯度会累加）")
def peft_alora_with_gradient_checkpointing_one_forward_per_backward():
    from peft import LoraConfig, get_peft_model
    model = _tiny_llama()
    model.gradient_checkpointing_enable()
    model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], alora_invocation_tokens=[5, 6],
                                             task_type="CAUSAL_LM"))
    model.train()
    ids = torch.tensor([[1, 2, 5, 6, 3]])
    for _ in range(2):  # two losses: forward, backward, forward, backward (gradients accumulate)
        model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    return {"lora_grads": len(grads), "all_finite": all(g is not None and bool(g.isfinite().all()) for g in grads)}


@fix("invalid-value-found-in-input-please-check-your-input-5a0433",
     en="drop the samples with NaN or inf before CorDA's calibration",
     zh="CorDA 校准之前先去掉含 NaN 或 inf 的样本")
def peft_corda_preprocessing_on_clean_data():
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora.config import CordaConfig
    from peft.tuners.lora.corda import preprocess_corda
    model = _mlp()
    config = LoraConfig(r=2, target_modules=["0"], init_lora_weights="corda", corda_config=CordaConfig())
    torch.manual_seed(0)
    data = [torch.randn(8, 4), torch.full((8, 4), float("nan"))]
    clean = [x for x in data if bool(x.isfinite().all())]  # drop the samples with NaN or inf
    preprocess_corda(model, config, run_model=lambda: [model(x) for x in clean])
    peft_model = get_peft_model(model, config)
    return {"samples": len(clean), "lora_A": list(peft_model.base_model.model[0].lora_A["default"].weight.shape)}


# captum

def _attribution_check(attributions, model, x, baseline):
    """Shape, and DeepLift's completeness: the attributions add up to the output's change from the baseline."""
    delta = (model(x)[:, 0] - model(baseline)[:, 0]).sum()
    return {"shape": list(attributions.shape), "complete": bool(torch.isclose(attributions.sum(), delta, atol=1e-5))}


@fix("setting-forward-backward-hooks-and-attributes-on-non-lin-750559",
     en="a notice, not a fault: filter just this warning around DeepLift",
     zh="这只是提示，不是错误：在 DeepLift 外面只过滤这一条警告")
def captum_deeplift_attribution_with_its_notice_filtered():
    from captum.attr import DeepLift
    model, x = _mlp(), torch.ones(1, 4)
    with warnings.catch_warnings():  # a notice, not a fault: silence just this one where it is expected
        warnings.filterwarnings("ignore", message="Setting forward, backward hooks", category=UserWarning)
        attributions = DeepLift(model).attribute(x, target=0)
    return _attribution_check(attributions, model, x, torch.zeros_like(x))


@fix("setting-backward-hooks-on-relu-activations-the-hooks-wil-3d4494",
     en="a notice, not a fault: filter just this warning around GuidedBackprop",
     zh="这只是提示，不是错误：在 GuidedBackprop 外面只过滤这一条警告")
def captum_guided_backprop_attribution_with_its_notice_filtered():
    from captum.attr import GuidedBackprop
    model = _mlp()
    with warnings.catch_warnings():  # a notice, not a fault: silence just this one where it is expected
        warnings.filterwarnings("ignore", message="Setting backward hooks on ReLU", category=UserWarning)
        attributions = GuidedBackprop(model).attribute(torch.ones(1, 4, requires_grad=True), target=0)
    hooks_left = sum(len(m._backward_hooks) + len(m._backward_pre_hooks) for m in model.modules())
    return {"shape": list(attributions.shape), "hooks_left": hooks_left}


@fix("given-model-must-be-an-instance-of-torch-nn-9309c7",
     en="give GuidedBackprop an nn.Module (the function as its forward)",
     zh="传给 GuidedBackprop 一个 nn.Module（把函数写成它的 forward）")
def captum_guided_backprop_of_a_module():
    from captum.attr import GuidedBackprop
    class Function(nn.Module):  # the function as a module's forward: captum can walk it for ReLUs
        def forward(self, x):
            return x
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Setting backward hooks on ReLU", category=UserWarning)
        attributions = GuidedBackprop(Function()).attribute(torch.ones(1, 4), target=0)
    return attributions.tolist()


@fix("module-is-being-used-more-than-once-in-the-ce73a3",
     en="give each use of a layer its own module instance",
     zh="层每用一次就用一个独立的模块实例")
def captum_lrp_with_one_layer_instance_per_use():
    from captum.attr import LRP

    class TwoLayers(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)
            self.second.load_state_dict(self.first.state_dict())  # the same weights, its own module

        def forward(self, x):
            return self.second(self.first(x))
    torch.manual_seed(0)
    model, x = TwoLayers(), torch.ones(1, 4)
    attributions = LRP(model).attribute(x, target=0)
    # without biases LRP conserves relevance: the attributions add up to the output explained
    return {"shape": list(attributions.shape), "conserved": bool(torch.isclose(attributions.sum(), model(x)[0, 0],
                                                                                atol=1e-4))}


@fix("forward-hook-did-not-obtain-any-outputs-for-given-3ffd5e",
     en="choose a layer the forward runs",
     zh="选择前向传播中真正运行的层")
def captum_layer_attribution_of_a_layer_that_runs():
    from captum.attr import LayerActivation

    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.used(x)
    model, x = WithUnused(), torch.ones(1, 4)
    activation = LayerActivation(model, model.used).attribute(x)
    return {"shape": list(activation.shape), "is_its_output": _same(activation, model.used(x))}


@fix("backward-hooks-not-supported-for-module-with-1-output-17513d",
     en="MaxPool without return_indices (the indices were unused): one output",
     zh="MaxPool 不返回索引（本来也没用到）：只有一个输出")
def captum_deeplift_on_a_max_pool_without_indices():
    from captum.attr import DeepLift

    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool, self.layer = nn.MaxPool1d(2), nn.Linear(2, 1)  # the indices were never used: one output

        def forward(self, x):
            return self.layer(self.pool(x))
    torch.manual_seed(0)
    model, x = Pool(), torch.arange(4.0).reshape(1, 1, 4)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Setting forward, backward hooks", category=UserWarning)
        attributions = DeepLift(model).attribute(x, target=0)
    delta = (model(x) - model(torch.zeros_like(x)))[0, 0, 0]
    return {"shape": list(attributions.shape), "complete": bool(torch.isclose(attributions.sum(), delta, atol=1e-5))}


@fix("backward-hooks-not-supported-for-module-with-1-input-360281",
     en="keep the Linear's one input; apply the extra input around it",
     zh="让 Linear 只接收一个输入，额外的输入放在它外面处理")
def captum_sample_gradients_of_a_linear_with_one_input():
    from captum._utils.sample_gradient import SampleGradientWrapper

    class Scaled(nn.Module):  # the Linear keeps one input; the scale is applied around it
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 2)

        def forward(self, x, scale):
            return self.linear(x) * scale
    torch.manual_seed(0)
    model, x, scale = Scaled(), torch.randn(3, 4, requires_grad=True), torch.tensor([[1.0], [2.0], [3.0]])
    wrapper = SampleGradientWrapper(model)
    wrapper.add_hooks()
    try:
        wrapper.compute_param_sample_gradients(model(x, scale).sum(dim=1), loss_mode="sum")
    finally:
        wrapper.remove_hooks()
    per_sample = model.linear.weight.sample_grad
    return {"shape": list(per_sample.shape), "adds_up": _same(per_sample.sum(0), model.linear.weight.grad)}


# timm

@fix("unsupported-hook-type-64c111",
     en="hook_type forward (or forward_pre), the types FeatureHooks knows",
     zh="hook_type 用 forward（或 forward_pre），FeatureHooks 只认这两种")
def timm_feature_hooks_of_a_forward_type():
    from timm.models._features import FeatureHooks
    model = _mlp()
    hooks = FeatureHooks([{"module": "0", "hook_type": "forward"}], model.named_modules())  # forward or forward_pre
    x = torch.ones(1, 4)
    model(x)
    features = hooks.get_output(x.device)
    return {"features": list(features), "is_layer_0": _same(features["0"], model[0](x))}


@fix("return-layers-are-not-present-in-model-ba787f",
     en="feature_info names a module of the model",
     zh="feature_info 里写模型中存在的模块名")
def timm_feature_hook_net_of_a_layer_that_exists():
    from timm.models._features import FeatureHookNet
    model = _mlp()
    model.feature_info = [{"module": "0", "num_chs": 4, "reduction": 1}]  # a name of model.named_modules()
    net = FeatureHookNet(model, out_indices=(0,), flatten_sequential=True)
    features = net(torch.ones(1, 4))
    return {"features": len(features), "shape": list(features[0].shape)}


@fix("please-provide-hook-fns-for-each-hook-fn-locs-3508f9",
     en="one hook_fn per hook_fn_loc",
     zh="每个 hook_fn_loc 配一个 hook_fn")
def timm_activation_stats_hook_with_paired_lists():
    from timm.utils.model import ActivationStatsHook

    def mean_0(module, inputs, output):
        return round(output.mean().item(), 4)

    def mean_2(module, inputs, output):
        return round(output.mean().item(), 4)
    model = _mlp()
    stats = ActivationStatsHook(model, hook_fn_locs=["0", "2"], hook_fns=[mean_0, mean_2])  # one fn per location
    model(torch.ones(1, 4))
    return {name: len(values) for name, values in stats.stats.items()}

# diffusers' context parallelism, fixed: the plan matches forward's inputs and outputs, and it runs as it is meant to,
# over a process group (two gloo processes, ring_degree=2): each process computes half of the positions, the output
# is gathered, and it equals the output computed in one process

IN_WORKERS = "diffusers_context_parallel_fixes_in_two_gloo_processes"  # the @fix_all function that runs these


class _PerPosition(nn.Module):
    """Per-position layers (no attention): splitting the positions between processes changes nothing."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj, self.proj_out = nn.Linear(4, 4), nn.Linear(4, 4)

    def head(self, x):
        return self.proj_out(torch.relu(self.proj(x)))


def _context_parallel_run(model, plan, *inputs):
    """``model(*inputs)`` in one process and under context parallelism over this process group: whether they agree,
    and how many positions ``proj`` saw in this process."""
    import torch.distributed as dist
    from diffusers.hooks.context_parallel import apply_context_parallel
    from diffusers.models._modeling_parallel import ContextParallelConfig
    from torch.distributed.device_mesh import init_device_mesh

    def first(out):
        return out[0] if isinstance(out, tuple) else out
    with torch.no_grad():
        full = first(model(*inputs))
        world = dist.get_world_size()
        config = ContextParallelConfig(ring_degree=world)
        config.setup(dist.get_rank(), world, torch.device("cpu"),
                     init_device_mesh("cpu", (world, 1), mesh_dim_names=("ring", "ulysses")))
        apply_context_parallel(model, config, plan)
        seen = []
        handle = model.proj.register_forward_hook(lambda m, args, out: seen.append(out.shape[-2]))
        try:
            out = first(model(*inputs))
        finally:
            handle.remove()
    return {"positions_here": seen[0], "positions": out.shape[-2], "same_as_one_process": _same(out, full)}


def _positions(n=4):
    return torch.randn(1, n, 4, generator=torch.Generator().manual_seed(0))


def _cp_plan(**inputs):
    from diffusers.models._modeling_parallel import ContextParallelOutput
    return {"": inputs, "proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3)}


@fix("expected-input-model-plan-to-have-elements-but-got-3bea0d",
     en="one plan entry per tensor of the list input, over a process group",
     zh="列表输入里每个张量对应计划中的一项，在进程组上运行",
     run_by="diffusers_context_parallel_fixes_in_two_gloo_processes")
def diffusers_context_parallel_plan_with_one_entry_per_input():
    class Model(_PerPosition):
        def forward(self, xs):
            return self.head(sum(xs))
    xs = [_positions(), 2 * _positions(), 3 * _positions()]
    return _context_parallel_run(Model(), _cp_plan(xs=[_cp_input(expected_dims=3)] * len(xs)), xs)  # 3 and 3


@fix("unsupported-input-type-59b453",
     en="the plan names tensor inputs only (not the int argument)",
     zh="计划里只写张量输入（不写整数参数）",
     run_by="diffusers_context_parallel_fixes_in_two_gloo_processes")
def diffusers_context_parallel_plan_of_the_tensor_input_only():
    class Model(_PerPosition):
        def forward(self, x, scale):
            return self.head(x) * scale
    return _context_parallel_run(Model(), _cp_plan(x=_cp_input(expected_dims=3)), _positions(), 3)  # not `scale`


@fix("expected-input-tensor-to-have-dimensions-but-got-dimensi-79aa21",
     en="expected_dims is the input's number of dimensions, so it is split",
     zh="expected_dims 等于输入的维数，输入才会被切分",
     run_by="diffusers_context_parallel_fixes_in_two_gloo_processes")
def diffusers_context_parallel_input_of_the_expected_dimensions():
    class Model(_PerPosition):
        def forward(self, x):
            return self.head(x)
    return _context_parallel_run(Model(), _cp_plan(x=_cp_input(expected_dims=3)), _positions())  # x.dim() == 3


@fix("expected-output-to-be-a-tensor-or-a-list-2302a1",
     en="the module returns a tensor or a tuple of tensors, not a dict",
     zh="模块返回张量或张量元组，而不是字典",
     run_by="diffusers_context_parallel_fixes_in_two_gloo_processes")
def diffusers_context_parallel_output_that_is_a_tuple():
    class Model(_PerPosition):
        def forward(self, x):
            return (self.head(x),)  # a tensor or a tuple of tensors, not {"out": ...}
    return _context_parallel_run(Model(), _cp_plan(x=_cp_input(expected_dims=3)), _positions())


@fix("index-out-of-bounds-for-output-of-length-277258",
     en="split_output's index names an output the module has (0)",
     zh="split_output 的索引要指向模块确有的输出（0）",
     run_by="diffusers_context_parallel_fixes_in_two_gloo_processes")
def diffusers_context_parallel_output_index_of_an_output():
    from diffusers.models._modeling_parallel import ContextParallelOutput

    class Model(_PerPosition):
        def forward(self, x):
            return self.head(x)
    plan = {"proj": {0: _cp_input(expected_dims=3, split_output=True)},  # index 0: proj has one output
            "proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3)}
    return _context_parallel_run(Model(), plan, _positions())


@fix("expected-output-to-have-elements-but-got-4861b0",
     en="one ContextParallelOutput per output of the module",
     zh="模块的每个输出对应一个 ContextParallelOutput",
     run_by="diffusers_context_parallel_fixes_in_two_gloo_processes")
def diffusers_context_parallel_gather_of_each_output():
    class Model(_PerPosition):
        def forward(self, x):
            return self.head(x)
    # proj_out has one output: one ContextParallelOutput (a list needs one entry per output)
    return _context_parallel_run(Model(), _cp_plan(x=_cp_input(expected_dims=3)), _positions())


def _fixes_in_workers() -> dict:
    """The fixes run by the @fix_all function below, by message id."""
    return {mid: f.fn for f in registered_fixes().get(__name__, []) if f.run_by == IN_WORKERS for mid in f.ids}


def _context_parallel_fixes_in_workers(rank, world_size):
    return {mid: outcome(fn) for mid, fn in _fixes_in_workers().items()}


@fix_all(list(_fixes_in_workers()))
def diffusers_context_parallel_fixes_in_two_gloo_processes():
    from hooklab import run_workers
    return run_workers(_context_parallel_fixes_in_workers, world_size=2, timeout=180)[0]


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)


def test_a_message_warned_once_per_process_is_shown_to_a_trigger_run_after_it():
    """diffusers warns of an input of other dimensions through ``Logger.warning_once``, once per process: the trigger
    shows it also when the same text was shown before in the process (in one order of the gate it showed nothing)."""
    from message_triggers import check, registered

    mid = "expected-input-tensor-to-have-dimensions-but-got-dimensi-79aa21"
    case = next(t for t in registered()[__name__] if mid in t.ids)
    check(case, mid)
    check(case, mid)  # the same text again: shown again
