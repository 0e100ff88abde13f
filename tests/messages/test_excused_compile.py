"""Attempts to reach the excused messages of torch.compile (Dynamo, AOTAutograd, compiled autograd): each compiles
what a user writes with hooks, on this machine's CPU backends, and records what happened instead (see
``message_triggers.py``)."""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from message_triggers import attempt, attempts_of


def _same(compiled, eager):
    return all(torch.allclose(a, b) for a, b in zip(compiled, eager))


@attempt(["expected-all-users-of-pre-hook-to-be-operator-2c7fb4", "expected-torch-tensor-got-754f15",
          "hooks-proxy-must-be-set-before-bind-backward-state-382002",
          "hooks-proxy-must-be-set-before-post-acc-grad-c81561", "hooks-proxy-must-be-set-before-post-hook-178472",
          "hooks-proxy-must-be-set-before-pre-hook-aed150", "hooks-proxy-must-be-set-before-proxy-call-backward-081cb7",
          "hooks-proxy-must-be-set-before-tensor-pre-hook-042414",
          "hooks-proxy-must-be-set-before-unpack-hook-4433ac",
          "post-acc-grad-hook-must-have-corresponding-acc-grad-523532",
          "cpp-tensor-pre-hooks-size-static-cast-size-t-fd27c6"],
         outcome="compiled autograd with tensor, Node, post-accumulate, module and saved-tensor hooks: gradients "
                 "as in eager")
def compiled_autograd_with_every_kind_of_hook():
    from torch._dynamo import compiled_autograd

    def run():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
        m[0].weight.register_hook(lambda g: g * 2)
        m[0].bias.register_post_accumulate_grad_hook(lambda p: None)
        m[2].register_full_backward_hook(lambda mod, gi, go: None)
        m[2].register_full_backward_pre_hook(lambda mod, go: None)
        x = torch.ones(2, 3, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t * 1):
            y = m(x)
        y.grad_fn.register_prehook(lambda go: None)
        y.grad_fn.register_hook(lambda gi, go: None)
        y.sum().backward()
        return [x.grad, *(p.grad for p in m.parameters())]
    eager = run()
    torch._dynamo.reset()
    with compiled_autograd._enable(torch.compile(backend="eager")):
        compiled = run()
    torch._dynamo.reset()
    return ("compiled autograd with tensor, Node, post-accumulate, module and saved-tensor hooks: gradients "
            + ("as in eager" if _same(compiled, eager) else "differ"))


@attempt(["backward-state-hook-name-already-registered-2798bf", "expected-removablehandlevariable-got-00f4a8",
          "expected-tensor-variable-got-in-register-hook-32e39a", "expected-variabletracker-for-hook-got-8e7b8f",
          "handle-idx-should-be-falsy-got-39f95d", "handle-must-be-mutable-in-register-hook-b15359",
          "hooks-on-non-input-tensors-nyi-should-not-get-34b21b",
          "torch-tensor-has-no-attribute-f320d3"],
         outcome="register_hook under torch.compile (inputs, intermediates, a removed handle): gradients as in eager")
def register_hook_inside_a_compiled_function():
    def f(x, y):
        h = x.register_hook(lambda g: g * 2)
        y.register_hook(lambda g: g + 1)
        z = (x * y).sin()
        z.register_hook(lambda g: g * 3)
        w = z.cos()
        w.register_hook(lambda g: g)  # removing this handle inside the function fails (a triggered message)
        h.remove()
        x.register_hook(lambda g: g * 5)
        return w.sum()

    def run(fn):
        x, y = torch.ones(3, requires_grad=True), torch.full((3,), 2.0, requires_grad=True)
        fn(x, y).backward()
        return [x.grad, y.grad]
    torch._dynamo.reset()
    eager = run(f)
    compiled = run(torch.compile(f, backend="eager"))
    torch._dynamo.reset()
    return ("register_hook under torch.compile (inputs, intermediates, a removed handle): gradients "
            + ("as in eager" if _same(compiled, eager) else "differ"))


