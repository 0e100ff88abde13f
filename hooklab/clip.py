"""Gradient clipping through parameter hooks, returning a :class:`~hooklab.HookScope` to remove them.

    scope = clip_grad_value_hooks(model, 0.1)        # every backward now clips
    ...
    scope.remove()                                   # or: with clip_grad_value_hooks(...):

Two moments to clip at (``stage``):

* ``"incoming"`` (default) -- ``Tensor.register_hook``: once per backward, the hook sees
  the gradient this backward computed (a weight used twice in the forward: the sum of
  both uses) *before* it is added into ``.grad``. With gradient accumulation (several
  backwards before ``optimizer.step()``) each backward is clipped on its own, so ``.grad``
  can reach ``k * value`` after ``k`` backwards.
* ``"accumulated"`` -- ``Tensor.register_post_accumulate_grad_hook``: the hook clips
  ``.grad`` in place after it was updated. For one backward both stages give exactly what
  ``torch.nn.utils.clip_grad_value_`` gives; with accumulation they do not (that one clips
  the final sum once).

In a process group (DDP) the gradient a hook sees in backward is the rank's own, before DDP
averages it: ``stage="accumulated"`` and the global-norm hooks then clip at the end of backward,
after DDP's averaging (the result equals ``clip_grad_*_`` after ``backward()``), and
``stage="incoming"`` refuses. Gradients you average yourself after ``backward()`` are clipped
before that: clip after it with ``torch.nn.utils.clip_grad_*_``. Under FSDP2 (``fully_shard``,
DTensor parameters) ``stage="incoming"`` refuses (its hooks would never fire); the other
stage and the global-norm hooks run after FSDP2's reduce-scatter, and the global norm is
that of the whole gradient (DTensor combines the shards). When ``params`` is a model,
``load_state_dict(..., assign=True)`` on it or on any of its submodules is followed: the new parameters get the
hooks (a parameter replaced by hand, ``model.fc.weight = nn.Parameter(...)``, is not: replace it before).

The hooks return a new tensor (``grad.clamp(...)``), never ``grad.clamp_(...)``: autograd may
hand the *same* tensor to several branches (``a + b`` gives both the same gradient), so an
in-place change would also clip a gradient the hook does not own.

Norm clipping comes in two kinds:

* :func:`clip_grad_norm_hooks` -- *per parameter*: each tensor hook sees one gradient and
  scales it by its own norm, so the result is not what ``torch.nn.utils.clip_grad_norm_``
  gives (one factor from the norm of all gradients together).
* :func:`clip_grad_norm_global_hooks` -- the *global* norm, inside backward: a
  post-accumulate-grad hook on every parameter counts down, and the hook of the last
  parameter to receive its gradient computes the norm over every ``.grad`` and rescales them
  all. For one backward per step this is ``clip_grad_norm_`` (equal up to float rounding).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from torch import nn

from ._checks import check_norm_type, choice, in_process_group, is_dtensor, loss_scale_reader, number
from ._torch_internals import current_graph_task_id, need, queue_backward_callback
from .scope import HookScope, LocalHook, Removable

__all__ = ["clip_grad_norm_global_hooks", "clip_grad_norm_hooks", "clip_grad_value_hooks"]

Stage = Literal["incoming", "accumulated"]


def _params(params: nn.Module | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    found: list[torch.Tensor]
    if isinstance(params, nn.Module):
        found = list(params.parameters())
    elif isinstance(params, torch.Tensor):
        found = [params]
    else:
        try:
            found = list(params)
        except TypeError:
            raise TypeError(f"expected a model, a tensor or an iterable of parameters, "
                            f"got {type(params).__name__}") from None
        bad = [type(p).__name__ for p in found if not isinstance(p, torch.Tensor)]
        if bad:
            raise TypeError(f"expected parameters (tensors), got a {bad[0]}")
    if not found and not isinstance(params, (nn.Module, torch.Tensor)) and iter(params) is params:  # an iterator, e.g. model.parameters(), already used up
        raise ValueError("got an empty iterator: nothing to clip. A generator such as model.parameters() can be "
                         "read only once; pass the model itself, or list(model.parameters())")
    found = [p for p in found if p.requires_grad]
    if not found:
        raise ValueError("no parameter that requires a gradient: nothing to clip")
    if any(not p.is_leaf for p in found):
        raise ValueError("clip hooks go on leaf tensors (parameters); got a non-leaf tensor "
                         "(the result of an operation): pass model.parameters() instead")
    return found


def _clamped(grad: torch.Tensor, limit: float | torch.Tensor) -> torch.Tensor:
    """``grad.clamp(-limit, limit)`` as a new tensor; a sparse gradient (``nn.Embedding(sparse=True)``)
    is coalesced first (repeated rows summed), then its stored values are clamped."""
    if grad.is_sparse:
        g = grad.coalesce()
        return torch.sparse_coo_tensor(g.indices(), g.values().clamp(-limit, limit), g.shape,  # type: ignore[arg-type]
                                       check_invariants=False, is_coalesced=True)  # built from a coalesced one
    # torch's stubs take the limits as numbers or as tensors, not as the union the loss scale gives
    return grad.clamp(-limit, limit)  # type: ignore[arg-type]


def _norm(grad: torch.Tensor, norm_type: float) -> torch.Tensor:
    """The vector norm of a gradient; a sparse one is measured on its coalesced values."""
    return torch.linalg.vector_norm(grad.coalesce().values() if grad.is_sparse else grad, norm_type)


def _refuse_incoming(found: list[torch.Tensor], tool: str) -> None:
    """``stage="incoming"`` cannot be right for sharded (FSDP2) parameters or inside a process group (DDP)."""
    if any(is_dtensor(p) for p in found):
        raise ValueError(
            f"{tool}(stage='incoming') on DTensor parameters (FSDP2's fully_shard): autograd runs on unsharded "
            "copies, so a hook on the sharded parameter never fires and nothing would be clipped. Use "
            "stage='accumulated' (FSDP2 runs post-accumulate-grad hooks after its reduce-scatter), or "
            "torch.nn.utils.clip_grad_value_ / clip_grad_norm_ after backward().")
    if in_process_group():
        raise ValueError(
            f"{tool}(stage='incoming') inside a process group: the incoming gradient is this rank's own, before "
            "DDP averages the ranks' gradients, so clipping it gives the mean of clipped gradients, not the "
            "clipped mean. Use stage='accumulated' (in a process group it clips .grad at the end of backward, "
            "after DDP's averaging), or torch.nn.utils.clip_grad_value_ / clip_grad_norm_ after backward().")


class _AtEndOfBackward:
    """A post-accumulate-grad hook that collects the parameters whose gradient arrived and calls
    ``fn(params)`` once at the end of that backward, after every end-of-backward callback queued
    before (DDP averages the gradients in one of those)."""

    def __init__(self, fn: Callable[[list[torch.Tensor]], None]) -> None:
        self.fn = fn
        self.task: int | None = None
        self.seen: list[torch.Tensor] = []

    def __call__(self, param: torch.Tensor) -> None:
        task = current_graph_task_id()
        if task is None:
            raise need("torch._C._current_graph_task_id")
        if task != self.task:  # the first hook of a new backward
            self.task, self.seen = task, []
            seen = self.seen

            def run() -> None:
                self.seen = []  # hold no parameter after the backward
                self.fn(seen)

            queue_backward_callback(lambda: queue_backward_callback(run))
        self.seen.append(param)


def _follow(params: object, found: list[torch.Tensor], register: Callable[[torch.Tensor], Removable],
            scope: HookScope, tool: str) -> None:
    """When ``params`` is a model: ``load_state_dict(..., assign=True)``, on the model or on one of its submodules,
    puts new Parameter objects in it; hook those too (and put them in ``found``) so the clipping goes on.

    A load-state-dict post-hook goes on every module that owns a watched parameter (loading into the model runs the
    hooks of each of its submodules; loading into a submodule runs only its own and its children's).
    """
    if not isinstance(params, nn.Module):
        return
    index = {id(p): i for i, p in enumerate(found)}
    for module in params.modules():
        owned = [(name, index[id(p)]) for name, p in module.named_parameters(recurse=False) if id(p) in index]
        if not owned:
            continue

        def follow_new_parameters(mod: nn.Module, incompatible_keys: object,
                                  owned: list[tuple[str, int]] = owned) -> None:
            for name, i in owned:
                now = mod._parameters.get(name)
                if now is not None and now is not found[i] and now.requires_grad:
                    found[i] = now
                    scope.add(register(now))

        # a copy of the model (copy.deepcopy) carries an inert copy of this hook; pickling says what to do
        scope.add(module.register_load_state_dict_post_hook(LocalHook(follow_new_parameters, tool, module)))


def clip_grad_value_hooks(params: nn.Module | Iterable[torch.Tensor], value: float, *,
                          stage: Stage = "incoming", scaler: object | None = None) -> HookScope:
    """Clamp every gradient of ``params`` to ``[-value, value]`` from now on, through hooks.

    Returns a :class:`~hooklab.HookScope` owning the hooks: call ``.remove()`` or use it
    as a context manager. Under mixed precision pass the ``GradScaler`` as ``scaler``: the hooks
    see gradients multiplied by its scale and clamp to ``value * scale``, which after
    ``scaler.unscale_`` is clamping the true gradients to ``value``.

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model, x = nn.Linear(4, 2), torch.randn(8, 4) * 10
    >>> with clip_grad_value_hooks(model, 0.01):
    ...     model(x).sum().backward()
    >>> bool(model.bias.grad.abs().max() <= 0.01)
    True
    """
    value = number(value, "value", positive=True, finite=True)
    choice(stage, Stage, "stage")
    scale_now = loss_scale_reader(scaler)
    found = _params(params)
    scope = HookScope("clip_grad_value")
    register: Callable[[torch.Tensor], Removable]
    if stage == "incoming":
        _refuse_incoming(found, "clip_grad_value_hooks")

        def clip_value(grad: torch.Tensor) -> torch.Tensor:
            return _clamped(grad, value * scale_now())  # a new tensor: never clamp_ here

        def register_incoming(p: torch.Tensor) -> Removable:
            return p.register_hook(clip_value)

        register = register_incoming
    else:
        def clip_value_accumulated(param: torch.Tensor) -> None:
            limit = value * scale_now()
            if param.grad is None:
                return
            if param.grad.is_sparse:
                param.grad = _clamped(param.grad, limit)
            else:
                # .grad belongs to the parameter: in place is fine. torch's stubs take a number or a tensor as
                # the limits, not the union that the loss scale gives (a float, or the scaler's tensor)
                param.grad.clamp_(-limit, limit)  # type: ignore[arg-type]

        register = _accumulated(found, clip_value_accumulated)
    for p in found:
        scope.add(register(p))
    _follow(params, found, register, scope, "clip_grad_value_hooks")
    return scope


def _accumulated(found: list[torch.Tensor],
                 clip_one: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], Removable]:
    """How to register ``clip_one`` for ``stage="accumulated"``: as the post-accumulate-grad hook itself, or,
    for plain parameters inside a process group, at the end of backward (after DDP's averaging)."""
    if in_process_group() and not any(is_dtensor(p) for p in found):
        def clip_each(seen: list[torch.Tensor]) -> None:
            for p in seen:
                clip_one(p)

        at_end = _AtEndOfBackward(clip_each)
        return lambda p: p.register_post_accumulate_grad_hook(at_end)
    return lambda p: p.register_post_accumulate_grad_hook(clip_one)


def clip_grad_norm_hooks(params: nn.Module | Iterable[torch.Tensor], max_norm: float, *,
                         norm_type: float = 2.0, stage: Stage = "incoming",
                         scaler: object | None = None) -> HookScope:
    """Rescale each parameter's gradient so that *its own* norm is at most ``max_norm``.

    Unlike ``torch.nn.utils.clip_grad_norm_`` (one scale factor from the norm of all
    gradients together), each tensor is scaled on its own; the two agree when there is a
    single parameter. Returns a :class:`~hooklab.HookScope` owning the hooks. Under mixed
    precision pass the ``GradScaler`` as ``scaler`` (see :func:`clip_grad_value_hooks`).

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model, x = nn.Linear(4, 2), torch.randn(8, 4) * 10
    >>> scope = clip_grad_norm_hooks(model, 1.0)
    >>> model(x).sum().backward()
    >>> bool(model.weight.grad.norm() <= 1.0 + 1e-6)
    True
    >>> scope.remove()                   # 2 parameter hooks + 1 that follows load_state_dict(assign=True)
    3
    """
    max_norm = number(max_norm, "max_norm", positive=True, finite=True)
    norm_type = check_norm_type(norm_type)
    choice(stage, Stage, "stage")
    scale_now = loss_scale_reader(scaler)
    found = _params(params)

    def scale(grad: torch.Tensor) -> torch.Tensor:
        loss_scale = scale_now()
        norm = _norm(grad, norm_type) / loss_scale  # the norm of the true gradient
        # same formula as clip_grad_norm_: no branch, so no device sync
        return grad * torch.clamp(max_norm / (norm + 1e-6), max=1.0)

    scope = HookScope("clip_grad_norm")
    register: Callable[[torch.Tensor], Removable]
    if stage == "incoming":
        _refuse_incoming(found, "clip_grad_norm_hooks")

        def clip_norm(grad: torch.Tensor) -> torch.Tensor:
            return scale(grad)

        def register_incoming(p: torch.Tensor) -> Removable:
            return p.register_hook(clip_norm)

        register = register_incoming
    else:
        def clip_norm_accumulated(param: torch.Tensor) -> None:
            if param.grad is not None:
                param.grad.copy_(scale(param.grad))

        register = _accumulated(found, clip_norm_accumulated)
    for p in found:
        scope.add(register(p))
    _follow(params, found, register, scope, "clip_grad_norm_hooks")
    return scope


def clip_grad_norm_global_hooks(params: nn.Module | Iterable[torch.Tensor], max_norm: float, *,
                                norm_type: float = 2.0, scaler: object | None = None) -> HookScope:
    """Clip by the *global* gradient norm inside backward, as ``torch.nn.utils.clip_grad_norm_``.

    A post-accumulate-grad hook on every parameter counts down; the hook of the last parameter
    to receive its gradient in a backward takes the norm over every ``.grad`` (the norms of all
    tensors together, ``norm_type`` as in ``clip_grad_norm_``, ``inf`` included) and multiplies
    each ``.grad`` in place by ``min(1, max_norm / (total + 1e-6))``, the factor
    ``clip_grad_norm_`` uses. Returns a :class:`~hooklab.HookScope` owning the hooks.

    * One backward per optimizer step: the result equals ``clip_grad_norm_`` called after
      ``backward()`` (up to float rounding in the norm), and the clipping is already done
      when ``backward()`` returns.
    * A parameter that gets no gradient in a backward (a branch the loss did not use, a
      frozen part) cannot count down, so the countdown would never end. The tool notices
      (the first hook of each backward asks autograd to call it back when that backward
      ends) and then clips at the end of the backward instead. Either way the norm covers
      exactly the parameters whose ``.grad`` is set, the ones ``clip_grad_norm_`` would use;
      a ``.grad`` that is ``None`` stays ``None``.
    * Gradient accumulation (several backwards per step): each backward clips the
      accumulated ``.grad``, which gives ``clip(clip(g1) + g2)``, not ``clip(g1 + g2)``. Enter
      the scope around the *last* micro-batch's backward only: its hooks then see the
      accumulated sum, and the result is ``clip_grad_norm_`` of the sum.
    * ``torch.autograd.grad`` does not write ``.grad`` and does not run these hooks.
    * Mixed precision: pass the ``GradScaler`` as ``scaler``. The hooks then see scaled
      gradients and compute the norm of the true ones (divided by the scale), so after
      ``scaler.unscale_(optimizer)`` the result is ``clip_grad_norm_`` of the true gradients.

    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0) and None
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    >>> x = torch.randn(16, 4) * 10
    >>> with clip_grad_norm_global_hooks(model, 0.5):
    ...     model(x).pow(2).sum().backward()
    >>> total = torch.stack([p.grad.norm() for p in model.parameters()]).norm()
    >>> total                            # max_norm, up to float rounding in the norm
    tensor(0.5000)
    """
    max_norm = number(max_norm, "max_norm", positive=True, finite=True)
    norm_type = check_norm_type(norm_type)
    scale_now = loss_scale_reader(scaler)
    found = _params(params)
    if len({id(p) for p in found}) != len(found):
        raise ValueError("a parameter appears more than once in params: pass each parameter once "
                         "(model.parameters() already removes shared ones)")
    state: dict[str, Any] = {"task": None, "left": 0, "done": False}

    def clip_all() -> None:
        grads = [p.grad for p in found if p.grad is not None]
        state["done"] = True
        if not grads:
            return
        norms = [_norm(g, norm_type) for g in grads]
        total = torch.linalg.vector_norm(torch.stack([n.to(grads[0].device) for n in norms]), norm_type)
        total = total / scale_now()  # the norm of the true gradients under a GradScaler
        factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # no branch: no device sync
        for g in grads:
            g.mul_(factor.to(g.device))

    def at_end_of_backward() -> None:
        if not state["done"]:   # some parameter got no gradient: the countdown never reached 0
            clip_all()

    def count_down(param: torch.Tensor) -> None:
        task = current_graph_task_id()
        if task is None:
            raise need("torch._C._current_graph_task_id")
        if task != state["task"]:  # the first hook of a new backward
            state.update(task=task, left=len(found), done=False)
            queue_backward_callback(at_end_of_backward)
        state["left"] -= 1
        if state["left"] == 0:
            clip_all()

    if in_process_group() and not any(is_dtensor(p) for p in found):
        # DDP averages the gradients at the end of backward: clip after that, once per backward
        hook: Callable[[torch.Tensor], None] = _AtEndOfBackward(lambda seen: clip_all())
    else:
        hook = count_down
    scope = HookScope("clip_grad_norm_global")

    def register(p: torch.Tensor) -> Removable:
        return p.register_post_accumulate_grad_hook(hook)

    for p in found:
        scope.add(register(p))
    _follow(params, found, register, scope, "clip_grad_norm_global_hooks")
    return scope
