"""Attempts to reach the excused messages of the pinned libraries (diffusers, PEFT, captum, Lightning): each builds a
small model from code or a config (nothing is downloaded), does what a user would do to meet the message, and records
what happened instead (see ``message_triggers.py``)."""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn

from message_triggers import attempt, attempts_of


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


@contextlib.contextmanager
def _one_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


# --- diffusers ----------------------------------------------------------------------------------------------

@attempt(["an-unexpected-error-occurred-while-processing-the-input-90b42e"],
         outcome="ValueError: Expected 1 arguments but got 1.")
def diffusers_context_parallel_plan_of_an_input_not_passed():
    from diffusers.hooks import HookRegistry
    from diffusers.hooks.context_parallel import ContextParallelSplitHook
    from diffusers.models._modeling_parallel import ContextParallelInput

    class Model(nn.Module):
        def forward(self, x, y=None):
            return x
    model = Model()
    plan = {"y": ContextParallelInput(split_dim=1, expected_dims=2)}
    HookRegistry.check_if_exists_or_initialize(model).register_hook(
        ContextParallelSplitHook(plan, parallel_config=None), "cp_split")
    model(torch.ones(2, 4))  # the index check before this message raises first


@attempt(["unsupported-tensor-parallel-style-for-expected-colwise-r-3efbec"],
         outcome="Tensor parallelism is not supported on device type 'cpu'")
def diffusers_tensor_parallel_with_an_unknown_style_on_a_cpu_mesh():
    from diffusers import TensorParallelConfig
    from diffusers.hooks.tensor_parallel import apply_tensor_parallel
    from torch.distributed.device_mesh import init_device_mesh
    with _one_process_group():
        config = TensorParallelConfig(mesh=init_device_mesh("cpu", (1,)))
        config._mesh = config.mesh
        apply_tensor_parallel(_mlp(), config, {"0": "diagonal"}, weights_already_sharded=True)


@attempt(["it-seems-like-some-layers-were-not-executed-during-4a9adc"],
         outcome="Using streams for data transfer requires an onload device whose backend implements streams")
def diffusers_group_offloading_with_streams_on_a_cpu():
    from diffusers.hooks import apply_group_offloading

    class Skips(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x)  # b never runs
    apply_group_offloading(Skips(), onload_device=torch.device("cpu"), offload_type="block_level",
                           num_blocks_per_group=1, use_stream=True)


@attempt(["seacache-decoder-stack-hook-is-not-initialized-6f02dc", "seacache-requires-cosmos-3-to-expose-a-callable-decoder-d37130",
          "seacache-requires-cosmos-3-to-expose-a-non-empty-c81e63"],
         outcome="SeaCache found no repeated transformer blocks on the model.")
def diffusers_sea_cache_on_a_small_model():
    from diffusers.hooks.sea_cache import SeaCacheConfig, apply_sea_cache
    apply_sea_cache(_mlp(), SeaCacheConfig())


# --- PEFT ---------------------------------------------------------------------------------------------------

@attempt(["using-alora-requires-transformers-4-52-1-d1131c"],
         outcome="transformers is 5.")
def peft_alora_transformers_version():
    import transformers
    return f"transformers is {transformers.__version__}"


@attempt(["found-active-hooks-added-by-eva-that-weren-t-8dc565",
          "unsupported-input-type-for-prepare-layer-inputs-fn-in-e3b566"],
         outcome="EVA initialisation of a small model, the default layer-input function: ran")
def peft_eva_initialisation_of_a_small_model():
    from peft import EvaConfig, LoraConfig, get_peft_model
    from peft.tuners.lora.eva import initialize_lora_eva_weights
    model = _mlp()
    config = LoraConfig(r=2, target_modules=["0", "2"], init_lora_weights="eva", eva_config=EvaConfig(rho=1.0))
    peft_model = get_peft_model(model, config, low_cpu_mem_usage=True)
    loader = [{"x": torch.randn(8, 4)} for _ in range(4)]
    initialize_lora_eva_weights(peft_model, dataloader=loader, forward_fn=lambda m, batch: m(batch["x"]),
                                prepare_model_inputs_fn=None, prepare_layer_inputs_fn=None)  # the default per layer
    return "EVA initialisation of a small model, the default layer-input function: ran"


@attempt(["shadow-state-sequence-shape-does-not-match-base-hidden-c53b94"],
         outcome="Shadow tuner on a small Llama: forward and generate (with its default cache) ran")
def peft_shadow_tuner_forward_and_generate():
    import peft
    model = peft.get_peft_model(_tiny_llama(), peft.ShadowConfig(task_type="CAUSAL_LM"))
    ids = torch.tensor([[1, 2, 5, 6, 3]])
    model(input_ids=ids)
    model.generate(input_ids=ids, max_new_tokens=3, do_sample=False)
    return "Shadow tuner on a small Llama: forward and generate (with its default cache) ran"


