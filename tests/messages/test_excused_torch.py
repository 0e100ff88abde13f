"""Attempts to reach the excused messages of torch's autograd, module hooks, checkpointing, parametrizations,
TorchScript and the C++ hooks: each does on this machine what a user would do to meet the message, and records what
happened instead (see ``message_triggers.py``)."""
from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from message_triggers import attempt, attempts_of


def _grad_of(f, *shape):
    x = torch.ones(*shape or (2, 2), requires_grad=True)
    f(x).sum().backward()
    return x.grad


# --- activation checkpointing -------------------------------------------------------------------------------

@attempt(["capture-logs-fwd-logs-is-none-433fc2", "capture-logs-recompute-logs-is-none-a29817",
          "something-went-unexpectedly-wrong-in-activation-checkpoi-5fc81e"],
         outcome="An error happened while unpacking tensors; dumping logs of latest computation")
def checkpoint_debug_with_a_recomputation_that_differs():
    calls = []

    def f(x):
        calls.append(1)
        return x.sin().sin() if len(calls) == 1 else x.sum().sin()  # recomputation saves another shape
    x = torch.ones(3, requires_grad=True)
    checkpoint(f, x, use_reentrant=False, debug=True).sum().backward()


@attempt(["internal-error-target-frame-reference-is-none-ff29d1", "unexpected-state-target-frame-early-stop-is-set-0ce58f"],
         outcome="nested checkpoints, early stop on and off, two backwards: gradients equal")
def nested_checkpoints_with_and_without_early_stop():
    from torch.utils.checkpoint import set_checkpoint_early_stop
    lin = nn.Linear(2, 2)

    def inner(x):
        return lin(x).tanh() * lin(x)

    def outer(x):
        return checkpoint(inner, x, use_reentrant=False).exp()
    grads = []
    for early in (True, False):
        with set_checkpoint_early_stop(early):
            x = torch.ones(2, 2, requires_grad=True)
            y = checkpoint(outer, x, use_reentrant=False).sum()
            y.backward(retain_graph=True)
            y.backward()
            grads.append(x.grad)
    equal = torch.allclose(grads[0], grads[1])
    return f"nested checkpoints, early stop on and off, two backwards: gradients {'equal' if equal else 'differ'}"


@attempt(["torch-utils-checkpoint-expected-context-fn-generator-to-1a26d6"],
         outcome="context_fn returning one context: TypeError")
def checkpoint_context_fn_of_the_wrong_shape():
    x = torch.ones(2, requires_grad=True)
    checkpoint(torch.sin, x, use_reentrant=False,
               context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext())).sum().backward()
    try:
        checkpoint(torch.sin, x, use_reentrant=False, context_fn=lambda: contextlib.nullcontext())
    except TypeError:
        return "context_fn returning one context: TypeError"
    return "context_fn returning one context: no error"


@attempt(["pytorch-s-device-state-was-initialized-in-the-forward-a3ea03",
          "tensor-arguments-excluding-cpu-tensors-are-detected-on-a-372215"],
         outcome="CPU and meta tensors in one checkpoint: no device warning; CUDA available: False")
def checkpoint_with_tensors_on_two_devices():
    x = torch.ones(2, requires_grad=True)
    m = torch.ones(2, device="meta")
    checkpoint(lambda a, b: a.sin() + b.sum().to("cpu") * 0 if False else a.sin(), x, m,
               use_reentrant=False).sum().backward()
    checkpoint(lambda a: a.sin(), x, use_reentrant=True).sum().backward()
    return (f"CPU and meta tensors in one checkpoint: no device warning; CUDA available: "
            f"{torch.cuda.is_available()}")


@attempt(["expected-non-reentrant-activation-checkpoint-generator-t-637059"],
         outcome="composable checkpoint: forward and backward ran twice")
def composable_checkpoint_forward_and_backward():
    from torch.distributed._composable import checkpoint as composable
    m = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    composable(m[0])
    for _ in range(2):
        m(torch.ones(1, 2, requires_grad=True)).sum().backward()
    return "composable checkpoint: forward and backward ran twice"


# --- module and Node hooks ----------------------------------------------------------------------------------

@attempt(["cannot-set-module-backward-hook-for-a-module-with-c757b1",
          "error-while-setting-up-backward-hooks-please-open-an-9f198c",
          "output-tensors-index-should-not-be-none-when-grad-503ec0"],
         outcome="Full backward hook is firing when gradients are computed with respect to module outputs")
