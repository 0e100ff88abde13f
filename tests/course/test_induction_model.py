"""The shipped induction model (hooklab/course/assets/induction_lm) and its training script.

The accuracy and the first loss are read from the model card, so the card and the weights cannot drift.
"""
from __future__ import annotations

import re
import socket

import pytest
import torch

from hooklab.course import induction

pytestmark = pytest.mark.course

CARD = induction.ASSETS / "README.md"


def card_number(label: str) -> float:
    match = re.search(rf"^{re.escape(label)}:? ([0-9.]+)", CARD.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f"the model card {CARD} has no line starting with {label!r}"
    return float(match.group(1).rstrip("."))


@pytest.fixture(scope="module")
def model():
    return induction.load_model()


def test_the_assets_are_there_and_small():
    names = sorted(p.name for p in induction.ASSETS.iterdir())
    assert names == ["README.md", "config.json", "model.safetensors"]
    size = (induction.ASSETS / "model.safetensors").stat().st_size
    assert size < 1_000_000
    assert f"is {size:,} bytes" in CARD.read_text(encoding="utf-8")


def test_loads_offline_without_touching_the_network(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("load_model() tried to open a network connection")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    model = induction.load_model()
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.config.to_dict()["num_hidden_layers"] == induction.config().num_hidden_layers
    assert model.config.vocab_size == induction.VOCAB and model.config.bos_token_id == induction.BOS
    assert model.config._attn_implementation == "sdpa"  # the default: attention weights are not returned
    params = sum(p.numel() for p in model.parameters())
    assert f"{params:,} parameters" in CARD.read_text(encoding="utf-8")


def test_make_batch_has_the_promised_structure():
    batch = induction.make_batch(50, seed=3)
    L = induction.SEQ_HALF
    assert batch.dtype == torch.long and tuple(batch.shape) == (50, 1 + 2 * L)
    assert (batch[:, 0] == induction.BOS).all()
    assert ((batch[:, 1:] >= 1) & (batch[:, 1:] < induction.VOCAB)).all()  # BOS is never drawn
    assert torch.equal(batch[:, 1:1 + L], batch[:, 1 + L:])
    assert torch.equal(batch, induction.make_batch(50, seed=3))          # seeded
    assert not torch.equal(batch, induction.make_batch(50, seed=4))
    state = torch.random.get_rng_state()
    induction.make_batch(5, seed=0)
    assert torch.equal(state, torch.random.get_rng_state())             # the global generator is untouched


def test_the_shipped_weights_reach_the_stated_accuracy(model):
    stated = card_number("held-out accuracy")
    assert stated >= 0.95
    fresh = induction.accuracy(model, induction.make_batch(2000, seed=424242))
    # 2000 x 11 scored tokens: the sampling error of an accuracy near the stated one is < 0.002
    assert fresh >= stated - 0.01, f"accuracy {fresh:.4f} on fresh data, the model card states {stated}"


def test_the_card_accuracy_is_what_the_script_measures(model):
    from tools.notebooks import train_induction_lm as script

    assert abs(script.held_out_accuracy(model) - card_number("held-out accuracy")) <= 0.002


def test_accuracy_is_a_truth_about_the_second_half(model):
    batch = induction.make_batch(200, seed=5)
    L = induction.SEQ_HALF
    logits = model(batch).logits
    by_hand = (logits[:, L + 1:2 * L].argmax(-1) == batch[:, L + 2:]).float().mean().item()
    assert induction.accuracy(model, batch) == pytest.approx(by_hand)
    # a random model is at chance on the same tokens
    torch.manual_seed(0)
    from transformers import LlamaForCausalLM

    assert induction.accuracy(LlamaForCausalLM(induction.config()).eval(), batch) < 0.2


def test_the_card_figures_beyond_the_held_out_accuracy(model):
    card = CARD.read_text(encoding="utf-8")
    held_out = induction.make_batch(2000, seed=20261123)
    ambiguous = induction.several_successors(held_out)
    assert f"{ambiguous.float().mean().item():.1%} of the scored predictions" in card
    with torch.no_grad():
        right = model(held_out).logits[:, :-1].argmax(-1)[:, induction.second_half_mask(25, induction.SEQ_HALF)]
    right = right == held_out[:, 1:][:, induction.second_half_mask(25, induction.SEQ_HALF)]
    assert right[ambiguous].float().mean().item() == pytest.approx(card_number("ambiguous predictions answered right"),
                                                                   abs=5e-4)
    for half, stated in re.findall(r"L=(\d+): ([0-9]+\.[0-9]+)", card.split("Longer than any half")[1].split("\n")[0]):
        sequences = induction.make_sequences(2000, int(half), generator=torch.Generator().manual_seed(20261123))
        assert induction.accuracy(model, sequences) == pytest.approx(float(stated), abs=5e-4)


def test_several_successors_by_hand():
    batch = induction.make_batch(300, seed=9)
    L, found = induction.SEQ_HALF, induction.several_successors(batch)
    positions = induction.second_half_mask(batch.shape[1], L).nonzero().flatten().tolist()
    for row in range(len(batch)):
        tokens = batch[row].tolist()
        for column, p in enumerate(positions):
            successors = {tokens[i + 1] for i in range(1, L + 1) if tokens[i] == tokens[p]}
            assert bool(found[row, column]) == (len(successors) > 1)
    assert 0 < found.float().mean() < 0.5
    with pytest.raises(ValueError, match="batch must be"):
        induction.several_successors(batch[:, :-1])


def test_the_training_script_reproduces_its_first_loss():
    from tools.notebooks import train_induction_lm as script

    _, losses = script.train(steps=2, seed=script.SEED)
    assert losses[0] == pytest.approx(card_number("- First loss"), abs=1e-4)
    _, again = script.train(steps=2, seed=script.SEED)
    assert again == pytest.approx(losses, abs=1e-6)
    _, other = script.train(steps=1, seed=script.SEED + 7)
    assert other[0] != pytest.approx(losses[0], abs=1e-4)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="n must be a positive int"):
        induction.make_batch(0, seed=0)
    with pytest.raises(TypeError, match="seed must be an int"):
        induction.make_batch(3, seed=1.5)
    with pytest.raises(ValueError, match=r"batch must be \[n, 1 \+ 2 \* half\]"):
        induction.accuracy(torch.nn.Identity(), torch.zeros(2, 4, dtype=torch.long))
