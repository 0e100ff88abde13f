"""The rows of the matrix: every hook family of PyTorch, as a small function that registers a recording hook.

A probe runs one tiny model, the same in every cell::

    Net:  x (2, 3) -> subject: Linear(3, 3) after tanh -> head: Linear(3, 1) -> out (2, 1); loss = out.sum()

Each family registers its hook on the *subject* (a module hook on it, a tensor hook on its weight, ...), or from
code inside the subject's forward for the hooks one registers on a tensor made there (``TappedSubject``), or
around the whole run (``saved_tensors_hooks``, the global module hooks, the node-creation hook), or on the
optimizer, or on DDP / FSDP2. Every hook is a :class:`~.record.Recorder`.

Each family also says where it acts (``acts``: forward, backward, state, step, optimizer-state), where it is
registered (``where``), and what its hook returns in the probe's *modify* run (:data:`~.record.MODIFIERS`): a
doubled gradient, a doubled output, or, for the hooks whose API takes no return value, a stray value, to see
whether it is used, ignored or refused. Where what PyTorch does depends on which value is returned, ``also`` names
other values to try (each a :class:`Returned`, recorded as one of the cell's ``shapes``).
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .record import MODIFIERS, Recorder, RecordingParametrization, hook

FORWARD_FAILURE = "probe: the forward raised on purpose"


class Subject(nn.Module):
    """The hooked module: ``Linear(3, 3)`` applied to ``tanh(x)`` (tanh makes a second derivative)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.fail_forward = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail_forward:
            raise RuntimeError("probe: the forward raised on purpose")  # FORWARD_FAILURE (TorchScript: a literal)
        return self.lin(torch.tanh(x))


class TappedSubject(Subject):
    """The subject of the families whose hook is registered by code in forward, on the tensor made there."""

    def __init__(self) -> None:
        super().__init__()
        self.taps: list[Any] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(torch.tanh(x))
        for tap in self.taps:
            tap(x, h)
        return h


