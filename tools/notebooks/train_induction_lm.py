"""Train the course's small induction model and write it to hooklab/course/assets/induction_lm/.

    .venv/bin/python -m tools.notebooks.train_induction_lm            # the shipped weights (a few minutes, 1 CPU thread)
    .venv/bin/python -m tools.notebooks.train_induction_lm --steps 5 --out /tmp/x   # a quick try

Task: ``BOS, t_1 .. t_L, t_1 .. t_L`` with random tokens (see :mod:`hooklab.course.induction`).
Each step draws one half-length L between ``HALF_MIN`` and ``HALF_MAX``, so the distance back to
the copied token changes from batch to batch: a head that attends a fixed number of positions back
cannot solve it, looking up the previous occurrence of the current token (induction) can.
The loss is the cross-entropy of the second-half tokens after the first repeated one (the only
tokens that can be predicted). Everything is drawn from generators seeded with ``--seed``.
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hooklab.course import induction

SEED = 0
STEPS = 3000
BATCH = 64
LR = 3e-3
WARMUP = 100
HALF_MIN, HALF_MAX = 6, 16
EVAL_SEED = 20261123  # held-out data: make_batch(EVAL_N, seed=EVAL_SEED), never drawn in training
EVAL_N = 2000


def loss_on(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    half = (batch.shape[1] - 1) // 2
    logits = model(batch).logits[:, :-1]
    mask = induction.second_half_mask(batch.shape[1], half)
    return F.cross_entropy(logits[:, mask].reshape(-1, induction.VOCAB), batch[:, 1:][:, mask].reshape(-1))


def train(*, steps: int = STEPS, seed: int = SEED, log_every: int = 0):
    """Return ``(model, losses)``: the model after ``steps`` AdamW steps and the loss of every step."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)  # the initial weights
    model = LlamaForCausalLM(induction.config()).float().train()
    data = torch.Generator().manual_seed(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:  # linear warm-up, cosine decay to a tenth
        if step < WARMUP:
            return (step + 1) / WARMUP
        progress = (step - WARMUP) / max(1, steps - WARMUP)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    losses = []
    for step in range(steps):
        half = int(torch.randint(HALF_MIN, HALF_MAX + 1, (), generator=data))
        batch = induction.make_sequences(BATCH, half, generator=data)
        loss = loss_on(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:5d}  half {half:2d}  loss {loss.item():.4f}", flush=True)
    return model.eval(), losses


def held_out_accuracy(model: torch.nn.Module) -> float:
    return induction.accuracy(model, induction.make_batch(EVAL_N, seed=EVAL_SEED))


@torch.no_grad()
def head_scores(model: torch.nn.Module) -> dict[str, list[float]]:
    """Mean attention per head, layer by layer, on held-out data (eager attention returns the weights).

    ``previous``: from each token to the one before it. ``induction``: from a second-half token to the
    token after its earlier occurrence (position ``p - L + 1``), where the copied token sits.
    """
    from transformers import LlamaForCausalLM

    config = copy.deepcopy(model.config)
    config._attn_implementation = "eager"
    eager = LlamaForCausalLM(config).eval()
    eager.load_state_dict(model.state_dict())
    batch = induction.make_batch(500, seed=EVAL_SEED)
    L = induction.SEQ_HALF
    weights = eager(batch, output_attentions=True).attentions  # per layer: [n, heads, query, key]
    scores = {}
    for layer, a in enumerate(weights):
        q = torch.arange(L + 1, 2 * L + 1)
        p = torch.arange(1, 2 * L + 1)
        scores[f"layer {layer} induction"] = a[:, :, q, q - L + 1].mean((0, 2)).tolist()
        scores[f"layer {layer} previous"] = a[:, :, p, p - 1].mean((0, 2)).tolist()
    return scores


def model_card(*, params: int, size: int, steps: int, seed: int, first_loss: float, last_loss: float,
               acc: float, by_half: dict[int, float], minutes: float, heads: dict[str, list[float]]) -> str:
    import safetensors
    import transformers

    halves = ", ".join(f"L={h}: {a:.3f}" for h, a in by_half.items())
    head_rows = "\n".join(f"| {what} | " + " | ".join(f"{x:.2f}" for x in values) + " |"
                           for what, values in heads.items())
    return f"""# induction_lm: a 2-layer Llama that copies repeated token sequences

The small trained model of notebook 12 ("Transformer language models / Transformer 语言模型").
It ships with the repository so the notebook and the tests never train or download anything.

## Task
A sequence is `BOS` (token {induction.BOS}), L random tokens drawn uniformly from 1..{induction.VOCAB - 1}, then the
same L tokens again (`hooklab.course.induction.make_batch`, L = `SEQ_HALF` = {induction.SEQ_HALF}, so 1 + 2L =
{1 + 2 * induction.SEQ_HALF} tokens). The first half cannot be predicted; the second half can only by induction:
find the earlier occurrence of the current token and copy the token that followed it.
Training drew L uniformly from {HALF_MIN}..{HALF_MAX} at each step, so a head that looks back a fixed
distance cannot solve the task. The loss, and the accuracy below, cover the second-half tokens after
the first repeated one (nothing before the first repeated token says that the first half has ended,
so induction cannot predict it).

## Architecture
`transformers.LlamaForCausalLM` (`hooklab.course.induction.config()`): vocabulary {induction.VOCAB}, 2 decoder
layers, 4 attention heads of 16 dims (hidden size 64, no grouped KV), SwiGLU MLP of 256, RMSNorm,
rotary position embeddings, untied LM head, default (SDPA) attention. {params:,} parameters, float32,
`model.safetensors` is {size:,} bytes.

## Training
- Command: `.venv/bin/python -m tools.notebooks.train_induction_lm` (one CPU thread; {minutes:.0f} minutes on the
  machine that trained it, a shared 2-core VM).
- Seed: {seed} (initial weights from `torch.manual_seed({seed})`, data from a generator seeded {seed + 1}).
- Steps: {steps}, batch {BATCH}, AdamW (lr {LR}, betas (0.9, 0.98), weight decay 0.01), {WARMUP} warm-up steps then
  cosine decay to lr/10, gradient norm clipped at 1.0.
- First loss: {first_loss:.6f} (the test checks that the script's seed reproduces it). Last loss: {last_loss:.4f}.

## Evaluation
Held-out data: `make_batch({EVAL_N}, seed={EVAL_SEED})` (never drawn in training).

held-out accuracy: {acc:.4f}

(Argmax accuracy over the second-half tokens after the first repeated one, `induction.accuracy`.)
Other half-lengths, {EVAL_N} sequences each, same seed: {halves}.
`tests/course/test_induction_model.py` checks that the shipped weights reach the held-out accuracy above on
fresh seeded data.

## Mechanism
Mean attention weight per head (loaded with `attn_implementation="eager"`, `output_attentions=True`,
on `make_batch(500, seed={EVAL_SEED})`): "previous" is from each token to the token before it,
"induction" from a second-half token to the token after its earlier occurrence (the one to copy).
A previous-token head in layer 0 and induction heads in layer 1 are the known two-layer circuit.

| score | head 0 | head 1 | head 2 | head 3 |
|---|---|---|---|---|
{head_rows}

## Versions
transformers {transformers.__version__}, torch {torch.__version__.split('+')[0]}, \
safetensors {safetensors.__version__}, Python {platform.python_version()}.

## Licence
The weights are licensed like hooklab's code: MIT (`license` in the project's pyproject.toml).
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=induction.ASSETS)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    torch.set_num_threads(1)
    start = time.perf_counter()
    model, losses = train(steps=args.steps, seed=args.seed, log_every=100)
    minutes = (time.perf_counter() - start) / 60
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    (args.out / "generation_config.json").unlink(missing_ok=True)  # defaults: greedy, no EOS
    acc = held_out_accuracy(model)
    by_half = {}
    for half in (6, 8, 16):
        batch = induction.make_sequences(EVAL_N, half, generator=torch.Generator().manual_seed(EVAL_SEED))
        by_half[half] = induction.accuracy(model, batch)
    size = (args.out / "model.safetensors").stat().st_size
    params = sum(p.numel() for p in model.parameters())
    card = model_card(params=params, size=size, steps=args.steps, seed=args.seed, first_loss=losses[0],
                      last_loss=losses[-1], acc=acc, by_half=by_half, minutes=minutes, heads=head_scores(model))
    (args.out / "README.md").write_text(card, encoding="utf-8")
    print(f"held-out accuracy {acc:.4f}, {params} parameters, {size} bytes, {minutes:.1f} min -> {args.out}")


if __name__ == "__main__":
    main()
