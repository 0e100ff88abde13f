"""The model zoo: every public hooklab tool on real architectures, and what each is expected to do.

One table of data feeds both ``tests/library/test_zoo.py`` (which checks every cell) and
``zoo_table.py`` (which makes the README's "what works where" table), so the README
cannot claim more than the test shows. Models are randomly initialised (``weights=None``) and
run on tiny inputs (batch 1, 64x64 images); Hugging Face models are built from small configs and called
with keywords (2 x 8 tokens), also under ``generate()``.

Each runner does something real with its tool and checks it against plain PyTorch (hooks
registered by hand, ``p.grad`` read directly, a run without the tool); it returns a short
note of what was recorded, or raises. A cell whose expected outcome is a refusal holds the
pattern its message must match.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import hooklab

Inputs = tuple[tuple, dict]


@dataclass
class Spec:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], Inputs]
    layers: list[str]                 # two modules for capture / stats / FeatureExtractor
    block: str                        # a module to checkpoint / offload
    output: dict[str, Any] = field(default_factory=dict)  # output= selector of modules returning tuples
    mode: str = "train"               # "train", "no_grad", "inference_mode" or "generate" (model.generate(**inputs))
    compiled: bool = False            # the tools get the torch.compile(backend=backend) wrapper
    backend: str = "eager"            # torch.compile's backend for a compiled row ("inductor": the default one)
    heavy: bool = False
    expect: dict[str, str] = field(default_factory=dict)  # tool -> "refuses: <regex>" / "n/a: why"
    note: str = ""


def _image(size: int = 64) -> Callable[[], Inputs]:
    return lambda: ((torch.randn(1, 3, size, size),), {})


def _small(kind: str) -> Callable[[], nn.Module]:
    """torchvision's own classes, narrower and shallower: the same modules and patterns, 10-1000x cheaper."""
    def build() -> nn.Module:
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt
        from torchvision.models.densenet import DenseNet
        from torchvision.models.swin_transformer import SwinTransformer
        from torchvision.models.vision_transformer import VisionTransformer
        if kind == "convnext":
            return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, 128, 1),
                             CNBlockConfig(128, None, 1)], stochastic_depth_prob=0.1)
        if kind == "vit":
            model = VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32,
                                      mlp_dim=64)
            nn.init.normal_(model.heads.head.weight, std=0.02)  # zero-initialised by torchvision
            return model
        if kind == "swin":
            return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8],
                                   window_size=[4, 4], stochastic_depth_prob=0.1)
        return DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_init_features=16)
    return build


def _tv(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision
        model = getattr(torchvision.models, name)(weights=None, **kwargs)
        if name.startswith("vit"):  # torchvision zero-initialises ViT's head: every other gradient would be 0
            nn.init.normal_(model.heads.head.weight, std=0.02)
        return model
    return build


class LSTMNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.head = nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out)


class Encoder(nn.Module):
    """nn.TransformerEncoder called with keyword masks, as in a language model."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2,
                                         enable_nested_tensor=False)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor, src_key_padding_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(x, mask=mask, src_key_padding_mask=src_key_padding_mask))


def _encoder_inputs() -> Inputs:
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)  # True: may not attend
    return (torch.randn(2, 6, 32),), {"mask": causal, "src_key_padding_mask": pad}


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj, self.attn = nn.Linear(32, 32), nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return self.attn(query=h, key=h, value=h, need_weights=False)[0]


class Twice(nn.Module):
    """One submodule called twice per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.shared, self.out = nn.Linear(8, 16), nn.Sequential(nn.Linear(16, 16), nn.Tanh()), nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.shared(self.shared(self.inp(x))))


