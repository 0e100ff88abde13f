"""Watch training through hooks: gradient norms per parameter / layer.

    with GradientMonitor(model) as gm:
        for x, y in batches:
            opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    gm.plot()                       # one line per layer: gradient norm over steps

It records small tensors inside the hooks (no ``.item()``, so no device sync per step), stacks them into one tensor
every 64 records (a few bytes per value), and converts them only when asked. It is a recorder
(:class:`~hooklab.scope.Recorder`): it registers when the ``with`` block is entered and removes its hooks when it ends.
Activation statistics per layer: :mod:`hooklab.activations`.
"""
from __future__ import annotations

import math
import operator
import sys
import warnings
import weakref
from collections.abc import Iterable
from typing import Any, Literal, get_args

import torch
from torch import nn

from . import plot
from ._checks import (
    check_norm_type,
    in_process_group,
    is_dtensor,
    loss_scale_reader,
    module as check_module,
)
from ._series import _Series
from ._text import format_table
from ._torch_internals import active_ddp, current_graph_task_id, need, queue_backward_callback
from .lookup import as_names, get_modules
from .scope import Recorder

__all__ = ["GradientMonitor"]


Per = Literal["layer", "parameter"]


def _owner(param_name: str) -> str:
    """'layer1.0.conv1.weight' -> 'layer1.0.conv1' (the module that owns the parameter)."""
    return param_name.rpartition(".")[0] or "(model)"


