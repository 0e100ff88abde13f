"""Activation checkpointing of named submodules: keep nothing (or only what a policy keeps), recompute in backward.

:func:`checkpoint_modules` runs every call of the named submodules under
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` inside a ``with`` block, the opposite
trade of the offloading helpers (keep nothing, recompute in backward). Selective checkpointing asks a
*policy*, op by op, which outputs to keep (``CheckpointPolicy.MUST_SAVE``) and which to recompute
(``PREFER_RECOMPUTE``): keep the expensive matrix multiplications, recompute the cheap pointwise ops.
:func:`selective_checkpoint_modules` applies it the same way; :class:`hooklab.OpCounter` shows what
backward recomputed::

    with selective_checkpoint_modules(model, ["layer1", "layer2"], policy=[torch.ops.aten.convolution]):
        loss = model(x).sum()
    with OpCounter() as ran:
        loss.backward()
    ran.counts["convolution"]     # 0: no convolution was run again
"""
from __future__ import annotations

import collections
import functools
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch import nn

from ._checks import flag, module as check_module
from ._torch_internals import ATEN_OP_TYPES, is_compiled_module, tree_flatten
from .lookup import as_names, get_modules

if TYPE_CHECKING:  # imported when used (public since torch 2.4; hooklab supports 2.3)
    from torch.utils.checkpoint import CheckpointPolicy

__all__ = ["checkpoint_modules", "selective_checkpoint_modules"]

def _copy_containers(value: Any) -> Any:
    """A copy of the lists, tuples and dicts in ``value`` (the objects inside are shared)."""
    if isinstance(value, list):
        return [_copy_containers(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_copy_containers(v) for v in value)
    if type(value) in (dict, collections.OrderedDict):
        return type(value)((k, _copy_containers(v)) for k, v in value.items())
    return value


_RANDOM = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout, nn.RReLU)
_DROPOUT_ATTRIBUTES = ("dropout", "attention_dropout", "dropout_p", "attn_dropout")  # MHA, Hugging Face attention


def _draws_random_numbers(module: nn.Module) -> bool:
    """True for a module in training mode that uses random numbers (dropout with p > 0, RReLU)."""
    if not module.training:
        return False
    if isinstance(module, _RANDOM):
        return isinstance(module, nn.RReLU) or module.p > 0
    return any(isinstance(getattr(module, a, None), float) and getattr(module, a) > 0 for a in _DROPOUT_ATTRIBUTES)


def _refuse_compiled_training(model: nn.Module, modules: dict[str, nn.Module], allow: bool) -> None:
    """Refuse a compiled model whose checkpointed blocks train (PyTorch's bug, reviews S10 and N4): inside compiled
    code the recompute in backward draws other random numbers, and hooklab cannot see every random op."""
    if not is_compiled_module(model):  # the eager model of a compiled one is right when the eager one is called
        return
    random = [f"{name}.{sub}".strip(".") for name, module in modules.items()
              for sub, m in module.named_modules() if _draws_random_numbers(m)]
    training = [name for name, module in modules.items() if module.training]
    if not random and (allow or not training):
        return
    why = ("PyTorch (2.15) draws another dropout mask inside compiled code when the checkpoint recomputes the block in "
           "backward (backend='eager', and inductor's default RNG), so the gradients would be wrong without any "
           "error; plain torch.utils.checkpoint does the same. ")
    fixes = ("Checkpoint the eager model (model._orig_mod) and call that one, or compile with backend='aot_eager', "
             "or put the blocks in eval() while checkpointing")
    if random:
        shown = ", ".join(map(repr, random[:3])) + (", ..." if len(random) > 3 else "")
        raise RuntimeError(f"checkpoint_modules: this torch.compile'd model uses random numbers inside the "
                           f"checkpointed block ({shown}: dropout in training mode). {why}{fixes}.")
    shown = ", ".join(map(repr, training[:3])) + (", ..." if len(training) > 3 else "")
    raise RuntimeError(f"checkpoint_modules: this torch.compile'd model checkpoints {shown} in training mode. If the "
                       f"block draws random numbers, {why}hooklab finds dropout modules and attributes, but not a "
                       f"functional F.dropout or torch.rand in a forward, so it refuses every training-mode block of a "
                       f"compiled model. {fixes}; or, once you have checked that the blocks draw no random numbers, "
                       "pass allow_compiled=True.")