class Tied(nn.Module):
    """An embedding and an output layer sharing one weight, as in a language model."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.mix, self.dec = nn.Embedding(50, 16), nn.Linear(16, 16), nn.Linear(16, 50, bias=False)
        self.dec.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dec(torch.tanh(self.mix(self.emb(ids))))


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))


def _mlp_bn() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))


def _mlp_dropout() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 2))


def _hf(kind: str) -> Callable[[], nn.Module]:
    """Hugging Face transformers' own classes from small configs (random init): nothing is downloaded."""
    def build() -> nn.Module:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import transformers
        if kind == "gpt2":
            return transformers.GPT2LMHeadModel(transformers.GPT2Config(
                vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32, bos_token_id=0, eos_token_id=None))
        if kind == "llama":
            return transformers.LlamaForCausalLM(transformers.LlamaConfig(
                vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=None,
                pad_token_id=None))
        return transformers.BertForMaskedLM(transformers.BertConfig(
            vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32))
    return build


def _token_inputs(how: str) -> Callable[[], Inputs]:
    """A language model's call, keywords only: ``"train"`` without a KV cache (as training with
    checkpointing runs), ``"generate"`` 3 greedy tokens with the cache, ``"encoder"`` for BERT."""
    def inputs() -> Inputs:
        ids = torch.randint(1, 64, (2, 8))
        kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if how == "generate":
            kwargs.update(max_new_tokens=3, do_sample=False, pad_token_id=0)
        elif how == "train":
            kwargs["use_cache"] = False
        return (), kwargs
    return inputs


_COMPILE_REFUSED = "refuses: torch.compile'd .*model._orig_mod"
_NO_BACKWARD = "n/a: no backward under no_grad / inference_mode"
_OFFLOAD_COMPILED = "xfail: offloads nothing inside the compiled code (it warns when its block ends)"
_CHECKPOINT_TRAINING_COMPILED = "refuses: compile'd model checkpoints .* in training mode.*allow_compiled=True"
_CHECKPOINT_RANDOM_COMPILED = "refuses: another dropout mask.*model._orig_mod"
_LEDGER_INDUCTOR = "xfail: the ledger names no op inside inductor's generated code"
_GENERATE_NO_BACKWARD = "n/a: generate() runs under no_grad: no backward"
_GENERATE_FORWARD = "n/a: FeatureExtractor calls the model's forward, not generate()"
_GENERATE_FORWARD_SHAPES = "n/a: layer_shapes runs one forward, not generate()"
_GENERATE = {"GradientMonitor": _GENERATE_NO_BACKWARD, "clip hooks": _GENERATE_NO_BACKWARD,
             "FeatureExtractor": _GENERATE_FORWARD, "layer_shapes": _GENERATE_FORWARD_SHAPES}
_GENERATE_NOTE = ("under generate() a module runs once per new token: with the KV cache the prompt first, then "
                  "one token per step; capture counts every call (store.calls) and keeps the last one's output "
                  "(one token), ActivationStats keeps one record per call")
# what the README says about each non-"works" expectation
EXPLAIN = {
    _COMPILE_REFUSED: "the tool is given the compiled wrapper: hooks added after compiling never run in the "
                      "compiled code, so it refuses and says to pass and call the eager model (`model._orig_mod`)",
    _NO_BACKWARD: "no backward pass runs",
    _OFFLOAD_COMPILED: "`offload_module` on a submodule of a compiled model offloads nothing (the compiled code does "
                       "not run hooks added after compiling); it warns when its block ends that the module never ran",
    _CHECKPOINT_TRAINING_COMPILED: "a compiled wrapper whose checkpointed block is in training mode is refused "
                                   "unless `allow_compiled=True`: inside compiled code PyTorch (2.15) draws other "
                                   "random numbers when the checkpoint recomputes, and hooklab cannot see every "
                                   "random op (a functional `F.dropout`), so the gradients could be wrong without an "
                                   "error; checkpoint the eager model and call it, or pass `allow_compiled=True` for "
                                   "a block that draws no random numbers",
    _CHECKPOINT_RANDOM_COMPILED: "a PyTorch bug seen on 2.15: inside `torch.compile(backend=\"eager\")` (and inductor's "
                                 "default RNG) a checkpoint's recompute draws another dropout mask, so the gradients "
                                 "are wrong without an error (plain `torch.utils.checkpoint` too); `checkpoint_modules` "
                                 "refuses a compiled model with dropout in the checkpointed block and says to "
                                 "checkpoint the eager model",
    _LEDGER_INDUCTOR: "a limit: under inductor the ledger records every saved tensor (its count equals an "
                      "independent `saved_tensors_hooks` count) but cannot name the ops that saved them (they run "
                      "inside one generated graph); `label_ops` names none",
}