class GradientMonitor(Recorder):
    """Record the norm of every parameter's gradient at each backward (or optimizer step), through hooks.

    A ``Tensor.register_post_accumulate_grad_hook`` on each parameter notes that its gradient
    arrived; when the backward pass ends (an autograd end-of-backward callback, queued after
    those of DDP and FSDP2), the monitor records the norm of each such ``.grad``: what the
    optimizer will see (with gradient accumulation over several backwards, the running sum).

    Records are keyed by step: step ``i`` is the ``i``-th backward that reached the parameters
    (a backward inside a reentrant checkpoint counts with the one around it). A parameter that got
    no gradient in a step (an unused branch, a frozen part) has ``nan`` there, and a backward that
    raised before it ended records nothing.

    * ``optimizer=opt``: a step is a call of ``opt.step()`` instead, and the norms are read in a
      step pre-hook: the gradients the optimizer is about to use, once per logical batch under
      gradient accumulation (the micro-batches' backwards are not steps), and the same on every
      rank under DDP, ``no_sync()`` or not. Only the watched parameters the optimizer holds are
      recorded (those it holds when the monitor is made are the columns; at each step, those it
      holds then): a parameter it does not step (another optimizer's, or one left out of its
      groups) is no column. No parameter hook is registered. Under a
      ``GradScaler`` the records are true norms without ``scaler=``: ``scaler.step(opt)`` has
      unscaled the gradients by then, or, for a fused optimizer (``fused=True``), which unscales
      inside ``step()``, the monitor divides by the scale the scaler handed it
      (``opt.grad_scale``). A step the scaler skips is not recorded for an optimizer whose
      ``step()`` it then leaves out, and is recorded (with its inf / nan norms) for a fused one,
      which is called anyway and skips the update itself. A step given a closure (``opt.step(closure)``,
      as Lightning's automatic optimization and ``LBFGS`` call it) runs the last backward inside
      ``step()``, after the step pre-hooks: its norms are read in a step post-hook instead, once the
      closure has run (for ``LBFGS``, the gradients of its last evaluation).
    * ``every=N``: record one step in ``N`` (steps ``0, N, 2N, ...``); on the others the hooks only
      count (with ``optimizer=``, one call per step and nothing else).
    * ``start_step=S``: the number of the block's first step, for a run resumed from a checkpoint: the
      step numbers go on from ``S`` (``step_numbers``, ``plot()``) and ``every=N`` keeps recording the
      steps whose number is a multiple of ``N``, as the run without the interruption did. Pass the number
      of steps done before (e.g. ``int(opt.state_dict()["state"][0]["step"])`` for ``Adam``, which counts them).
    * The optimizer in backward (post-accumulate hooks that call ``step()`` and free ``.grad``):
      the norm of a parameter stepped by a ``torch.optim`` optimizer inside backward is read when
      that optimizer steps (a global optimizer step pre-hook, while the block runs). A gradient
      freed inside backward by anything else cannot be seen, and the backward raises a
      ``RuntimeError`` saying so, instead of recording nothing.

    In a process group:

    * DDP: the norms are those of the averaged gradients (DDP averages inside backward, before
      the monitor records), the same on every rank; a parameter this rank left out but another
      rank used has the averaged gradient there too, and it is recorded. Give the monitor the
      inner model (``ddp.module``). A backward whose forward ran under ``ddp.no_sync()`` is not
      a step: DDP does not average it, so its gradients are this rank's own partial sums; the
      backward that synchronises records the averaged sum of the accumulated micro-batches.
      (``no_sync()`` must hold the forward too: around the backward alone DDP still averages, and
      that backward is a step.)
    * FSDP2 (``fully_shard``): each rank keeps the norm of its shard; :meth:`norms`, :meth:`table`
      and :meth:`plot` combine them into the norm of the whole gradient with one collective, so
      every rank must call them (as every other collective).
    * Gradients averaged by your own code after ``backward()`` returns are not seen averaged.

    Args:
        model: the model to watch.
        names: the modules whose parameters to watch, one name or several (default: every
            parameter that requires a gradient). Unknown names raise, listing the names that exist.
        norm_type: the vector norm (2 = Euclidean).
        scaler: under mixed precision, the ``torch.amp.GradScaler`` the loss is scaled with: the
            hooks run on scaled gradients, and the recorded norms are divided by its scale (the
            norms of the true gradients). In a step whose gradients overflowed (the scaler skips
            that step) the recorded norm is inf or nan. Not with ``optimizer=`` (not needed there).
        optimizer: record at each ``optimizer.step()`` instead of at each backward (see above).
        every: record one step in ``every``.
        start_step: the number of the first step (default 0; see above).

    Sparse gradients (``nn.Embedding(sparse=True)``) are measured on their stored values.
    ``model.load_state_dict(..., assign=True)`` inside the block swaps in new parameters: the
    monitor follows them (with ``optimizer=``, once the optimizer holds them too: re-point its
    ``param_groups`` at them, or the block's end warns that their steps were not recorded).

    >>> model, x = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1)), torch.ones(8, 4)
    >>> _ = nn.init.constant_(model[0].weight, 0.5), nn.init.zeros_(model[0].bias)
    >>> _ = nn.init.constant_(model[2].weight, 1.0), nn.init.zeros_(model[2].bias)
    >>> with GradientMonitor(model) as gm:
    ...     model(x).sum().backward()
    >>> gm.norms()                       # per layer, one norm per step (compared with a tolerance: FLOAT_CMP)
    {'0': [30.98387], '2': [28.84441]}
    >>> gm.steps, sorted(gm.norms(per="parameter"))
    (1, ['0.bias', '0.weight', '2.bias', '2.weight'])

    Once per logical batch under accumulation (2 micro-batches per optimizer step), every other step:

    >>> opt = torch.optim.SGD(model.parameters(), lr=0.0)
    >>> opt.zero_grad()
    >>> with GradientMonitor(model, optimizer=opt, every=2) as gm:
    ...     for step in range(4):
    ...         for micro_batch in range(2):
    ...             model(x).sum().backward()
    ...         opt.step()
    ...         opt.zero_grad()
    >>> gm.steps, gm.step_numbers, gm.norms()["2"]   # steps 0 and 2: the sum of two micro-batches' gradients
    (2, [0, 2], [57.68882, 57.68882])
    """

    _model_refs = ("_model", "_params")

    def __init__(self, model: nn.Module, names: str | Iterable[str] | None = None, *,
                 norm_type: float = 2.0, scaler: object | None = None,
                 optimizer: torch.optim.Optimizer | None = None, every: int = 1, start_step: int = 0) -> None:
        super().__init__()
        check_module(model, "GradientMonitor")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer (the one whose step() uses these gradients), "
                            f"got {type(optimizer).__name__}")
        if optimizer is not None and scaler is not None:
            raise ValueError("give scaler= or optimizer=, not both: with optimizer= the monitor reads the gradients "
                             "when the optimizer steps, and scaler.step(optimizer) has unscaled them by then (a fused "
                             "optimizer gets the scale from the scaler, and the monitor divides by it)")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1 (record one step in `every`), got {every!r}")
        start_step = _step_number(start_step)
        self.every = every
        self._optimizer = optimizer
        self._loss_scale = loss_scale_reader(scaler)
        self.norm_type = check_norm_type(norm_type)
        if names is None:
            params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        else:
            params = []
            for layer, module in get_modules(model, as_names(names)).items():
                prefix = f"{layer}." if layer else ""
                params += [(prefix + n, p) for n, p in module.named_parameters() if p.requires_grad]
            params = list(dict((n, p) for n, p in params).items())
        if not params:
            raise ValueError("no parameter that requires a gradient to watch; "
                             "check `names` and `requires_grad`")
        if optimizer is not None:  # the gradients this optimizer uses: those of the parameters it holds
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            params = [(n, p) for n, p in params if id(p) in held]
            if not params:
                raise ValueError("optimizer= holds none of the parameters watched (the model's, or those of "
                                 "`names`): give the optimizer that steps this model, or no optimizer= to record "
                                 "at each backward")
        self._model: nn.Module | None = model
        self._names = [n for n, _ in params]
        self._params: list[torch.Tensor] = [p for _, p in params]  # dropped when the block ends
        self._shard_groups: dict[int, tuple] = {}  # parameter index -> process groups its gradient is sharded over
        self._rows = _Series()  # one row per finished step: a norm per parameter, nan where none arrived
        self._last: dict[int, torch.Tensor] | None = None  # the newest step's norms, not yet a row
        self._backwards: dict[int, set[int]] = {}  # graph task id -> the parameters whose gradient arrived in it
        self._alive: list[Any] = []  # weak references to the pending end-of-backward callbacks, per task
        self._max_task = -1
        self._whole_model = False
        self._index: dict[int, int] = {}  # id(parameter) -> its index (optimizers stepping inside backward)
        self._stepped: set[int] = set()  # parameters an optimizer stepped inside this step's backward: recorded then
        self._counted = start_step  # the number of steps so far, recorded or not (every=), resumed runs' included
        self._closure_step = False  # optimizer=: this step runs a closure (its backward), read after the step
        self._skip = False  # this step is not recorded (every=, or a backward DDP does not average)
        self._unsynced = False  # the model's latest forward ran under DDP's no_sync()
        self._numbers: list[int] = []  # the step number of each record

    # ------------------------------------------------------------------------------ recording
    def _register(self) -> None:
        assert self._model is not None  # dropped only when the block ends
        self._read_parameters_again()
        if self._optimizer is not None:
            self.scope.add(self._optimizer.register_step_pre_hook(self._at_optimizer_step))
            self.scope.add(self._optimizer.register_step_post_hook(self._after_closure_step))
            self._on(self._model, self._follow_new_parameters, kind="load_state_dict_post")
            return
        # in DDP a parameter this rank did not use still gets the averaged gradient of the ranks that did
        self._whole_model = in_process_group() and not any(is_dtensor(p) for p in self._params)
        if self._whole_model:
            active_ddp(self._model)  # raises now, not in forward, when this torch cannot tell no_sync() apart
            self._on(self._model, self._note_sync, kind="forward_pre")
        self._index = {id(p): i for i, p in enumerate(self._params)}
        for index, param in enumerate(self._params):
            self.scope.add(param.register_post_accumulate_grad_hook(self._hook(index)))
        from torch.optim.optimizer import register_optimizer_step_pre_hook
        self.scope.add(register_optimizer_step_pre_hook(self._optimizer_stepping))
        self._on(self._model, self._follow_new_parameters, kind="load_state_dict_post")

    def _hook(self, index: int):
        def note_gradient_arrived(param: torch.Tensor) -> None:
            self._backward().add(index)
        return note_gradient_arrived

    def _note_sync(self, module: nn.Module, args: Any) -> None:
        """A forward pre-hook: will DDP average the backward of this forward? (not under ``no_sync()``)"""
        ddp = active_ddp(module)
        self._unsynced = ddp is not None and not ddp.require_backward_grad_sync

    def _optimizer_stepping(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """A global optimizer step pre-hook: an optimizer stepping inside backward (the optimizer-in-backward
        pattern) is about to use, and then usually free, the gradients: record their norms now."""
        if current_graph_task_id() in (None, -1):
            return  # a step after backward: the end of that backward recorded what it uses
        self._backward()
        if self._skip or self._last is None or not self._params:
            return
        for group in optimizer.param_groups:
            for param in group["params"]:
                index = self._index.get(id(param))
                if index is not None and param.grad is not None:
                    self._last[index] = self._norm(index, param.grad, self._loss_scale())
                    self._stepped.add(index)

    def _at_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """With ``optimizer=``: a step pre-hook recording the gradients the optimizer is about to use; a step given a
        closure computes them inside ``step()``, so that one is recorded by the step post-hook."""
        self._closure_step = (args[1] if len(args) > 1 else kwargs.get("closure")) is not None  # args[0]: the optimizer
        if not self._closure_step:
            self._record_optimizer_step(optimizer)

    def _after_closure_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """With ``optimizer=``: a step post-hook; records a step whose closure ran its backward inside ``step()``."""
        if self._closure_step:
            self._closure_step = False
            self._record_optimizer_step(optimizer)

    def _record_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self._counted += 1
        if (self._counted - 1) % self.every or not self._params:
            return
        # GradScaler hands a fused optimizer the scale to unscale by inside step(); the others it unscaled already
        scale = getattr(optimizer, "grad_scale", None)
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}  # what this step updates
        norms = {index: self._norm(index, p.grad, 1.0 if scale is None else scale)
                 for index, p in enumerate(self._params) if p.grad is not None and id(p) in held}
        row = self._row(norms)
        if row is not None:
            self._rows.append(row)
            self._numbers.append(self._counted - 1)

    def _running(self) -> bool:
        """Whether a backward this monitor saw has not ended yet (its callbacks still exist)."""
        self._alive = [(task, ref) for task, ref in self._alive if ref() is not None]
        alive = {task for task, _ in self._alive}  # a backward that raised: autograd dropped its callbacks
        self._backwards = {task: seen for task, seen in self._backwards.items() if task in alive}
        return bool(alive)

    def _backward(self) -> set[int]:
        task = current_graph_task_id()
        if task is None:
            raise need("torch._C._current_graph_task_id")
        if task in self._backwards:
            return self._backwards[task]
        # a new graph task: a new step, unless it runs inside a backward still going on (a reentrant
        # checkpoint's backward), or started before the newest one (the backward around that one)
        nested = self._running() or task < self._max_task
        if not nested:
            self._seal()
            self._last, self._stepped = {}, set()
            # under DDP's no_sync() a backward is not averaged: not a step (the synchronising one is)
            if not self._unsynced:
                self._counted += 1
            self._skip = self._unsynced or (self._counted - 1) % self.every != 0
        elif self._last is None:
            self._last = {}
        self._max_task = max(self._max_task, task)
        seen = self._backwards[task] = set()

        def record() -> None:  # queued by `after_others`: runs after every callback queued before it
            self._alive = [(t, ref) for t, ref in self._alive if t != task]  # this backward has ended
            self._backwards.pop(task, None)
            self._record(seen)

        def after_others() -> None:
            queue_backward_callback(record)

        queue_backward_callback(after_others)
        self._alive.append((task, weakref.ref(record)))  # alive while autograd holds the callback
        return seen

    def _record(self, seen: set[int]) -> None:
        arrived = set(seen)
        seen.clear()
        if self._last is None or self._skip or not self._params:
            return
        if self._whole_model:  # after DDP's averaging: every .grad that is set is what the optimizer sees
            arrived |= {i for i, p in enumerate(self._params) if p.grad is not None}
        freed = []
        for index in sorted(arrived - self._stepped):  # those an optimizer stepped inside backward were recorded then
            grad = self._params[index].grad
            if grad is None:
                freed.append(self._names[index])
                continue
            self._last[index] = self._norm(index, grad, self._loss_scale())
        if freed:
            raise RuntimeError(
                f"GradientMonitor: the gradients of {', '.join(map(repr, freed[:5]))}"
                f"{' and others' if len(freed) > 5 else ''} arrived in this backward but were freed (.grad is None) "
                "before it ended, and no torch.optim optimizer stepped them inside backward, so the monitor cannot "
                "see them. A hook that steps by hand and frees .grad (the optimizer-in-backward pattern)? Step with "
                "a torch.optim optimizer there (its step is seen), or record the norm in that hook yourself.")

    def _norm(self, index: int, grad: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
        grad = grad.detach()
        if is_dtensor(grad):
            self._shard_groups.setdefault(index, _shard_groups(grad, self._names[index]))
            grad = grad.to_local()  # type: ignore[attr-defined]  # a DTensor: is_dtensor checked it by its attributes
        if grad.is_sparse:  # the norm of a sparse gradient is that of its (summed) stored values
            grad = grad.coalesce().values()
        return torch.linalg.vector_norm(grad, self.norm_type) / scale

    def _seal(self) -> None:
        """Turn the newest step into a row of the history."""
        if self._last is not None:
            row = self._row(self._last)
            if row is not None:
                self._rows.append(row)
                self._numbers.append(self._counted - 1)
            self._last = None

    def _row(self, norms: dict[int, torch.Tensor]) -> torch.Tensor | None:
        if not norms:
            return None
        device = next(iter(norms.values())).device
        nan = torch.full((), float("nan"), device=device)
        return torch.stack([norms[i].to(device) if i in norms else nan for i in range(len(self._names))])

    def _read_parameters_again(self) -> None:
        """On entering the block: the model's parameters as they are now. Between the monitor's construction and the
        block, ``load_state_dict(assign=True)`` (or an assignment) may have put other Parameter objects in the
        model: the hooks go on those, the ones whose gradients will arrive."""
        assert self._model is not None
        for index, name in enumerate(self._names):
            try:
                now = self._model.get_parameter(name)
            except AttributeError:
                continue
            if now is not self._params[index] and now.requires_grad:
                self._params[index] = now

    def _follow_new_parameters(self, module: nn.Module, incompatible_keys: Any) -> None:
        """``load_state_dict(assign=True)`` put new Parameter objects in the model: watch those."""
        for index, name in enumerate(self._names):
            try:
                now = module.get_parameter(name)
            except AttributeError:
                continue
            if now is not self._params[index] and now.requires_grad:
                self._index.pop(id(self._params[index]), None)
                self._params[index], self._index[id(now)] = now, index
                if self._optimizer is None:  # with optimizer=, read at its step: no parameter hook
                    self.scope.add(now.register_post_accumulate_grad_hook(self._hook(index)))

    def _unregister(self) -> None:
        self.scope.remove()
        model = self._model
        assert model is not None  # set when made, dropped by _release after this
        replaced = []
        for name, param in zip(self._names, self._params):
            try:
                if model.get_parameter(name) is not param:
                    replaced.append(name)
            except AttributeError:
                replaced.append(name)
        if replaced and not self._block_raised:
            warnings.warn(f"GradientMonitor: {', '.join(map(repr, replaced[:5]))}"
                          f"{' and others' if len(replaced) > 5 else ''} were replaced by other Parameter objects "
                          "inside the block (e.g. `model.fc.weight = nn.Parameter(...)`): gradients of the new ones "
                          "were not recorded. Replace parameters before entering the block; "
                          "load_state_dict(..., assign=True) is followed.", RuntimeWarning, stacklevel=4)
        if self._optimizer is not None and not self._block_raised:
            held = {id(p) for group in self._optimizer.param_groups for p in group["params"]}
            dropped = [name for name, param in zip(self._names, self._params)
                       if name not in replaced and id(param) not in held]
            if dropped:
                warnings.warn(f"GradientMonitor: {', '.join(map(repr, dropped[:5]))}"
                              f"{' and others' if len(dropped) > 5 else ''} are in the model but not in the optimizer "
                              "at the end of the block (load_state_dict(..., assign=True) put new Parameter objects "
                              "in the model, and the optimizer still holds the old ones): their gradients are not "
                              "what it steps, and were not recorded from then on. Re-point the optimizer at the new "
                              "parameters (opt.param_groups[i]['params']), or load with assign=False.",
                              RuntimeWarning, stacklevel=4)

    # ------------------------------------------------------------------------------ results
    def _matrix(self) -> torch.Tensor | None:
        """Every step's norms, ``[steps, parameters]``, the norms of sharded gradients combined."""
        extra = [row] if self._last is not None and (row := self._row(self._last)) is not None else []
        matrix = self._rows.stacked(extra)
        if matrix is None or not self._shard_groups:
            return matrix
        matrix = matrix.clone()
        p, inf = self.norm_type, self.norm_type == float("inf")
        by_groups: dict[tuple, list[int]] = {}
        for index, groups in sorted(self._shard_groups.items()):
            by_groups.setdefault(groups, []).append(index)
        import torch.distributed as dist
        for groups, columns in by_groups.items():
            part = matrix[:, columns] if inf else matrix[:, columns] ** p
            for group in groups:
                dist.all_reduce(part, op=dist.ReduceOp.MAX if inf else dist.ReduceOp.SUM, group=group)
            matrix[:, columns] = part if inf else part ** (1 / p)
        return matrix

    @property
    def steps(self) -> int:
        """How many steps (backward passes, or optimizer steps with ``optimizer=``) were recorded."""
        self._check_used()
        return len(self._rows) + (self._last is not None and bool(self._last))

    @property
    def step_numbers(self) -> list[int]:
        """The number of each recorded step, counted from ``start_step`` (0 by default: ``[0, N, 2N, ...]`` with
        ``every=N``)."""
        self._check_used()
        pending = [self._counted - 1] if self._last is not None and self._last else []
        return self._numbers + pending

    @property
    def history(self) -> dict[str, list[float]]:
        """The norms per parameter and step, as floats (``nan``: no gradient in that step)."""
        return self.norms(per="parameter")

    def norms(self, per: Per = "layer") -> dict[str, list[float]]:
        """Norms per step, as floats: ``per="parameter"`` (one per tensor) or ``"layer"``.

        Value ``i`` is the ``i``-th recorded step (step number ``step_numbers[i]``: a backward pass, or an
        optimizer step with ``optimizer=``). A parameter that got no gradient in a step has
        ``nan`` there; a layer's norm combines the norms of its parameters that got one (for the
        2-norm: ``sqrt(|dW|^2 + |db|^2)``, as ``clip_grad_norm_`` combines the ``.grad`` that are
        set), ``nan`` when none did. Under FSDP2 this is a collective: call it on every rank.
        """
        self._check_used()
        if per not in get_args(Per):
            raise ValueError(f"per must be {' or '.join(map(repr, get_args(Per)))}, got {per!r}")
        matrix = self._matrix()
        columns = matrix.T.tolist() if matrix is not None else [[] for _ in self._names]
        as_float = dict(zip(self._names, columns))
        if per == "parameter":
            return as_float
        layers: dict[str, list[list[float]]] = {}
        for name, values in as_float.items():
            layers.setdefault(_owner(name), []).append(values)
        return {layer: [_combine([s[i] for s in series], self.norm_type) for i in range(len(series[0]))]
                for layer, series in layers.items()}

    def table(self, per: Per = "layer") -> str:
        """The latest norm and the range over steps, one row per layer (or parameter), as text.

        ``steps`` counts the steps in which the row got a gradient.

        >>> layer = nn.Linear(2, 1)
        >>> with GradientMonitor(layer) as gm:
        ...     layer(torch.ones(3, 2)).sum().backward()
        >>> print(gm)
        layer    steps   last    min    max
        (model)      1  5.196  5.196  5.196
        """
        rows = []
        for name, values in self.norms(per).items():
            v = [x for x in values if not math.isnan(x)]
            if v:
                rows.append((name, str(len(v)), f"{v[-1]:.4g}", f"{min(v):.4g}", f"{max(v):.4g}"))
        return format_table(("layer" if per == "layer" else "parameter", "steps", "last", "min", "max"), rows,
                            right=range(1, 5))

    def __str__(self) -> str:
        return self.table()

    def plot(self, per: Per = "layer", *, ax: Any = None, logy: bool = True, title: str | None = None) -> Any:
        """Plot the norms over steps (:func:`hooklab.plot.norms`); return the axes."""
        xlabel = "optimizer step" if self._optimizer is not None else "step (backward pass)"
        return plot.norms(self.norms(per), steps=[n + 1 for n in self.step_numbers], xlabel=xlabel, ax=ax, logy=logy,
                          title=title, per=per, norm_type=self.norm_type)

    def __repr__(self) -> str:
        steps = len(self._rows) + (self._last is not None and bool(self._last))
        return f"GradientMonitor({len(self._names)} parameters, {steps} steps, hooks={len(self.scope)})"


def _step_number(start_step: Any) -> int:
    """``start_step`` as an int >= 0: an int or an integer of another kind (``numpy.int64``: ``operator.index``),
    never a bool."""
    try:
        if isinstance(start_step, (bool, _numpy_bool())):
            raise TypeError
        number = operator.index(start_step)
    except TypeError:
        number = -1
    if number < 0:
        raise ValueError(f"start_step must be an int >= 0 (the number of the block's first step: the steps a "
                         f"resumed run did before), got {start_step!r}")
    return number


def _numpy_bool() -> tuple[type, ...]:
    """numpy's bool type, if numpy is loaded (``operator.index`` refuses it in numpy 2, accepts it in numpy 1)."""
    numpy = sys.modules.get("numpy")
    return (numpy.bool_,) if numpy is not None else ()


def _combine(values: list[float], p: float) -> float:
    """The p-norm of several tensors from their p-norms, leaving out those that are nan (no gradient)."""
    present = [v for v in values if not math.isnan(v)]
    if not present:
        return float("nan")
    if p == float("inf"):
        return max(present)
    return sum(v ** p for v in present) ** (1 / p)


def _shard_groups(grad: Any, name: str) -> tuple:
    """The process groups over which a DTensor gradient is split (its mesh dimensions with a Shard placement)."""
    groups = []
    for dim, placement in enumerate(grad.placements):
        if placement.is_shard():
            groups.append(grad.device_mesh.get_group(dim))
        elif not placement.is_replicate():
            raise RuntimeError(f"GradientMonitor: the gradient of {name!r} is a DTensor with placement "
                               f"{placement} (a partial sum): its norm cannot be read from one shard. Record "
                               "norms after the gradients are reduced, e.g. torch.nn.utils.get_total_norm "
                               "after backward().")
    return tuple(groups)