def _cache_type() -> type | None:
    """Hugging Face's KV cache class, if transformers is loaded (hooklab does not import it)."""
    module = sys.modules.get("transformers.cache_utils")
    return getattr(module, "Cache", None)


def _refuse_cache(name: str, args: Any, kwargs: Any) -> None:
    """Refuse a call that passes a KV cache object: the module appends to it, and the recompute appends again."""
    cache = _cache_type()
    if cache is None or not torch.is_grad_enabled():
        return
    found = [type(v).__name__ for v in tree_flatten((args, kwargs)) if isinstance(v, cache)]
    if found:
        raise RuntimeError(
            f"checkpoint_modules: {name!r} was called with a key/value cache ({found[0]}, e.g. use_cache=True). "
            "The module appends to the cache in forward, and the checkpoint's recompute in backward would append "
            "again, so backward fails with a size mismatch (plain torch.utils.checkpoint does the same). Call the "
            "model with use_cache=False while training with checkpoints, as Hugging Face's own gradient "
            "checkpointing does.")


def _refuse_nested(modules: dict[str, nn.Module]) -> None:
    """Refuse a module and one of its descendants together (one checkpoint inside another)."""
    for outer, parent in modules.items():
        inside = {id(m) for m in parent.modules() if m is not parent}
        for inner, child in modules.items():
            if id(child) in inside:
                raise ValueError(
                    f"checkpoint_modules: {inner!r} is inside {outer!r}, which is checkpointed too. The recompute "
                    f"of {outer!r} in backward would run {inner!r} without its checkpoint once the block has ended, "
                    "so the two passes would not match. Name one of them: the outer one keeps less memory, "
                    "the inner ones recompute less.")


def checkpoint_modules(model: nn.Module, names: str | Iterable[str], *, use_reentrant: bool = False,
                       allow_compiled: bool = False, **checkpoint_kwargs: Any) -> AbstractContextManager[list[nn.Module]]:
    """Inside the block, every call of the named submodules runs under activation checkpointing.

    The opposite trade of offloading: keep nothing, recompute in backward. Each module's
    ``forward`` is wrapped in ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``
    (an instance attribute, removed on exit, also after an exception), so the model's code
    and state_dict are untouched and the module's own hooks still run outside the
    checkpoint. Unknown names raise an error listing the names that exist; a module and one of
    its descendants together are refused (a checkpoint inside another). The object is used for one
    block (a second ``with`` raises: call the function again). A ``copy.deepcopy`` of the model made
    inside the block computes plainly, with its own weights (the wrapper is bound to the module it is
    called on and checkpoints only the original), and so does a model pickled inside the block.

    Two limits that come from PyTorch (seen on 2.15), not from this function: a module whose
    forward gets the same tensor several times and tests for it (``nn.MultiheadAttention``
    called as ``mha(x, x, x)`` checks ``query is key``) can take another path when the
    recomputation hands it the arguments back as distinct tensors, and then backward raises
    ``CheckpointError`` whenever a saved-tensor hooks context (a :class:`SavedTensorLedger`,
    the offloading contexts) is active outside the checkpoint: checkpoint the whole layer that
    receives ``x`` once instead (notebook 07). A training-mode BatchNorm checkpointed inside
    ``torch.compile`` fails in backward (its ``num_batches_tracked`` counter is updated in place).
    Inside a compiled model (``backend="eager"``, inductor's default RNG) the recompute draws other
    random numbers, so a block with dropout gets wrong gradients without an error. hooklab sees dropout
    modules and attributes but not a functional ``F.dropout`` in a forward, so a compiled wrapper whose
    checkpointed blocks are in training mode is refused (checkpoint the eager model and call the eager
    one, or compile with ``backend="aot_eager"``; patching the eager model and calling its compiled
    wrapper meets the same PyTorch bug); ``allow_compiled=True`` accepts it once you have checked that the
    blocks draw no random numbers (dropout modules found in the blocks are refused even then). A module that changes an argument object in forward is recomputed
    with the changed object: a Hugging Face decoder layer called with a KV cache (``use_cache=True``)
    appends to it twice and backward fails, so a call that passes a cache is refused (train with
    ``use_cache=False``, as Hugging Face's own gradient checkpointing does).

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    >>> x = torch.randn(32, 64)
    >>> with checkpoint_modules(model, ["0", "2"]):
    ...     loss = model(x).sum()
    >>> loss.backward()           # the two Linear layers run their forward again here
    >>> all(p.grad is not None for p in model.parameters())
    True
    """
    check_module(model, "checkpoint_modules")
    flag(use_reentrant, "use_reentrant")
    flag(allow_compiled, "allow_compiled")
    # an empty list is allowed here (nothing checkpointed: the baseline of a comparison)
    names = [] if isinstance(names, (list, tuple)) and not names else as_names(names)
    found = get_modules(model, names)
    _refuse_nested(found)
    _refuse_compiled_training(model, found, allow_compiled)
    return _Checkpointing(found, "checkpoint_modules", use_reentrant=use_reentrant, **checkpoint_kwargs)