SPECS: list[Spec] = [
    Spec("resnet18", _tv("resnet18"), _image(), ["layer1", "layer4"], "layer2.0"),
    Spec("mobilenet_v3_small", _tv("mobilenet_v3_small"), _image(), ["features.1", "features.12"], "features.2"),
    Spec("efficientnet_b0", _tv("efficientnet_b0"), _image(), ["features.1", "features.8"], "features.2.0"),
    Spec("convnext (small: ConvNeXt class, 1 block per stage)", _small("convnext"), _image(),
         ["features.1", "features.7"], "features.1.0"),
    Spec("vit (small: VisionTransformer class, 2 layers)", _small("vit"), _image(),
         ["encoder.layers.encoder_layer_0", "encoder.ln"], "encoder.layers.encoder_layer_1"),
    Spec("swin (small: SwinTransformer class)", _small("swin"), _image(), ["features.1", "norm"], "features.1.0"),
    Spec("regnet_y_400mf", _tv("regnet_y_400mf"), _image(), ["stem", "trunk_output.block4"],
         "trunk_output.block1"),
    Spec("densenet (small: DenseNet class, 2 layers per block)", _small("densenet"), _image(),
         ["features.denseblock1", "features.norm5"], "features.denseblock1.denselayer1",
         note="checkpoint_modules on a _DenseLayer: its list argument is appended to after the call"),
    Spec("convnext_tiny", _tv("convnext_tiny"), _image(), ["features.1", "features.7"], "features.1.0",
         heavy=True),
    Spec("vit_b_16 (64x64)", _tv("vit_b_16", image_size=64), _image(), ["encoder.layers.encoder_layer_0",
         "encoder.ln"], "encoder.layers.encoder_layer_1", heavy=True),
    Spec("swin_t", _tv("swin_t"), _image(), ["features.1", "norm"], "features.1.0", heavy=True),
    Spec("densenet121", _tv("densenet121"), _image(), ["features.denseblock1", "features.norm5"],
         "features.denseblock1.denselayer1", heavy=True),
    Spec("nn.LSTM", LSTMNet, lambda: ((torch.randn(2, 5, 8),), {}), ["rnn", "head"], "rnn", output={"rnn": 0},
         note="the LSTM returns (output, (h, c)): capture / ActivationStats take output=0"),
    Spec("nn.TransformerEncoder (keyword masks)", Encoder, _encoder_inputs, ["enc.layers.0", "head"],
         "enc.layers.1"),
    Spec("nn.MultiheadAttention", Attention, lambda: ((torch.randn(2, 6, 32),), {}), ["proj", "attn"], "attn",
         output={"attn": 0}, note="called with keywords only; returns (attn_output, weights): output=0"),
    Spec("a module called twice", Twice, lambda: ((torch.randn(4, 8),), {}), ["shared", "out"], "shared"),
    Spec("a tied weight", Tied, lambda: ((torch.randint(0, 50, (2, 7)),), {}), ["emb", "dec"], "mix"),
    Spec("torch.compile (eager backend)", _mlp, lambda: ((torch.randn(4, 16),), {}), ["_orig_mod.0", "_orig_mod.2"],
         "_orig_mod.2", compiled=True,
         expect={"capture": _COMPILE_REFUSED, "FeatureExtractor": _COMPILE_REFUSED,
                 "ActivationStats": _COMPILE_REFUSED, "Tracer": _COMPILE_REFUSED,
                 "offload_module": _OFFLOAD_COMPILED, "checkpoint_modules": _CHECKPOINT_TRAINING_COMPILED},
         note="GradientMonitor, the ledger's totals and clip hooks work on the compiled wrapper, and so does "
              "checkpoint_modules(..., allow_compiled=True); on larger compiled models the ledger names fewer ops "
              "and modules (real-models review)"),
    Spec("torch.compile with BatchNorm (eager backend)", _mlp_bn, lambda: ((torch.randn(4, 16),), {}),
         ["_orig_mod.0", "_orig_mod.3"], "_orig_mod.1", compiled=True,
         expect={"capture": _COMPILE_REFUSED, "FeatureExtractor": _COMPILE_REFUSED,
                 "ActivationStats": _COMPILE_REFUSED, "Tracer": _COMPILE_REFUSED,
                 "offload_module": _OFFLOAD_COMPILED, "checkpoint_modules": _CHECKPOINT_TRAINING_COMPILED},
         note="with allow_compiled=True, a PyTorch limitation seen on 2.15: a non-reentrant checkpoint of a "
              "training-mode BatchNorm inside torch.compile(backend=\"eager\") fails in backward (its "
              "num_batches_tracked counter is modified in place); checkpoint it in the eager model"),
    Spec("torch.compile with Dropout (eager backend)", _mlp_dropout, lambda: ((torch.randn(4, 16),), {}),
         ["_orig_mod.0", "_orig_mod.3"], "_orig_mod.2", compiled=True,
         expect={"capture": _COMPILE_REFUSED, "FeatureExtractor": _COMPILE_REFUSED,
                 "ActivationStats": _COMPILE_REFUSED, "Tracer": _COMPILE_REFUSED,
                 "offload_module": _OFFLOAD_COMPILED, "checkpoint_modules": _CHECKPOINT_RANDOM_COMPILED}),
    Spec("torch.compile inductor (the default backend)", _mlp, lambda: ((torch.randn(4, 16),), {}),
         ["_orig_mod.0", "_orig_mod.2"], "_orig_mod.2", compiled=True, backend="inductor", heavy=True,
         expect={"capture": _COMPILE_REFUSED, "FeatureExtractor": _COMPILE_REFUSED,
                 "ActivationStats": _COMPILE_REFUSED, "Tracer": _COMPILE_REFUSED,
                 "offload_module": _OFFLOAD_COMPILED, "SavedTensorLedger": _LEDGER_INDUCTOR,
                 "checkpoint_modules": _CHECKPOINT_TRAINING_COMPILED},
         note="heavy only because inductor compiles C++ kernels (about 70 s on 2 busy cores), not for its size"),
    Spec("resnet18 under no_grad", _tv("resnet18"), _image(), ["layer1", "layer4"], "layer2.0", mode="no_grad",
         expect={"GradientMonitor": _NO_BACKWARD, "clip hooks": _NO_BACKWARD}),
    Spec("resnet18 under inference_mode", _tv("resnet18"), _image(), ["layer1", "layer4"], "layer2.0",
         mode="inference_mode", expect={"GradientMonitor": _NO_BACKWARD, "clip hooks": _NO_BACKWARD}),
    Spec("GPT-2 (transformers GPT2LMHeadModel, small config)", _hf("gpt2"), _token_inputs("train"),
         ["transformer.h.0", "transformer.h.1.attn"], "transformer.h.1", output={"transformer.h.1.attn": 0},
         note="called with keywords only (input_ids=, attention_mask=); attention returns (output, weights): "
              "output=0; the LM head shares the embedding's weight"),
    Spec("Llama (transformers LlamaForCausalLM, small config)", _hf("llama"), _token_inputs("train"),
         ["model.layers.0", "model.layers.1.self_attn"], "model.layers.1", output={"model.layers.1.self_attn": 0},
         note="decoder layers return a tensor on transformers 5.23 (the type has changed between releases); "
              "attention is called with keywords only and returns (output, weights): output=0; use_cache=False when training, "
              "as Hugging Face's own gradient checkpointing does"),
    Spec("BERT (transformers BertForMaskedLM, small config)", _hf("bert"), _token_inputs("encoder"),
         ["bert.encoder.layer.0", "bert.encoder.layer.1.attention"], "bert.encoder.layer.1",
         output={"bert.encoder.layer.1.attention": 0}),
    Spec("GPT-2 generate() (KV cache, 3 new tokens)", _hf("gpt2"), _token_inputs("generate"),
         ["transformer.h.0", "transformer.h.1.attn"], "transformer.h.1", output={"transformer.h.1.attn": 0},
         mode="generate", expect=_GENERATE, note=_GENERATE_NOTE),
    Spec("Llama generate() (KV cache, 3 new tokens)", _hf("llama"), _token_inputs("generate"),
         ["model.layers.0", "model.layers.1.self_attn"], "model.layers.1", output={"model.layers.1.self_attn": 0},
         mode="generate", expect=_GENERATE),
]