@attempt(["bw-unpack-out-n-must-not-be-none-9dce6c", "could-not-find-saved-tensor-in-bw-g-inputs-e5b2ed",
          "expected-exactly-1-leaf-got-c35e21", "expected-exactly-1-pack-g-input-got-01ecca",
          "expected-fw-s-names-bw-s-names-got-035ee4", "expected-fw-t-names-bw-t-names-got-878d1c",
          "expected-n-name-got-bfbe84", "expected-new-n-name-got-2feda2",
          "expected-pack-subgraph-name-to-be-saved-tensors-hooks-9a8242",
          "expected-unpack-subgraph-name-to-be-saved-tensors-hooks-4b50c9", "fw-pack-out-args-must-not-be-empty-7bf2df",
          "saved-tensors-hooks-were-specialized-as-graphmodules-in-4bce34",
          "saved-tensors-hooks-with-inputs-mutations-are-not-allowe-c4cbdf",
          "tensor-subclasses-in-graphmodule-saved-tensors-hooks-are-a33aed",
          "disable-saved-tensors-hooks-expects-1-arg-got-d8f5a5", "expected-1-value-got-11aa24",
          "interleaving-saved-tensor-activations-and-symints-is-not-0e2e67",
          "expected-one-saved-tensor-is-graph-input-entry-per-a89b49"],
         outcome="saved-tensor hooks around and inside compiled functions (aot_eager, dynamic shapes): gradients as "
                 "in eager")
def saved_tensor_hooks_with_aot_autograd():
    def pack(t):
        return t.to(torch.float64)

    def unpack(t):
        return t.to(torch.float32)

    def f(x):
        return (x.sin() * x.cos()).exp().sum()

    def g(x):
        with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
            y = x.sin()
        return (y * x[: x.shape[0] // 2].sum()).sum()

    def run(fn, n, hooks):
        x = torch.linspace(0, 1, n, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack) if hooks else contextlib.nullcontext():
            fn(x).backward()
        return [x.grad]
    torch._dynamo.reset()
    same = True
    for fn, hooks in ((f, True), (g, False)):  # g disables the hooks: under active ones it raises its message
        compiled = torch.compile(fn, backend="aot_eager", dynamic=True)
        for n in (4, 6):
            same &= _same(run(compiled, n, hooks), run(fn, n, hooks))
    torch._dynamo.reset()
    with contextlib.suppress(Exception):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            torch.compile(lambda x: torch.autograd.graph.disable_saved_tensors_hooks("a", "b"), backend="eager")(
                torch.ones(1))
    torch._dynamo.reset()
    return ("saved-tensor hooks around and inside compiled functions (aot_eager, dynamic shapes): gradients "
            + ("as in eager" if same else "differ"))


@attempt(["saved-tensors-must-be-initialized-before-save-for-backwa-9a419a"],
         outcome="a custom autograd.Function under torch.compile: gradients as in eager")
def custom_function_saving_tensors_under_compile():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    def run(fn):
        x = torch.linspace(0, 1, 4, requires_grad=True)
        fn(x).sum().backward()
        return [x.grad]
    torch._dynamo.reset()
    same = _same(run(torch.compile(Square.apply, backend="aot_eager")), run(Square.apply))
    torch._dynamo.reset()
    return "a custom autograd.Function under torch.compile: gradients " + ("as in eager" if same else "differ")


@attempt(["expected-faketensor-got-9444ec", "proxy-mode-must-not-be-none-e618c5", "expected-hook-fake-to-be-not-none-07b2bb"],
         outcome="a module that updates its buffer, compiled with aot_eager: buffer as in eager")
def buffer_assignment_in_a_compiled_module():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(2))
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            self.seen = self.seen + x.detach().sum(0)
            return self.lin(x)
    torch._dynamo.reset()
    eager, compiled = Counter(), Counter()
    compiled.load_state_dict(eager.state_dict())
    fast = torch.compile(compiled, backend="aot_eager")
    for _ in range(2):
        x = torch.ones(3, 2, requires_grad=True)
        eager(x).sum().backward()
        fast(x).sum().backward()
    torch._dynamo.reset()
    same = torch.equal(eager.seen, compiled.seen)
    return "a module that updates its buffer, compiled with aot_eager: buffer " + ("as in eager" if same else "differs")


@attempt(["in-torch-compile-mode-context-fn-arg-passed-to-6d8960"],
         outcome="NotImplementedError: checkpoint not implemented for <class "
                 "'torch._dynamo.variables.functions.NestedUserFunctionVariable'> context_fn")
def checkpoint_with_a_context_fn_under_compile():
    from torch.utils.checkpoint import checkpoint

    def f(x):
        return checkpoint(torch.sin, x, use_reentrant=False,
                          context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext())).sum()
    torch._dynamo.reset()
    x = torch.ones(3, requires_grad=True)
    try:
        torch.compile(f, backend="aot_eager")(x).backward()
    finally:
        torch._dynamo.reset()


test_attempt = attempts_of(__name__)