def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """What a module's ``forward`` is inside a :func:`checkpoint_modules` block: an instance attribute bound to the
    module (``types.MethodType``), so ``copy.deepcopy`` binds the copy's to the copy, which then runs its own class
    ``forward`` plainly. Only the module the block patched, while the block runs, is checkpointed."""
    block: _Checkpointing | None = _PATCHED.get(self)
    if block is None:  # a copy of a patched module, or the block has ended
        return type(self).forward(self, *args, **kwargs)
    return block.run(self, args, kwargs)


_checkpointed_forward.__name__ = "forward"  # pickled as getattr(module, "forward"): the loaded copy runs plainly

# the modules patched by a running block -> that block (weak keys: a patch never keeps a model alive)
_PATCHED: weakref.WeakKeyDictionary[nn.Module, _Checkpointing] = weakref.WeakKeyDictionary()


class _Checkpointing:
    """The ``with`` block of :func:`checkpoint_modules` (and :func:`selective_checkpoint_modules`): patches the
    modules' ``forward`` on entry, restores them on exit; one block per object."""

    def __init__(self, found: dict[str, nn.Module], tool: str, *, use_reentrant: bool, **checkpoint_kwargs: Any) -> None:
        self._found = dict(found)  # let go of when the block ends
        self._names = {id(m): n for n, m in found.items()}
        self._tool = tool
        self._use_reentrant, self._checkpoint_kwargs = use_reentrant, checkpoint_kwargs
        self._state = "new"

    def __enter__(self) -> list[nn.Module]:
        if self._state != "new":
            raise RuntimeError(f"this {self._tool} block has already run; call {self._tool}(...) again for another "
                               "block")
        self._state = "running"
        patched: list[nn.Module] = []
        try:
            for name, module in self._found.items():
                if "forward" in module.__dict__:
                    raise RuntimeError(f"module {name!r} already has a patched forward ({self._tool} entered again "
                                       "around the same module, or another tool replaced its forward)")
                module.forward = types.MethodType(_checkpointed_forward, module)
                _PATCHED[module] = self
                patched.append(module)
        except BaseException:
            self._restore(patched)
            raise
        return list(self._found.values())

    def __exit__(self, *exc_info: object) -> None:
        self._restore(list(self._found.values()))

    def _restore(self, modules: list[nn.Module]) -> None:
        self._state = "done"
        for module in modules:
            if _PATCHED.get(module) is self:
                del _PATCHED[module]
                del module.forward
        self._found = {}

    def run(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = self._names.get(id(module), type(module).__name__)
        _refuse_cache(name, args, kwargs)
        if self._use_reentrant and torch.is_grad_enabled() and not any(
                isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))):
            raise RuntimeError(
                f"checkpoint_modules: {name!r} gets no input that requires grad, and with use_reentrant=True "
                "its parameters would then get no gradient (PyTorch only warns). Use the default "
                "use_reentrant=False, which handles this.")
        # copy lists / dicts / tuples now: the recompute in backward must see the arguments as
        # they are at this call, not as the caller changed them later (DenseNet appends to the
        # list it passed to each layer); the tensors themselves are not copied
        args, kwargs = _copy_containers((args, kwargs))
        forward = type(module).forward.__get__(module)
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=self._use_reentrant,
                                                 **self._checkpoint_kwargs, **kwargs)


Policy = Callable[..., "CheckpointPolicy | bool"]
_OPS = ATEN_OP_TYPES or (object,)


def _sac_api() -> tuple[Any, Any]:
    """``CheckpointPolicy`` and ``create_selective_checkpoint_contexts`` (public since torch 2.4)."""
    try:
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    except ImportError:
        raise RuntimeError(f"selective checkpointing needs torch >= 2.4 (torch.utils.checkpoint.CheckpointPolicy); "
                           f"this is torch {torch.__version__}. hooklab's other tools work on it.") from None
    return CheckpointPolicy, create_selective_checkpoint_contexts