# general notes printed under the README table
NOTES = [
    "`Tracer` on the CNNs (in-place ReLU / `out += identity`) traces backward through tensor hooks on module "
    "outputs: `module_backward_pre` events, no `module_backward` (PyTorch forbids full backward hooks there), "
    "and it warns saying so.",
    "Modules that return tuples (`nn.LSTM`, `nn.MultiheadAttention`) are captured with `output=0`; without it "
    "`capture(grads=True)` and `ActivationStats` refuse and say so.",
]


# ------------------------------------------------------------------------------------ running
class Case:
    """A built model with its inputs, run the same way by every tool."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        torch.manual_seed(0)
        self.eager = spec.build()
        if spec.mode != "train":
            self.eager.eval()
        self.args, self.kwargs = spec.inputs()
        if spec.compiled:  # forget earlier rows' compiled code: nn.Sequential.forward is one code object for all
            torch._dynamo.reset()  # of them, and past dynamo's recompile limit a row would silently run eagerly
        self.model = torch.compile(self.eager, backend=spec.backend) if spec.compiled else self.eager
        if spec.compiled:
            self.model(*self.args, **self.kwargs)  # compiled and called once before any tool, as in real use

    @property
    def grad_enabled(self) -> bool:
        return self.spec.mode == "train"

    def context(self) -> Any:
        if self.spec.mode == "no_grad":
            return torch.no_grad()
        if self.spec.mode == "inference_mode":
            return torch.inference_mode()
        return torch.enable_grad()

    def forward(self) -> Any:
        """The model's output (a Hugging Face model's first tensor, e.g. its logits; generate()'s tokens)."""
        torch.manual_seed(1)  # dropout and stochastic depth draw the same numbers every run
        with self.context():
            if self.spec.mode == "generate":
                return self.model.generate(*self.args, **self.kwargs)
            out = self.model(*self.args, **self.kwargs)
        if isinstance(out, dict):  # transformers' ModelOutput
            out = next(v for v in out.values() if isinstance(v, torch.Tensor))
        return out

    def step(self) -> Any:
        """Forward (+ backward when grads are on); returns the output."""
        out = self.forward()
        if self.grad_enabled:
            out.float().square().mean().backward()
        return out

    def grads(self) -> list[torch.Tensor]:
        params = [p for p in self.eager.parameters() if p.requires_grad]
        self.eager.zero_grad(set_to_none=True)
        self.step()
        out = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
        self.eager.zero_grad(set_to_none=True)
        return out

    def module(self, name: str) -> nn.Module:
        return hooklab.get_module(self.model, name)


