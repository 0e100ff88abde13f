"""The course's small trained language model: a 2-layer Llama that copies repeated token sequences.

A sequence is ``BOS``, ``SEQ_HALF`` random tokens, then the same tokens again. The first half is
unpredictable; the second half is predictable only by looking back at what followed the same token
earlier, the job of *induction heads* (a previous-token head in layer 0 feeding an induction head in
layer 1). The weights ship in :data:`ASSETS` (trained by ``tools/notebooks/train_induction_lm.py``, described
in the model card ``ASSETS / "README.md"``), so nothing is trained or downloaded in a notebook.

Importing this module changes no process-wide setting and needs no network; loading reads only
the shipped folder (``local_files_only=True``).

>>> from hooklab.course import induction
>>> batch = induction.make_batch(4, seed=0)
>>> tuple(batch.shape), bool((batch[:, 0] == induction.BOS).all())
((4, 25), True)
>>> bool(torch.equal(batch[:, 1:1 + induction.SEQ_HALF], batch[:, 1 + induction.SEQ_HALF:]))
True
>>> model = induction.load_model()
>>> type(model).__name__, model.training
('LlamaForCausalLM', False)
>>> induction.accuracy(model, induction.make_batch(64, seed=1)) > 0.9
True
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import needs_course_extra

if TYPE_CHECKING:  # transformers is imported only when a model or a config is asked for
    from transformers import LlamaConfig, LlamaForCausalLM

__all__ = ["ASSETS", "BOS", "SEQ_HALF", "VOCAB", "accuracy", "config", "load_model", "make_batch",
           "make_sequences", "second_half_mask", "several_successors"]

ASSETS: Path = Path(__file__).resolve().parent / "assets" / "induction_lm"
"""The folder of the shipped model: ``config.json``, ``model.safetensors`` and the model card ``README.md``."""

VOCAB = 64
"""Vocabulary size; token ids ``1 .. VOCAB - 1`` are the random tokens."""

BOS = 0
"""The token every sequence starts with (never drawn as a random token)."""

SEQ_HALF = 12
"""L: the number of random tokens, repeated once; a batch row has ``1 + 2 * SEQ_HALF`` tokens."""

MAX_POSITIONS = 64
"""Longest sequence the model was configured for (training used halves up to 16 tokens)."""


def _transformers() -> Any:
    try:
        import safetensors  # noqa: F401  (the shipped weights' format)
        import transformers
    except ImportError as missing:  # pip install hooklab without the course's extra
        raise needs_course_extra(missing, "the course's language model (hooklab.course.induction)") from missing
    return transformers


def config() -> LlamaConfig:
    """The architecture: 2 decoder layers, 4 heads of 16 dims, hidden size 64, MLP 256, untied LM head.

    ``attn_implementation`` is left at the default (SDPA), so attention weights are not returned
    unless a model is loaded with ``attn_implementation="eager"``.
    """
    LlamaConfig = _transformers().LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=BOS,
        eos_token_id=None,
        pad_token_id=None,
    )


def make_sequences(n: int, half: int, *, generator: torch.Generator) -> torch.Tensor:
    """``n`` rows of ``BOS``, ``half`` random tokens in ``1 .. VOCAB - 1``, the same tokens again."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not isinstance(half, int) or isinstance(half, bool) or not 1 <= half <= (MAX_POSITIONS - 1) // 2:
        raise ValueError(f"half must be an int between 1 and {(MAX_POSITIONS - 1) // 2}, got {half!r}")
    tokens = torch.randint(1, VOCAB, (n, half), generator=generator)
    bos = torch.full((n, 1), BOS, dtype=torch.long)
    return torch.cat([bos, tokens, tokens], dim=1)


def make_batch(n: int, *, seed: int) -> torch.Tensor:
    """``n`` sequences of shape ``[n, 1 + 2 * SEQ_HALF]`` drawn from their own generator seeded with ``seed``.

    Row ``i`` is ``[BOS, t_1 .. t_L, t_1 .. t_L]``; the global random state is not touched.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    generator = torch.Generator().manual_seed(seed)
    return make_sequences(n, SEQ_HALF, generator=generator)


def second_half_mask(length: int, half: int) -> torch.Tensor:
    """Which *prediction* positions (``logits[:, p]`` predicts token ``p + 1``) are scored.

    Scored: the predictions of the second-half tokens after the first repeated one, i.e. tokens
    ``half + 2 .. 2 * half`` (nothing before the first repeated token says that the first half
    has ended, so induction cannot predict it and it is not scored).
    """
    mask = torch.zeros(length - 1, dtype=torch.bool)
    mask[half + 1:2 * half] = True
    return mask


def several_successors(batch: torch.Tensor) -> torch.Tensor:
    """``[n, scored]`` bool: which scored predictions one-token induction cannot decide.

    A scored prediction (``second_half_mask``) is made at a second-half position whose current token
    also occurred in the first half; it is ambiguous when that token occurred there more than once,
    followed by different tokens, so "copy what followed it" names several candidates.

    >>> row = torch.tensor([[0, 5, 6, 5, 7, 5, 6, 5, 7]])  # L = 4: token 5 is followed once by 6, once by 7
    >>> several_successors(row).tolist()  # predictions at positions 5, 6, 7: the current tokens 5, 6, 5
    [[True, False, True]]
    """
    if batch.dim() != 2 or batch.shape[1] % 2 == 0 or batch.shape[1] < 3:
        raise ValueError(f"batch must be [n, 1 + 2 * half] token ids, got shape {tuple(batch.shape)}")
    half = (batch.shape[1] - 1) // 2
    first, following = batch[:, 1:half + 1], batch[:, 2:half + 2]  # the first half's tokens, the token after each
    columns = []
    for p in second_half_mask(batch.shape[1], half).nonzero().flatten().tolist():
        occurs = first == batch[:, p, None]  # [n, half]: where the current token occurred in the first half
        differ = following[:, :, None] != following[:, None, :]
        columns.append((occurs[:, :, None] & occurs[:, None, :] & differ).any((1, 2)))
    return torch.stack(columns, dim=1)


def load_model() -> LlamaForCausalLM:
    """The shipped model, float32, in eval mode, read from :data:`ASSETS` without the network."""
    LlamaForCausalLM = _transformers().LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Loading weights" bar in a notebook's output; restored below
    try:
        model = LlamaForCausalLM.from_pretrained(ASSETS, local_files_only=True, dtype=torch.float32)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    return model.eval()


@torch.no_grad()
def accuracy(model: torch.nn.Module, batch: torch.Tensor) -> float:
    """Fraction of the second-half tokens after the first repeated one that ``model``'s argmax predicts.

    ``batch`` is ``[n, 1 + 2 * half]`` as :func:`make_batch` gives it (any ``half``).
    """
    if batch.dim() != 2 or batch.shape[1] % 2 == 0 or batch.shape[1] < 3:
        raise ValueError(f"batch must be [n, 1 + 2 * half] token ids, got shape {tuple(batch.shape)}")
    half = (batch.shape[1] - 1) // 2
    logits = model(batch).logits
    mask = second_half_mask(batch.shape[1], half)
    predicted = logits[:, :-1].argmax(-1)[:, mask]
    target = batch[:, 1:][:, mask]
    return (predicted == target).float().mean().item()