@attempt(["tp-plan-on-the-base-layer-is-not-supported-8fa872", "unsupported-tp-plan-for-lora-only-colwise-and-rowwise-09703f"],
         outcome="LoRA on a model with a tensor-parallel plan, without a device mesh:")
def peft_lora_on_a_model_with_a_tp_plan():
    from peft import LoraConfig, get_peft_model
    model = _tiny_llama()
    plan = dict(getattr(model.config, "base_model_tp_plan", None) or {})
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    return f"LoRA on a model with a tensor-parallel plan, without a device mesh: ran (plan entries: {len(plan)})"


@attempt(["invalid-value-found-in-covariance-please-file-an-issue-f336b3"],
         outcome="CorDA preprocessing of a small model on finite data: ran")
def peft_corda_preprocessing_on_finite_data():
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora.config import CordaConfig
    from peft.tuners.lora.corda import preprocess_corda
    model = _mlp()
    config = LoraConfig(r=2, target_modules=["0"], init_lora_weights="corda", corda_config=CordaConfig())
    data = [torch.randn(8, 4), torch.randn(8, 4)]
    preprocess_corda(model, config, run_model=lambda: [model(x) for x in data])
    get_peft_model(model, config)
    return "CorDA preprocessing of a small model on finite data: ran"


# --- captum -------------------------------------------------------------------------------------------------

@attempt(["a-problem-occurred-during-maxpool-modul-s-backward-pass-903475"], outcome="DeepLift through a max-pool:")
def captum_deeplift_through_a_max_pool():
    from captum.attr import DeepLift
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 3 * 3, 2))
    attributions = DeepLift(model).attribute(torch.randn(2, 1, 8, 8), target=0)
    return f"DeepLift through a max-pool: attributions finite: {bool(torch.isfinite(attributions).all())}"


@attempt(["layer-input-not-placed-on-appropriate-device-if-using-d627d8"], outcome="RuntimeError: Expected at least one device to scatter to")
def captum_layer_feature_ablation_of_a_data_parallel_model():
    from captum.attr import LayerFeatureAblation
    model = nn.DataParallel(_mlp())  # on a CPU machine DataParallel runs the module itself
    attributions = LayerFeatureAblation(model, model.module[0]).attribute(torch.randn(2, 4), target=0)
    return f"LayerFeatureAblation of a DataParallel model on CPU: shape {tuple(attributions.shape)}"


@attempt(["unable-to-extract-device-information-for-the-module-c3f79e"], outcome="LayerActivation of a ReLU")
def captum_layer_attribution_of_a_layer_without_parameters():
    from captum.attr import LayerActivation
    model = _mlp()
    activations = LayerActivation(model, model[1]).attribute(torch.randn(2, 4))
    return f"LayerActivation of a ReLU (no parameters): shape {tuple(activations.shape)}"


# --- Lightning ----------------------------------------------------------------------------------------------

def _trainer(**options):
    import pytorch_lightning as pl
    return pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, accelerator="cpu", **options)


@attempt(["since-deepspeed-handles-gradient-clipping-internally-the-0f68f7",
          "you-have-overridden-the-lightningmodule-backward-hook-bu-44c8a4"],
         outcome="No module named 'deepspeed'")
def lightning_deepspeed_strategy():
    import deepspeed  # noqa: F401


@attempt(["the-optimizer-does-not-seem-to-reference-any-fsdp-88f5e7", "trainer-init-module-cannot-fully-support-proper-instanti-222cd8"],
         outcome="ModelParallelStrategy: built, init_module ran")
def lightning_sharded_strategies_on_a_cpu():
    said = []
    from pytorch_lightning.strategies import ModelParallelStrategy
    for strategy in ("fsdp", ModelParallelStrategy()):
        try:
            trainer = _trainer(devices=1, strategy=strategy)
            with trainer.init_module(empty_init=True):
                nn.Linear(2, 2)
            said.append(f"{type(strategy).__name__}: built, init_module ran")
        except Exception as exc:  # noqa: BLE001 (what it says is the outcome)
            name = strategy if isinstance(strategy, str) else type(strategy).__name__
            said.append(f"{name}: {type(exc).__name__}: {str(exc)[:160]}")
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    return "Lightning's FSDP and model-parallel strategies on a CPU: " + "; ".join(said)


# --- curated ------------------------------------------------------------------------------------------------

@attempt(["expected-all-tensors-to-be-on-the-same-device-31dc46"],
         outcome="Tensor on device meta is not on the expected device cpu!")
def weights_and_inputs_on_two_devices_of_a_cpu_machine():
    model = nn.Linear(2, 2).to("meta")
    model(torch.ones(1, 2))


test_attempt = attempts_of(__name__)