def _pick(output: Any, selector: Any) -> Any:
    return output if selector is None else output[selector]


def _reference_outputs(case: Case, names: list[str]) -> tuple[dict, dict, dict]:
    """Outputs (and output gradients) of ``names`` seen by plain forward hooks + register_hook."""
    outs: dict[str, torch.Tensor] = {}
    grads: dict[str, torch.Tensor] = {}
    calls: dict[str, int] = dict.fromkeys(names, 0)

    def hook(name: str) -> Any:
        def record(mod: nn.Module, args: Any, output: Any) -> None:
            out = _pick(output, _selector(case, name))
            calls[name] += 1
            outs[name] = out.detach().clone()
            if out.requires_grad:  # the gradient of the last call's output (what capture keeps)
                call = calls[name]
                out.register_hook(lambda g: grads.__setitem__(name, g.clone()) if call == calls[name] else None)
        return record

    with hooklab.HookScope() as scope:
        for n in names:
            scope.add(case.module(n).register_forward_hook(hook(n)))
        case.eager.zero_grad(set_to_none=True)
        case.step()
    return outs, grads, calls


def _selector(case: Case, name: str) -> Any:
    return case.spec.output.get(name)


def run_capture(case: Case) -> str:
    names = case.spec.layers
    ref, ref_grads, ref_calls = _reference_outputs(case, names)
    stores = {}
    for name in names:  # one capture per name: output= applies to the module that needs it
        with hooklab.capture(case.model, name, grads=True, clone=True, output=_selector(case, name)) as store:
            case.eager.zero_grad(set_to_none=True)
            case.step()
        stores[name] = store
    for name in names:
        store = stores[name]
        assert store.calls[name] == ref_calls[name], (name, store.calls, ref_calls)
        assert torch.equal(store[name], ref[name]), name
        if case.grad_enabled:
            assert torch.allclose(store.grads[name], ref_grads[name]), name
    if case.spec.mode == "generate":  # the prompt, then one token per step: the last call holds one token
        steps = case.kwargs["max_new_tokens"]
        assert all(stores[n].calls[n] == steps and stores[n][n].shape[1] == 1 for n in names), names
        return f"{steps} calls per module (prompt, then one token each), last equals plain hooks'"
    return f"outputs{' and gradients' if case.grad_enabled else ''} equal plain hooks'"