class InlineSubject(TappedSubject):
    """The tapped subject registering its one tap's hook straight in forward, outside any loop. The probe's
    :class:`TappedSubject` registers in a ``for`` loop over its taps, and under ``torch.compile`` a graph break
    inside a loop makes Dynamo run the whole frame eagerly, while one outside a loop ends a graph and resumes after
    it: the Node a hook lands on differs (a shape of the ``compile`` column)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(torch.tanh(x))
        if not self.taps:
            return h
        how, recorder = self.taps[0].how, self.taps[0].hook  # one family's tap

        def hook(*args: Any) -> Any:
            return recorder(*args)

        if how == "tensor":
            h.register_hook(hook)
        elif how == "node-pre":
            h.grad_fn.register_prehook(hook)
        elif how == "node":
            h.grad_fn.register_hook(hook)
        else:
            torch.autograd.graph.register_multi_grad_hook((x, h), hook, mode=how)
        return h


class Net(nn.Module):
    """subject -> head. ``variant`` is how the subject's output is used: ``plain``; ``inplace`` (``h.add_(1)``);
    ``view`` (an in-place write through a view of it); ``twice`` (the subject applied twice); ``unused`` (the loss
    does not use it); ``tanh-tail`` (``head(tanh(h))``: a nonlinearity between the subject and the head, so that a
    second backward goes back through the subject's output)."""

    def __init__(self, subject: Subject, variant: str = "plain") -> None:
        super().__init__()
        self.subject = subject
        self.head = nn.Linear(3, 1)
        self.variant = variant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.variant == "twice":
            h = self.subject(self.subject(x))
        else:
            h = self.subject(x)
        if self.variant == "inplace":
            h = h.add_(1.0)
        elif self.variant == "view":
            h.narrow(1, 0, 2).mul_(2.0)
        elif self.variant == "unused":
            return self.head(x)
        elif self.variant == "tanh-tail":
            h = torch.tanh(h)
        return self.head(h)


class Wrapper(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


class SharedNet(nn.Module):
    """The subject held by two parents (``a.inner`` and ``b.inner``, one module); only ``a`` runs."""

    def __init__(self, subject: Subject) -> None:
        super().__init__()
        self.a = Wrapper(subject)
        self.b = Wrapper(subject)
        self.head = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.a(x))


@dataclass
class Rig:
    """What one run of a probe works on: the model, its input, an optimizer, and what to undo afterwards."""

    net: nn.Module
    subject: Subject
    x: torch.Tensor
    opt: torch.optim.Optimizer
    handles: list[Any] = field(default_factory=list)
    stack: ExitStack = field(default_factory=ExitStack)

    @classmethod
    def build(cls, *, tapped: bool = False, variant: str = "plain", shared: bool = False, inline: bool = False,
              seed: int = 0) -> Rig:
        torch.manual_seed(seed)
        subject: Subject = (InlineSubject() if inline else TappedSubject()) if tapped else Subject()
        net: nn.Module = SharedNet(subject) if shared else Net(subject, variant)
        x = torch.randn(2, 3).requires_grad_()
        return cls(net=net, subject=subject, x=x, opt=torch.optim.SGD(net.parameters(), lr=0.1))

    def close(self) -> None:
        for handle in reversed(self.handles):
            handle.remove()
        self.handles.clear()
        self.stack.close()


class Tap:
    """Code in the subject's forward that registers ``hook`` on the tensor ``h`` it made (or on its Node)."""

    def __init__(self, how: str, hook: Recorder) -> None:
        self.how, self.hook = how, hook

    def __call__(self, x: torch.Tensor, h: torch.Tensor) -> None:
        recorder = self.hook

        def hook(*args: Any) -> Any:  # a plain function, as a learner registers one (FX, say, refuses either)
            return recorder(*args)

        # written as a learner writes it: h.grad_fn read only where it is used (under torch.compile reading it
        # breaks the graph), None where nothing requires grad (then the call fails, as the learner's would)
        if self.how == "tensor":
            h.register_hook(hook)
        elif self.how == "node-pre":
            h.grad_fn.register_prehook(hook)  # type: ignore[union-attr]
        elif self.how == "node":
            h.grad_fn.register_hook(hook)  # type: ignore[union-attr]
        else:  # "all" / "any"
            torch.autograd.graph.register_multi_grad_hook((x, h), hook, mode=self.how)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Returned:
    """Another value for a family's hook to return in the modify run, where PyTorch answers differently to it."""

    id: str
    en: str                        # what the hook returns, in English ("a tensor of another size")
    zh: str                        # the same in Chinese
    value: Callable[..., Any]      # the hook's return value, given the call's arguments


@dataclass(frozen=True)
class Family:
    id: str
    group: str
    api: str                       # what the page shows
    acts: frozenset[str]           # where it acts: forward, backward, state, step, optimizer-state
    where: str                     # module, forward-code, scope, optimizer, wrapper
    install: Callable[[Rig, Any], None]
    modify: Callable[..., Any] | None   # its hook's return value in the modify run (None: not tried)
    returns: str                   # what that return value is: "grad x 2", "a stray value", ...
    pattern: str                   # a regular expression that a code cell teaching it matches
    zh: str = ""                   # the family in a few Chinese words
    also: tuple[Returned, ...] = ()  # other return values tried, each recorded as a shape of the cell


def _tap(how: str) -> Callable[[Rig, Any], None]:
    def install(rig: Rig, module: Any) -> None:
        family = {"tensor": "tensor-hook", "node-pre": "node-pre-hook", "node": "node-hook",
                  "all": "multi-grad-hook-all", "any": "multi-grad-hook-any"}[how]
        module.taps.append(Tap(how, Recorder(family, family)))
    return install


def _on_module(method: str, family: str, **options: Any) -> Callable[[Rig, Any], None]:
    def install(rig: Rig, module: Any) -> None:
        rig.handles.append(getattr(module, method)(hook(family, family), **options))
    return install


def _on_weight(method: str, family: str) -> Callable[[Rig, Any], None]:
    def install(rig: Rig, module: Any) -> None:
        rig.handles.append(getattr(module.lin.weight, method)(hook(family, family)))
    return install


def _global(function: str, family: str, **options: Any) -> Callable[[Rig, Any], None]:
    def install(rig: Rig, module: Any) -> None:
        globals_ = torch.nn.modules.module
        handle = getattr(globals_, function)(hook(family, family), **options)
        rig.handles.append(handle)
        if options.get("with_kwargs"):
            # in 2.15 handle.remove() leaves the hook's id in this dict (and torch.compile(module) warns of global
            # hooks from then on, in every later cell): the probe takes it out itself
            rig.stack.callback(globals_._global_forward_hooks_with_kwargs.pop, handle.id, None)
    return install


def _saved(which: str) -> Callable[[Rig, Any], None]:
    def install(rig: Rig, module: Any) -> None:
        family = f"saved-tensors-{which}"
        recorder = Recorder(family, family)
        pack, unpack = (recorder, _identity) if which == "pack" else (_identity, recorder)
        rig.stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, unpack))
    return install