def full_backward_hooks_on_modules_without_tensor_inputs():
    class Const(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

        def forward(self, n=2):
            return self.w * n, (self.w.sum(), [self.w * 3])
    m = Const()
    m.register_full_backward_hook(lambda mod, gi, go: None)
    m.register_full_backward_pre_hook(lambda mod, go: None)
    out, (s, (t,)) = m()
    (out.sum() + s + t.sum()).backward()
    lin = nn.Linear(2, 2)
    lin.register_full_backward_hook(lambda mod, gi, go: None)
    lin(torch.ones(1, 2)).sum().backward()  # no input requires grad


@attempt(["using-a-non-full-backward-hook-when-outputs-are-7298ee"],
         outcome="Using non-full backward hooks on a Module that does not return a single Tensor or a tuple of Tensors "
                 "is deprecated")
def old_backward_hook_with_outputs_in_a_dict():
    class Nested(nn.Module):
        def forward(self, x):
            return {"a": x * 2, "b": [x.sin(), (x.cos(),)]}
    m = Nested()
    m.register_backward_hook(lambda mod, gi, go: None)
    out = m(torch.ones(2, requires_grad=True))
    (out["a"].sum() + out["b"][0].sum() + out["b"][1][0].sum()).backward()


@attempt(["expected-nb-calls-to-be-set-c55c49", "expected-this-hook-to-be-called-inside-a-backward-2ed618"],
         outcome="multi-grad hook calls (all, any): [2, 2]")
def multi_grad_hooks_all_and_any():
    from torch.autograd.graph import register_multi_grad_hook
    calls = []
    for mode in ("all", "any"):
        a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
        n = [0]

        def hook(grads, n=n):
            n[0] += 1
        handle = register_multi_grad_hook((a, b), hook, mode=mode)
        (a * 2 + b).sum().backward()
        a.sum().backward()  # a second backward that reaches only one of them
        handle.remove()
        calls.append(n[0])
    return f"multi-grad hook calls (all, any): {calls}"


@attempt(["expected-gradient-function-to-be-set-83f1f3"],
         outcome="get_gradient_edge of a tensor without grad: RuntimeError: It is not possible to get the gradient edge")
def gradient_edge_of_a_tensor_that_needs_no_grad():
    from torch.autograd.graph import get_gradient_edge
    get_gradient_edge(torch.ones(2, requires_grad=True) * 2)
    get_gradient_edge(torch.ones(2, requires_grad=True))
    try:
        get_gradient_edge(torch.ones(2))
    except RuntimeError as exc:
        return f"get_gradient_edge of a tensor without grad: RuntimeError: {str(exc)[:45]}"


@attempt(["expect-activation-post-process-attribute-already-attache-0d8c16"],
         outcome="eager-mode quantization prepare: observers attached")
def eager_quantization_prepare_runs_its_observer_hooks():
    import warnings

    from torch.ao.quantization import QuantStub, get_default_qconfig, prepare
    m = nn.Sequential(QuantStub(), nn.Linear(2, 2))
    m.qconfig = get_default_qconfig("x86")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare(m)
    prepared(torch.ones(1, 2))
    ok = hasattr(prepared[1], "activation_post_process")
    return f"eager-mode quantization prepare: observers {'attached' if ok else 'missing'}"


@attempt(["forward-pre-hook-did-not-capture-inputs-86f9a0"],
         outcome="FX splitter preview: ran")
def fx_splitter_preview():
    import torch.fx
    from torch.fx.passes.operator_support import OperatorSupport
    from torch.fx.passes.splitter_base import _SplitterBase, _SplitterSettingBase
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    gm = torch.fx.symbolic_trace(m)
    x = torch.ones(1, 2)
    from torch.fx.passes.shape_prop import ShapeProp
    ShapeProp(gm).propagate(x)
    splitter = _SplitterBase(gm, (x,), OperatorSupport({}), _SplitterSettingBase())
    with contextlib.redirect_stdout(None):
        splitter.split_preview()
    return "FX splitter preview: ran"


# --- parametrizations and the old norms ---------------------------------------------------------------------

@attempt(["expected-from-module-parametrizations-to-be-a-moduledict-37066e",
          "expected-module-parametrizations-to-be-a-moduledict-got-2dd636",
          "expected-to-module-parametrizations-to-be-a-moduledict-g-9f49a3",
          "expected-original-to-be-a-tensor-is-tensor-promised-f5435e",
          "expected-parameters-to-transfer-to-be-iterable-got-bb2f72",
          "module-already-has-an-attribute-named-b3ae79"],
         outcome="AttributeError: 'ParametrizedLinear' object has no attribute 'nope'")
def parametrizations_registered_transferred_and_removed():
    from torch.nn.utils import parametrize

    class Double(nn.Module):
        def forward(self, w):
            return w * 2
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    parametrize.register_parametrization(a, "weight", Double())
    parametrize.register_parametrization(a, "weight", Double())
    parametrize.register_parametrization(a, "bias", Double())
    parametrize.transfer_parametrizations_and_params(a, b)
    parametrize.transfer_parametrizations_and_params(a, b, "weight")
    parametrize.remove_parametrizations(a, "weight", leave_parametrized=True)
    parametrize.remove_parametrizations(b, "bias", leave_parametrized=False)
    parametrize.transfer_parametrizations_and_params(a, nn.Linear(2, 2), "nope")


@attempt(["caching-is-not-implemented-for-scripting-either-disable-718a92"],
         outcome="Parametrization is not working with scripting")
def scripted_parametrized_module_under_caching():
    from torch.nn.utils import parametrize

    class Double(nn.Module):
        def forward(self, w):
            return w * 2
    m = nn.Linear(2, 2)
    parametrize.register_parametrization(m, "weight", Double())
    scripted = torch.jit.script(m)
    with parametrize.cached():
        scripted(torch.ones(1, 2))


@attempt(["right-inverse-must-return-a-tensor-or-a-reference-255666"],
         outcome="'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). Got int")
def right_inverse_returning_a_sequence_with_a_number():
    from torch.nn.utils import parametrize

    class Split(nn.Module):
        def forward(self, a, b):
            return a + b

        def right_inverse(self, w):
            return w, 3
    m = nn.Linear(2, 2)
    try:
        parametrize.register_parametrization(m, "weight", Split())
    except Exception as exc:  # noqa: BLE001 (what it says is the outcome)
        print(f"{type(exc).__name__}: {exc}")

    class Number(nn.Module):
        def forward(self, w):
            return w

        def right_inverse(self, w):
            return 3
    parametrize.register_parametrization(nn.Linear(2, 2), "weight", Number())


@attempt(["unexpected-key-in-metadata-spectral-norm-version-fea62b"],
         outcome="old spectral_norm: state_dict saved and loaded twice")
def old_spectral_norm_state_dict_round_trips():
    m = torch.nn.utils.spectral_norm(nn.Linear(2, 2))
    sd = m.state_dict()
    m.load_state_dict(sd)
    m.load_state_dict(m.state_dict())
    outer = nn.Sequential(m, torch.nn.utils.spectral_norm(nn.Linear(2, 2)))
    outer.load_state_dict(outer.state_dict())
    return "old spectral_norm: state_dict saved and loaded twice"


# --- the C++ side of autograd hooks -------------------------------------------------------------------------

@attempt(["node-creation-hooks-fired-twice-for-d99000", "node-node-creation-hooks-fired-internal-assert-failed-at-d0a67e",
          "tls-stack-empty-internal-assert-failed-at-w-pytorch-17a210"],
         outcome="node-creation hooks, nested and around backward: nodes seen")
def node_creation_hooks_nested_and_around_backward():
    from torch.autograd import graph
    seen = []
    with graph.node_creation_hook(lambda node: seen.append(type(node).__name__)):
        with graph.node_creation_hook(lambda node: None):
            y = (torch.ones(2, requires_grad=True) * 2).sin()
        y.sum().backward()
    return f"node-creation hooks, nested and around backward: nodes seen {seen}"


@attempt(["hooks-internal-assert-failed-at-w-pytorch-pytorch-torch-873d9c",
          "is-initialized-internal-assert-failed-at-w-pytorch-pytor-bb456e",
          "is-initialized-tls-stack-empty-internal-assert-failed-at-f84689",
          "pack-hook-ptr-getpyinterpreter-nullptr-unpack-hook-ptr-g-701beb",
          "data-defined-internal-assert-failed-at-w-pytorch-pytorch-e80b12",
          "is-leaf-is-output-internal-assert-failed-at-w-ee6d50",
          "the-pack-hook-raised-before-saving-data-for-this-69feb7"],
         outcome="RuntimeError: the pack hook refuses")
def saved_tensor_hooks_nested_disabled_and_raising():
    from torch.autograd.graph import disable_saved_tensors_hooks, saved_tensors_hooks
    x = torch.ones(3, requires_grad=True)
    with saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
        with saved_tensors_hooks(lambda t: (t,), lambda p: p[0]):
            y = x.exp()  # saves its output
            z = (x * 2).sin()  # saves an intermediate
        (y.sum() + z.sum()).backward(retain_graph=True)
        (y.sum() + z.sum()).backward()
    with disable_saved_tensors_hooks("off"):
        x.exp().sum().backward()
    y = x.exp()
    y.grad_fn._raw_saved_result.register_hooks(lambda t: t, lambda t: t)
    y.sum().backward()

    def refuse(t):
        raise RuntimeError("the pack hook refuses")
    with saved_tensors_hooks(refuse, lambda t: t):
        x.exp()


@attempt(["input-grad-buffers-does-not-support-post-hooks-on-13d8af", "meta-hooks-empty-internal-assert-failed-at-w-pytorch-cbb8e4",
          "res-defined-internal-assert-failed-at-w-pytorch-pytorch-34ef91",
          "cpp-tensor-pre-hooks-size-static-cast-size-t-fd27c6"],
         outcome="tensor, retain_grad and Node hooks with backward and autograd.grad: gradients equal")
def tensor_and_node_hooks_with_backward_and_autograd_grad():
    grads = []
    for use_grad in (False, True):
        x = torch.ones(3, requires_grad=True)
        y = x * 2
        y.retain_grad()
        handle = y.register_hook(lambda g: g * 3)
        y.register_hook(lambda g: None)
        handle.remove()
        z = y.sin()
        z.grad_fn.register_hook(lambda gi, go: None)
        z.grad_fn.register_prehook(lambda go: None)
        if use_grad:
            grads.append(torch.autograd.grad(z.sum(), x)[0])
        else:
            z.sum().backward()
            grads.append(x.grad)
    return ("tensor, retain_grad and Node hooks with backward and autograd.grad: gradients "
            + ("equal" if torch.equal(*grads) else "differ"))


@attempt(["cannot-register-a-hook-on-a-variable-that-doesn-ed42c1",
          "cppfunctionsingletensorprehook-currently-only-supports-h-ebe27b", "invalid-index-no-hook-at-position-f0792d"],
         outcome="cannot register a hook on a tensor that doesn't require gradient; C++ register_hook/remove_hook "
                 "bound to Python: False")
def tensor_hook_on_a_tensor_without_grad_and_its_bindings():
    bound = any(hasattr(torch._C.TensorBase, name) for name in ("register_hook", "remove_hook", "_remove_hook"))
    try:
        torch.ones(2).register_hook(lambda g: g)
    except RuntimeError as exc:
        return f"{exc}; C++ register_hook/remove_hook bound to Python: {bound}"


@attempt(["register-hook-dict-expected-a-tensor-fa15f5"],
         outcome="other values: TypeError: _register_hook_dict expected a variable; a tensor: the process died with "
                 "signal 11")
def node_register_hook_dict_with_other_arguments():
    import subprocess
    import sys
    node = (torch.ones(2, requires_grad=True) * 2).grad_fn
    for value in (None, "t"):
        try:
            node._register_hook_dict(value)
        except TypeError as exc:
            said = f"{type(exc).__name__}: {exc}"
    # a tensor (what the check behind this message wants) crashes the interpreter: tried in a process of its own
    code = "import torch; (torch.ones(2, requires_grad=True) * 2).grad_fn._register_hook_dict(torch.ones(2))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    how = f"died with signal {-done.returncode}" if done.returncode < 0 else f"exited with {done.returncode}"
    return f"other values: {said}; a tensor: the process {how} {done.stderr[-300:]}"


# --- TorchScript --------------------------------------------------------------------------------------------

@attempt(["as-forward-hook-or-forward-pre-hook-a40442", "forward-hooks-only-exist-on-modules-at-the-moment-b64aa1",
          "forward-pre-hooks-only-exist-on-modules-at-the-141968",
          "hookdefs-size-hookrcbs-size-internal-assert-failed-at-w-b46ebc",
          "hookdefs-size-hookresolvers-size-internal-assert-failed-a75330",
          "prehookdefs-size-prehookrcbs-size-internal-assert-failed-75d7b7",
          "prehookdefs-size-prehookresolvers-size-internal-assert-f-887093"],
         outcome="scripted module with forward hooks and pre-hooks: output as in eager; scripted class methods "
                 "with hook in their name: []")
def scripted_modules_and_classes_with_hooks():
    def pre(module, inputs: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        return (inputs[0] * 2,)

    def post(module, inputs: tuple[torch.Tensor], output: torch.Tensor) -> torch.Tensor:
        return output + 1
    m = nn.Linear(2, 2)
    m.register_forward_pre_hook(pre)
    m.register_forward_hook(post)
    x = torch.ones(1, 2)
    same = torch.allclose(torch.jit.script(m)(x), m(x))

    @torch.jit.script
    class Box:
        def __init__(self, x: torch.Tensor):
            self.x = x
    hooks = [n for n in dir(Box) if "hook" in n and not n.startswith("__")]
    return (f"scripted module with forward hooks and pre-hooks: output {'as in eager' if same else 'differs'}; "
            f"scripted class methods with hook in their name: {hooks}")


test_attempt = attempts_of(__name__)