def run_feature_extractor(case: Case) -> str:
    names = case.spec.layers
    ref, _, _ = _reference_outputs(case, names)
    out = {}
    for name in names:
        fx = hooklab.FeatureExtractor(case.model, [name], clone=True, output=_selector(case, name))
        torch.manual_seed(1)
        with case.context():
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a module called twice: the warning is tested elsewhere
                out.update(fx(*case.args, **case.kwargs))
    assert all(torch.equal(out[n], ref[n]) for n in names)
    return "features equal plain hooks'"


def run_gradient_monitor(case: Case) -> str:
    if not case.grad_enabled:
        raise AssertionError("no backward")
    with hooklab.GradientMonitor(case.model) as gm:
        case.eager.zero_grad(set_to_none=True)
        case.step()
    norms = gm.norms(per="parameter")
    named = dict(case.model.named_parameters())
    for name, values in norms.items():
        assert values == [torch.linalg.vector_norm(named[name].grad).item()], name
    assert len(norms) == len({id(p) for p in case.eager.parameters() if p.requires_grad})
    return f"{len(norms)} parameter norms equal ‖p.grad‖"


def run_activation_stats(case: Case) -> str:
    names = case.spec.layers
    ref, _, ref_calls = _reference_outputs(case, names)
    for name in names:
        with hooklab.ActivationStats(case.model, [name], output=_selector(case, name)) as st:
            case.eager.zero_grad(set_to_none=True)
            case.step()
        got = st.stats[name]
        assert len(got["mean"]) == ref_calls[name]
        x = ref[name].float()
        assert got["mean"][-1] == torch.stack([x.mean()]).tolist()[0]
    return "one record per call; mean equals plain hooks'"


def run_tracer(case: Case) -> str:
    import warnings
    leaves = [n for n, m in case.model.named_modules() if n and not any(True for _ in m.children())]
    counts = dict.fromkeys(leaves, 0)
    with hooklab.HookScope() as scope:
        for n in leaves:
            scope.add(case.module(n).register_forward_hook(lambda *a, n=n: counts.__setitem__(n, counts[n] + 1)))
        with warnings.catch_warnings(record=True) as caught, hooklab.Tracer() as tr:
            warnings.simplefilter("always")
            traced = tr.modules(case.model)
            case.eager.zero_grad(set_to_none=True)
            case.step()
    assert traced == leaves
    forward = tr.sequence(["module_forward"])
    assert len(forward) == sum(counts.values()) > 0
    backward = [e for e in tr.events if e.kind.startswith("module_backward")]
    assert all(e.phase == "backward" for e in backward)
    if case.grad_enabled:
        assert backward, "no backward event"
    in_place = any("in place" in str(w.message) for w in caught)
    how = " (backward via output tensor hooks: in-place ops)" if in_place else ""
    return f"{len(forward)} forward, {len(backward)} backward module events{how}"