def _identity(t: Any) -> Any:
    return t


def _node_creation(rig: Rig, module: Any) -> None:
    rig.stack.enter_context(torch.autograd.graph.node_creation_hook(Recorder("node-creation-hook",
                                                                             "node-creation-hook")))


def _always_call(rig: Rig, module: Any) -> None:
    module.fail_forward = True
    rig.handles.append(module.register_forward_hook(hook("forward-hook-always-call", "forward-hook-always-call"),
                                                    always_call=True))


def _parametrization(rig: Rig, module: Any) -> None:
    from torch.nn.utils import parametrize

    parametrize.register_parametrization(module.lin, "weight", RecordingParametrization("parametrization"))


def _on_optimizer(method: str, family: str) -> Callable[[Rig, Any], None]:
    def install(rig: Rig, module: Any) -> None:
        rig.handles.append(getattr(rig.opt, method)(hook(family, family)))
    return install


def _comm_hook(rig: Rig, module: Any) -> None:
    """DDP's communication hook; the DDP wrapper itself is made by the distributed runner."""
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(rig.net, DistributedDataParallel):
        raise RuntimeError("the ddp-comm-hook probe needs the model wrapped in DistributedDataParallel")
    rig.net.register_comm_hook(None, comm_hook)


def _fsdp_hook(rig: Rig, module: Any) -> None:
    """FSDP2's all-reduce hook on the subject's parameter group (sharded by the distributed runner: its weight's 3
    rows are split 2 + 1 between the ranks, so each rank holds a shard)."""
    set_hook = getattr(module, "set_all_reduce_hook", None)
    if set_hook is None:
        raise RuntimeError("the fsdp2-all-reduce-hook probe needs the model sharded with fully_shard")
    set_hook(Recorder("fsdp2-all-reduce-hook", "fsdp2-all-reduce-hook"))


def comm_hook(state, bucket):  # no annotations: DDP reads them
    """A DDP communication hook: records the bucket, then averages it like the default hook (doubled in modify
    mode). A plain function without annotations: DDP reads its ``__name__`` and refuses a ``bucket`` annotated with
    anything but the ``GradBucket`` class itself (and this module's annotations are strings)."""
    import torch.distributed as dist

    from .record import _MODIFY, _PHASE, LOG, watched
    LOG.append(("ddp-comm-hook", _PHASE[0], (state, bucket)))
    watched("ddp-comm-hook")
    scale = (2.0 if _MODIFY[0] else 1.0) / dist.get_world_size()
    future = dist.all_reduce(bucket.buffer().mul_(scale), async_op=True).get_future()
    return future.then(lambda f: f.value()[0])


def _times_two(value: Any) -> Any:
    return None if value is None else value * 2


def _each_times_two(values: Any) -> Any:
    return tuple(_times_two(v) for v in values)


STRAY = "a stray value"   # what a hook whose API takes no return value returns in the modify run

