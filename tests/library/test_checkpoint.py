"""hooklab.checkpoint: the PyTorch limits checkpoint_modules refuses instead of giving a wrong gradient or a late error
(reliability review round 2: S10, D6)."""
from __future__ import annotations

import os

import pytest
import torch
from torch import nn

import hooklab


def _dropout_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.5), nn.Linear(64, 1))


def _grads(model: nn.Module, x: torch.Tensor, seed: int = 1) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    model(x).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.pin
def test_pytorch_checkpoint_inside_compiled_code_redraws_dropout():
    """The upstream bug behind the refusal (a tripwire: when PyTorch fixes it, the refusal can go)."""
    from torch.utils.checkpoint import checkpoint

    torch._dynamo.reset()
    model, x = _dropout_mlp(), torch.randn(8, 16)

    class Checkpointed(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            h = self.inner[0](x)
            h = checkpoint(self.inner[1], h, use_reentrant=False)
            return self.inner[2](h)

    truth = _grads(torch.compile(model, backend="eager"), x)
    plain_checkpoint = _grads(torch.compile(Checkpointed(model), backend="eager"), x)
    assert not all(torch.allclose(a, b) for a, b in zip(truth, plain_checkpoint))


def test_compiled_model_with_dropout_in_the_block_is_refused_and_the_eager_model_is_right():
    """S10: same forward, other gradients, no error; now refused with what to do instead."""
    torch._dynamo.reset()
    model, x = _dropout_mlp(), torch.randn(8, 16)
    compiled = torch.compile(model, backend="eager")
    with pytest.raises(RuntimeError, match=r"'_orig_mod.1'.*another dropout mask.*model._orig_mod.*aot_eager"):
        with hooklab.checkpoint_modules(compiled, ["_orig_mod.1"]):
            pass
    assert "forward" not in model[1].__dict__  # nothing patched
    truth = _grads(model, x)  # the eager model, plain PyTorch
    with hooklab.checkpoint_modules(model, ["1"]):  # what the message suggests: checkpoint the eager model
        got = _grads(model, x)
    assert all(torch.equal(a, b) for a, b in zip(truth, got))
    model.eval()  # no random numbers in eval mode: accepted
    with hooklab.checkpoint_modules(compiled, ["_orig_mod.1"]):
        pass


def test_multihead_attention_dropout_counts_as_random():
    torch._dynamo.reset()
    block = nn.Sequential(nn.Linear(8, 8))
    block.attn = nn.MultiheadAttention(8, 2, dropout=0.1)
    compiled = torch.compile(block, backend="eager")
    with pytest.raises(RuntimeError, match="_orig_mod.attn"):
        with hooklab.checkpoint_modules(compiled, ["_orig_mod.attn"]):
            pass


def _llama():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=None, pad_token_id=None))


@pytest.mark.timeout(240)
def test_a_decoder_layer_called_with_a_kv_cache_is_refused_and_use_cache_false_is_right():
    """D6: the recompute appended to the KV cache again and backward failed with a size mismatch."""
    model = _llama()
    ids = torch.randint(1, 64, (2, 16))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with pytest.raises(RuntimeError, match=r"'model.layers.0' was called with a key/value cache .*use_cache=False"):
        with hooklab.checkpoint_modules(model, "model.layers.0"):
            model(input_ids=ids, attention_mask=mask, use_cache=True)
    assert "forward" not in model.model.layers[0].__dict__

    def grads():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, attention_mask=mask, use_cache=False).logits.sum().backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    truth = grads()
    with hooklab.checkpoint_modules(model, "model.layers.0"):
        got = grads()
    assert len(got) == len(truth) and all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(truth, got))
    with torch.no_grad(), hooklab.checkpoint_modules(model, "model.layers.0"):  # generation: no recompute, accepted
        model(input_ids=ids, attention_mask=mask, use_cache=True)