def run_ledger(case: Case) -> str:
    packs = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packs.append(t.numel() > 0)
        return t

    case.eager.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        case.forward()
    with hooklab.SavedTensorLedger(case.eager) as ledger:
        out = case.forward()
    assert len(ledger.records) == sum(packs)
    if not case.grad_enabled:
        assert ledger.records == []
        return "records nothing (no graph)"
    labelled = ledger.label_ops(out)
    out.float().square().mean().backward()
    del out
    assert ledger.live_bytes == 0
    assert labelled >= 0.9 * len(ledger.records), (labelled, len(ledger.records))
    return f"{len(ledger.records)} records = pack calls, {labelled} ops named"


def run_checkpoint(case: Case) -> str:
    ref = case.grads()
    ref_out = case.forward()
    with hooklab.checkpoint_modules(case.model, [case.spec.block]):
        got = case.grads()
        out = case.forward()
    assert torch.allclose(out, ref_out, rtol=1e-5, atol=1e-6)
    if case.grad_enabled:
        assert all(torch.allclose(g, r, rtol=1e-4, atol=1e-6) for g, r in zip(got, ref))
        return "gradients equal a run without it"
    return "output equals a run without it"


def run_offload(case: Case) -> str:
    ref = case.grads()
    with tempfile.TemporaryDirectory() as private:  # not the shared temp dir: other tests write there too
        with hooklab.offload_module(case.module(case.spec.block),
                                    lambda: hooklab.SaveOnDisk(min_bytes=0, directory=private)) as scope:
            got = case.grads()
        left = os.listdir(private)
    assert all(torch.allclose(g, r, rtol=1e-5, atol=1e-7) for g, r in zip(got, ref))
    assert not left, f"SaveOnDisk left {left}"
    assert scope.calls > 0, "offload_module's hooks never ran"
    if case.grad_enabled:
        assert scope.stats.offloaded > 0
    return f"{scope.stats.offloaded} tensors on disk, gradients equal, no file left"


def run_layer_shapes(case: Case) -> str:
    modes = {m: m.training for m in case.eager.modules()}
    with case.context():
        table = hooklab.layer_shapes(case.model, *case.args, depth=2, **case.kwargs)
    assert len(table) > 0 and all("?" not in r.shape for r in table)
    assert {m: m.training for m in case.eager.modules()} == modes
    return f"{len(table)} rows"


def run_clip(case: Case) -> str:
    if not case.grad_enabled:
        raise AssertionError("no backward")
    with hooklab.clip_grad_value_hooks(case.eager, 1e-3):
        case.eager.zero_grad(set_to_none=True)
        case.step()
    grads = [p.grad for p in case.eager.parameters() if p.grad is not None]
    assert grads and all(g.abs().max() <= 1e-3 for g in grads)
    return "every .grad within the value"


def run_inventory(case: Case) -> str:
    assert hooklab.hook_inventory(case.eager, include_global=False) == []
    first = next(p for p in case.eager.parameters())
    with hooklab.no_hooks_left_behind(case.eager), hooklab.HookScope() as scope:
        scope.add(case.module(case.spec.block).register_forward_hook(lambda *a: None))
        scope.add(first.register_hook(lambda g: None))
        seen = hooklab.hook_inventory(case.eager, include_global=False)
    assert len(seen) == 2, seen
    return "exactly the 2 hooks registered, none after"


TOOLS: dict[str, Callable[[Case], str]] = {
    "capture": run_capture,
    "FeatureExtractor": run_feature_extractor,
    "ActivationStats": run_activation_stats,
    "GradientMonitor": run_gradient_monitor,
    "Tracer": run_tracer,
    "SavedTensorLedger": run_ledger,
    "checkpoint_modules": run_checkpoint,
    "offload_module": run_offload,
    "layer_shapes": run_layer_shapes,
    "clip hooks": run_clip,
    "hook_inventory": run_inventory,
}


def expected(spec: Spec, tool: str) -> str:
    """``"works"``, ``"refuses: <regex>"``, ``"n/a: <why>"`` or ``"xfail: <why>"``."""
    return spec.expect.get(tool, "works")
