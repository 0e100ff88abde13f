"""Trigger tests: the pinned libraries' own messages about hooks (accelerate, diffusers, PEFT, captum, timm,
Lightning). Small models built from code or configs; nothing is downloaded."""
from __future__ import annotations

import torch
from torch import nn

from message_triggers import trigger, triggers_of


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


test_trigger = triggers_of(__name__)