MODIFIERS.update({
    "tensor-hook": lambda grad: grad * 2,
    "param-hook": lambda grad: grad * 2,
    "post-accumulate-grad-hook": lambda param: torch.zeros_like(param),
    "node-pre-hook": lambda grad_outputs: _each_times_two(grad_outputs),
    "node-hook": lambda grad_inputs, grad_outputs: _each_times_two(grad_inputs),
    "multi-grad-hook-all": lambda grads: torch.zeros(()),
    "multi-grad-hook-any": lambda grad: torch.zeros(()),
    "saved-tensors-pack": lambda t: t * 2 if isinstance(t, torch.Tensor) else t,
    "saved-tensors-unpack": lambda t: t * 2 if isinstance(t, torch.Tensor) else t,
    "node-creation-hook": lambda node: torch.zeros(()),
    "forward-pre-hook": lambda module, args: (args[0] * 2,),
    "forward-hook": lambda module, args, output: output * 2,
    "forward-pre-hook-with-kwargs": lambda module, args, kwargs: ((args[0] * 2,), kwargs),
    "backward-pre-hook": lambda module, grad_output: _each_times_two(grad_output),
    "full-backward-hook": lambda module, grad_input, grad_output: _each_times_two(grad_input),
    "global-forward-pre-hook": lambda module, args: tuple(a * 2 if isinstance(a, torch.Tensor) else a for a in args),
    "global-forward-hook": lambda module, args, output: output * 2 if isinstance(output, torch.Tensor) else None,
    "global-forward-hook-with-kwargs": lambda module, args, kwargs, output: (
        output * 2 if isinstance(output, torch.Tensor) else None),
    "global-full-backward-pre-hook": lambda module, grad_output: _each_times_two(grad_output),
    "global-full-backward-hook": lambda module, grad_input, grad_output: _each_times_two(grad_input),
    "state-dict-pre-hook": lambda module, prefix, keep_vars: {},
    "state-dict-post-hook": lambda module, state_dict, prefix, local_metadata: {},
    "load-state-dict-pre-hook": lambda module, state_dict, *rest: {},
    "load-state-dict-post-hook": lambda module, incompatible_keys: {},
    "optimizer-step-pre-hook": lambda optimizer, args, kwargs: None,
    "optimizer-step-post-hook": lambda optimizer, args, kwargs: torch.zeros(()),
    "optimizer-state-dict-post-hook": lambda optimizer, state_dict: {**state_dict, "probe": 1},
    "optimizer-load-state-dict-pre-hook": lambda optimizer, state_dict: {
        **state_dict, "param_groups": [{**g, "lr": 0.5} for g in state_dict["param_groups"]]},
    "fsdp2-all-reduce-hook": lambda grad: grad.mul_(2),
})