def _policy_from_ops(ops: Iterable[Any]) -> Policy:
    ops = list(ops)
    for op in ops:
        if not isinstance(op, _OPS):
            raise TypeError(f"policy lists ATen ops such as torch.ops.aten.mm or torch.ops.aten.mm.default, "
                            f"got {op!r} ({type(op).__name__})")
    saved = frozenset(ops)
    Policies, _ = _sac_api()

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        # an op arrives as an overload (aten.mm.default): match it and its packet (aten.mm)
        if op in saved or getattr(op, "overloadpacket", None) in saved:
            return Policies.MUST_SAVE
        return Policies.PREFER_RECOMPUTE

    return policy


def _checked_policy(fn: Policy) -> Policy:
    Policies, _ = _sac_api()

    @functools.wraps(fn)
    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy | bool:
        decision = fn(ctx, op, *args, **kwargs)
        if not isinstance(decision, (Policies, bool)):
            raise TypeError(f"the policy returned {decision!r} for {op}; it must return a "
                            "torch.utils.checkpoint.CheckpointPolicy (e.g. MUST_SAVE or PREFER_RECOMPUTE)")
        return decision

    return policy


def _as_policy(policy: Any) -> Policy:
    if isinstance(policy, _OPS):
        raise TypeError(f"policy got the single op {policy}; pass a list of ops ([{policy}]) or a policy "
                        "function (ctx, op, *args, **kwargs) -> CheckpointPolicy")
    if callable(policy):
        return _checked_policy(policy)
    if isinstance(policy, (str, bytes)) or not isinstance(policy, Iterable):
        raise TypeError("policy must be a function (ctx, op, *args, **kwargs) -> CheckpointPolicy or a list "
                        f"of ATen ops to save, got {type(policy).__name__}")
    return _policy_from_ops(policy)


def selective_checkpoint_modules(model: nn.Module, names: str | Iterable[str], *, policy: Any,
                                 **checkpoint_kwargs: Any) -> AbstractContextManager[list[nn.Module]]:
    """Inside the block, every call of the named submodules runs under selective activation checkpointing.

    ``policy`` decides op by op what the region keeps for backward: a function
    ``(ctx, op, *args, **kwargs) -> CheckpointPolicy`` as for
    ``torch.utils.checkpoint.create_selective_checkpoint_contexts``, or a list of ATen ops whose
    outputs are kept (``MUST_SAVE``; an op packet such as ``torch.ops.aten.mm`` matches all its
    overloads), everything else being recomputed (``PREFER_RECOMPUTE``). A policy that returns
    anything but a ``CheckpointPolicy`` (or a bool) raises a ``TypeError`` naming the op.

    Same lifecycle as :func:`hooklab.checkpoint_modules` (it is built on it): the named modules'
    ``forward`` is wrapped in ``checkpoint(..., use_reentrant=False, context_fn=...)`` (SAC needs
    the non-reentrant variant) and restored on exit, also after an exception; unknown names raise
    an error listing the names that exist; the block yields the modules. Other keyword arguments
    go to ``checkpoint`` (``respect_saved_tensors_hooks``, ``preserve_rng_state``, ...).

    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8)), nn.Tanh())
    >>> with selective_checkpoint_modules(model, ["0"], policy=[torch.ops.aten.addmm]):
    ...     loss = model(torch.randn(4, 8)).sum()
    >>> from hooklab import OpCounter
    >>> with OpCounter() as ran:
    ...     loss.backward()
    >>> ran.counts["gelu"], ran.counts["addmm"]      # GELU recomputed, the Linear outputs were kept
    (1, 0)
    """
    for key in ("context_fn", "use_reentrant"):
        if key in checkpoint_kwargs:
            raise TypeError(f"selective_checkpoint_modules sets {key} itself (selective checkpointing needs "
                            "use_reentrant=False and a context_fn made from the policy); use "
                            "hooklab.checkpoint_modules for full checkpointing with your own options")
    _, create_selective_checkpoint_contexts = _sac_api()
    policy_fn = _as_policy(policy)
    context_fn = functools.partial(create_selective_checkpoint_contexts, policy_fn)
    block = checkpoint_modules(model, names, use_reentrant=False, context_fn=context_fn, **checkpoint_kwargs)
    assert isinstance(block, _Checkpointing)
    block._tool = "selective_checkpoint_modules"
    return block