def test_reentrant_checkpoint_of_a_module_whose_inputs_need_no_grad_is_refused():
    """Review row N20: the first layer gets the batch (no grad) and its weights silently got no gradient."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match=r"'0' gets no input that requires grad.*use_reentrant=False"):
        with hooklab.checkpoint_modules(model, "0", use_reentrant=True):
            model(x)
    model(x).sum().backward()  # plain PyTorch: the truth
    truth = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with hooklab.checkpoint_modules(model, "0"):  # the default handles it
        model(x).sum().backward()
    assert all(torch.allclose(a, p.grad) for a, p in zip(truth, model.parameters()))
    with hooklab.checkpoint_modules(model, "2", use_reentrant=True):  # an input that requires grad: accepted
        model(x).sum().backward()


# --- review round 3: N1, N4, a second block ------------------------------------------------------------------------
def test_a_copy_made_inside_the_block_computes_with_its_own_weights_and_writes_its_own_grad():
    """N1 (the review's EMA case): the copy's fc1 ran the original's forward, with the original's weights, and its
    backward wrote the original's .grad, for ever."""
    import copy
    from collections import OrderedDict

    torch.manual_seed(0)
    m = nn.Sequential(OrderedDict(fc1=nn.Linear(4, 8), act=nn.ReLU(), fc2=nn.Linear(8, 3)))
    x = torch.randn(5, 4)
    with hooklab.checkpoint_modules(m, ["fc1"]):
        ema = copy.deepcopy(m)
    with torch.no_grad():
        ema.fc1.weight.zero_()
        ema.fc1.bias.zero_()
    assert torch.equal(ema.fc1(x), torch.zeros(5, 8))
    ema(x).sum().backward()
    assert m.fc1.weight.grad is None and ema.fc1.weight.grad is not None


class _FunctionalDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.rate = nn.Linear(16, 16), 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(self.fc(x), self.rate, self.training)  # no nn.Dropout, no dropout attribute


def test_a_compiled_model_with_a_training_mode_block_is_refused_even_when_its_dropout_is_functional():
    """N4: F.dropout in a custom module of a compiled model gave wrong gradients (max difference 0.123 of 0.161)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), _FunctionalDropout(), nn.Linear(16, 1))
    compiled = torch.compile(model, backend="eager")
    with pytest.raises(RuntimeError, match=r"compile'd model checkpoints '_orig_mod.1' in training mode.*functional "
                                           r"F.dropout.*model._orig_mod.*allow_compiled=True"):
        hooklab.checkpoint_modules(compiled, ["_orig_mod.1"])
    assert "forward" not in model[1].__dict__
    with pytest.raises(RuntimeError, match="dropout in training mode"):  # dropout hooklab can see: no opt-in
        hooklab.checkpoint_modules(torch.compile(_dropout_mlp(), backend="eager"), ["_orig_mod.1"], allow_compiled=True)


def test_a_compiled_model_without_random_numbers_may_be_checkpointed_when_the_caller_says_so():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1)), torch.randn(8, 16)
    compiled = torch.compile(model, backend="eager")
    truth = _grads(compiled, x)
    with hooklab.checkpoint_modules(compiled, ["_orig_mod.1"], allow_compiled=True):
        got = _grads(compiled, x)
    assert all(torch.allclose(a, b) for a, b in zip(truth, got))
    model.eval()  # a block in eval mode draws no dropout: accepted without the opt-in
    with hooklab.checkpoint_modules(compiled, ["_orig_mod.1"]):
        pass


def test_a_second_block_with_the_same_object_is_refused():
    model = nn.Sequential(nn.Linear(4, 4))
    block = hooklab.checkpoint_modules(model, ["0"])
    with block:
        pass
    with pytest.raises(RuntimeError, match=r"this checkpoint_modules block has already run; call "
                                           r"checkpoint_modules\(...\) again"):
        with block:
            pass
    assert "forward" not in model[0].__dict__