_GRAD = "the gradient doubled"
_AB = frozenset({"forward", "backward"})
FAMILIES: list[Family] = [
    # autograd: on tensors, Nodes and the graph
    Family("tensor-hook", "autograd", "Tensor.register_hook (on a tensor made in forward)", _AB, "forward-code",
           _tap("tensor"), MODIFIERS["tensor-hook"], _GRAD, r"\.register_hook\(", "张量钩子（前向中的中间张量）"),
    Family("param-hook", "autograd", "Tensor.register_hook (on a parameter)", _AB, "module",
           _on_weight("register_hook", "param-hook"), MODIFIERS["param-hook"], _GRAD,
           r"(weight|bias|param\w*|p)\.register_hook\(", "参数上的张量钩子"),
    Family("post-accumulate-grad-hook", "autograd", "Tensor.register_post_accumulate_grad_hook", _AB, "module",
           _on_weight("register_post_accumulate_grad_hook", "post-accumulate-grad-hook"),
           MODIFIERS["post-accumulate-grad-hook"], "a tensor of the parameter's size (the API takes None)",
           r"register_post_accumulate_grad_hook", "累加后钩子",
           also=(Returned("another-size", "a tensor of another size", "另一种大小的张量", lambda param: torch.zeros(())),
                 Returned("itself", "the parameter itself", "参数本身", lambda param: param))),
    Family("node-pre-hook", "autograd", "Node.register_prehook", _AB, "forward-code", _tap("node-pre"),
           MODIFIERS["node-pre-hook"], "grad_outputs doubled", r"grad_fn\.register_prehook|register_prehook\(",
           "节点前置钩子"),
    Family("node-hook", "autograd", "Node.register_hook", _AB, "forward-code", _tap("node"),
           MODIFIERS["node-hook"], "grad_inputs doubled", r"grad_fn\.register_hook|\.register_hook\(",
           "节点后置钩子"),
    Family("multi-grad-hook-all", "autograd", "register_multi_grad_hook(mode='all')", _AB, "forward-code",
           _tap("all"), MODIFIERS["multi-grad-hook-all"], STRAY, r"register_multi_grad_hook", "多梯度钩子（all）"),
    Family("multi-grad-hook-any", "autograd", "register_multi_grad_hook(mode='any')", _AB, "forward-code",
           _tap("any"), MODIFIERS["multi-grad-hook-any"], STRAY, r"register_multi_grad_hook", "多梯度钩子（any）"),
    Family("saved-tensors-pack", "autograd", "saved_tensors_hooks: pack_hook", _AB, "scope", _saved("pack"),
           MODIFIERS["saved-tensors-pack"], "what is saved doubled", r"saved_tensors_hooks|save_on_cpu",
           "保存张量的打包钩子"),
    Family("saved-tensors-unpack", "autograd", "saved_tensors_hooks: unpack_hook", _AB, "scope",
           _saved("unpack"), MODIFIERS["saved-tensors-unpack"], "the unpacked tensor doubled",
           r"saved_tensors_hooks|save_on_cpu", "保存张量的解包钩子"),
    Family("node-creation-hook", "autograd", "autograd.graph.node_creation_hook", _AB, "scope", _node_creation,
           MODIFIERS["node-creation-hook"], STRAY, r"node_creation_hook", "节点创建钩子"),
    # modules
    Family("forward-pre-hook", "module", "Module.register_forward_pre_hook", frozenset({"forward"}), "module",
           _on_module("register_forward_pre_hook", "forward-pre-hook"), MODIFIERS["forward-pre-hook"],
           "the input doubled", r"register_forward_pre_hook", "前向前置钩子"),
    Family("forward-hook", "module", "Module.register_forward_hook", frozenset({"forward"}), "module",
           _on_module("register_forward_hook", "forward-hook"), MODIFIERS["forward-hook"], "the output doubled",
           r"register_forward_hook", "前向钩子"),
    Family("forward-pre-hook-with-kwargs", "module", "register_forward_pre_hook(with_kwargs=True)",
           frozenset({"forward"}), "module",
           _on_module("register_forward_pre_hook", "forward-pre-hook-with-kwargs", with_kwargs=True),
           MODIFIERS["forward-pre-hook-with-kwargs"], "the input doubled", r"with_kwargs\s*=\s*True",
           "带关键字参数的前向前置钩子"),
    Family("forward-hook-always-call", "module", "register_forward_hook(always_call=True), forward raising",
           frozenset({"forward"}), "module", _always_call, None, "", r"always_call\s*=\s*True",
           "always_call 前向钩子（前向抛出异常）"),
    Family("backward-pre-hook", "module", "Module.register_full_backward_pre_hook", _AB, "module",
           _on_module("register_full_backward_pre_hook", "backward-pre-hook"), MODIFIERS["backward-pre-hook"],
           "grad_output doubled", r"register_full_backward_pre_hook", "反向前置钩子"),
    Family("full-backward-hook", "module", "Module.register_full_backward_hook", _AB, "module",
           _on_module("register_full_backward_hook", "full-backward-hook"), MODIFIERS["full-backward-hook"],
           "grad_input doubled", r"register_full_backward_hook", "完整反向钩子"),
    Family("global-forward-pre-hook", "module", "nn.modules.module.register_module_forward_pre_hook",
           frozenset({"forward"}), "scope", _global("register_module_forward_pre_hook", "global-forward-pre-hook"),
           MODIFIERS["global-forward-pre-hook"], "every input doubled", r"register_module_forward_pre_hook",
           "全局前向前置钩子"),
    Family("global-forward-hook", "module", "nn.modules.module.register_module_forward_hook", frozenset({"forward"}),
           "scope", _global("register_module_forward_hook", "global-forward-hook"), MODIFIERS["global-forward-hook"],
           "every output doubled", r"register_module_forward_hook", "全局前向钩子"),
    Family("global-forward-hook-with-kwargs", "module",
           "nn.modules.module.register_module_forward_hook(with_kwargs=True)", frozenset({"forward"}), "scope",
           _global("register_module_forward_hook", "global-forward-hook-with-kwargs", with_kwargs=True),
           MODIFIERS["global-forward-hook-with-kwargs"], "every output doubled",
           r"register_module_forward_hook\((?:(?!register_)[\s\S]){0,300}?with_kwargs\s*=\s*True",
           "带关键字参数的全局前向钩子"),
    Family("global-full-backward-pre-hook", "module", "nn.modules.module.register_module_full_backward_pre_hook",
           _AB, "scope", _global("register_module_full_backward_pre_hook", "global-full-backward-pre-hook"),
           MODIFIERS["global-full-backward-pre-hook"], "every grad_output doubled",
           r"register_module_full_backward_pre_hook", "全局反向前置钩子"),
    Family("global-full-backward-hook", "module", "nn.modules.module.register_module_full_backward_hook", _AB,
           "scope", _global("register_module_full_backward_hook", "global-full-backward-hook"),
           MODIFIERS["global-full-backward-hook"], "every grad_input doubled",
           r"register_module_full_backward_hook", "全局完整反向钩子"),
    # state: state dicts, optimizers, parametrizations
    Family("state-dict-pre-hook", "state", "Module.register_state_dict_pre_hook", frozenset({"state"}), "module",
           _on_module("register_state_dict_pre_hook", "state-dict-pre-hook"), MODIFIERS["state-dict-pre-hook"],
           STRAY, r"register_state_dict_pre_hook", "状态字典前置钩子"),
    Family("state-dict-post-hook", "state", "Module.register_state_dict_post_hook", frozenset({"state"}), "module",
           _on_module("register_state_dict_post_hook", "state-dict-post-hook"), MODIFIERS["state-dict-post-hook"],
           STRAY, r"register_state_dict_post_hook", "状态字典后置钩子"),
    Family("load-state-dict-pre-hook", "state", "Module.register_load_state_dict_pre_hook", frozenset({"state"}),
           "module", _on_module("register_load_state_dict_pre_hook", "load-state-dict-pre-hook"),
           MODIFIERS["load-state-dict-pre-hook"], STRAY, r"register_load_state_dict_pre_hook",
           "加载状态字典前置钩子"),
    Family("load-state-dict-post-hook", "state", "Module.register_load_state_dict_post_hook", frozenset({"state"}),
           "module", _on_module("register_load_state_dict_post_hook", "load-state-dict-post-hook"),
           MODIFIERS["load-state-dict-post-hook"], STRAY, r"register_load_state_dict_post_hook",
           "加载状态字典后置钩子"),
    Family("optimizer-step-pre-hook", "state", "Optimizer.register_step_pre_hook", frozenset({"step"}), "optimizer",
           _on_optimizer("register_step_pre_hook", "optimizer-step-pre-hook"), None, "",
           r"register_step_pre_hook|register_optimizer_step_pre_hook", "优化器 step 前置钩子"),
    Family("optimizer-step-post-hook", "state", "Optimizer.register_step_post_hook", frozenset({"step"}),
           "optimizer", _on_optimizer("register_step_post_hook", "optimizer-step-post-hook"),
           MODIFIERS["optimizer-step-post-hook"], STRAY,
           r"register_step_post_hook|register_optimizer_step_post_hook", "优化器 step 后置钩子"),
    Family("optimizer-state-dict-post-hook", "state", "Optimizer.register_state_dict_post_hook",
           frozenset({"optimizer-state"}), "optimizer",
           _on_optimizer("register_state_dict_post_hook", "optimizer-state-dict-post-hook"),
           MODIFIERS["optimizer-state-dict-post-hook"], "a state dict with a key added",
           r"register_state_dict_post_hook", "优化器状态字典后置钩子"),
    Family("optimizer-load-state-dict-pre-hook", "state", "Optimizer.register_load_state_dict_pre_hook",
           frozenset({"optimizer-state"}), "optimizer",
           _on_optimizer("register_load_state_dict_pre_hook", "optimizer-load-state-dict-pre-hook"),
           MODIFIERS["optimizer-load-state-dict-pre-hook"], "a state dict with another learning rate",
           r"register_load_state_dict_pre_hook", "优化器加载状态字典前置钩子"),
    Family("parametrization", "state", "nn.utils.parametrize.register_parametrization", frozenset({"forward"}),
           "module", _parametrization, lambda weight: weight * 2, "the weight doubled", r"register_parametrization",
           "参数化"),
    # distributed
    Family("ddp-comm-hook", "distributed", "DistributedDataParallel.register_comm_hook", frozenset({"backward"}),
           "wrapper", _comm_hook, lambda *args: None, "the averaged bucket doubled", r"register_comm_hook",
           "DDP 通信钩子"),
    Family("fsdp2-all-reduce-hook", "distributed", "FSDPModule.set_all_reduce_hook", frozenset({"backward"}),
           "wrapper", _fsdp_hook, MODIFIERS["fsdp2-all-reduce-hook"], "the gradient doubled in place",
           r"set_all_reduce_hook", "FSDP2 的 all-reduce 钩子"),
]
BY_ID = {f.id: f for f in FAMILIES}
