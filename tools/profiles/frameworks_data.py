"""The data of :mod:`tools.profiles.frameworks`: what a PyTorch forward hook, backward hook and saved-tensor hook
are in other frameworks, each framework with its pinned version, how its example runs, the pinned source links and
the example program itself.

One list, :data:`FRAMEWORKS`, in the page's order. A concept is ``yes`` (an API does the hook's job), ``partial``
(an API does part of it: seeing but not replacing, or choosing keep / recompute but not transforming) or ``no``
(nothing does it; the text says what people do instead). Every claim of an example's text is checked by the example
itself; the rest is read from the source at the links. Line numbers were read at exactly those tags and commits.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

LEVELS = ("yes", "partial", "no")
CONCEPTS = ("forward", "backward", "saved")


@dataclass(frozen=True)
class Concept:
    """One framework's answer to one PyTorch hook: ``api`` (its names, as code; none when there is nothing),
    ``level`` (one of :data:`LEVELS`) and the explanation in each language."""

    api: tuple[str, ...]
    level: str
    en: str
    zh: str


@dataclass(frozen=True)
class Framework:
    """A framework. ``runs``: ``"project env"``, ``"overlay: REQ REQ"`` (uv installs them beside the project's
    environment) or ``"source only: <reason>"``; ``needs``: what else a run needs (``"c++"``: a C++ compiler)."""

    name: str
    title: str
    version: str
    runs: str
    summary_en: str
    summary_zh: str
    forward: Concept
    backward: Concept
    saved: Concept
    missing_en: str
    missing_zh: str
    links: tuple[tuple[str, str], ...]
    runs_zh: str = ""
    example: str = ""
    needs: str = ""
    packages: tuple[str, ...] = ()  # whose installed versions a run records (besides torch and numpy)

    @property
    def runnable(self) -> bool:
        return bool(self.example)

    @property
    def requirements(self) -> list[str]:
        """The overlay's pinned requirements (none for the project env)."""
        return self.runs.split(":", 1)[1].split() if self.runs.startswith("overlay:") else []

    def concept(self, which: str) -> Concept:
        return getattr(self, which)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["links"] = [{"label": label, "url": url} for label, url in self.links]
        data.pop("example")
        return json.loads(json.dumps(data))  # as the record reads back: lists, not tuples


JAX = "https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/"
FLAX = "https://github.com/google/flax/blob/v0.12.7/flax/"
MLX = "https://github.com/ml-explore/mlx/blob/v0.32.1/"
KERAS = "https://github.com/keras-team/keras/blob/v3.15.1/keras/src/"
TF = "https://github.com/tensorflow/tensorflow/blob/v2.21.0/tensorflow/python/"
TORCH = "https://github.com/pytorch/pytorch/blob/v2.15.0/"
SHARP = "https://github.com/dotnet/TorchSharp/blob/v0.106.0/src/TorchSharp/"
ORT = "https://github.com/microsoft/onnxruntime/blob/"
LLAMA = "https://github.com/ggml-org/llama.cpp/blob/4df29be4f4c3673f428170fda944a5b19f743bb8/"

JAX_EXAMPLE = r'''import contextlib
import io

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name, print_saved_residuals


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(8, name="fc1")(x))
        self.sow("intermediates", "hidden", h)  # the module itself offers a value to whoever asks
        h = self.perturb("hidden", h)  # a zero added here: its gradient is dL/dh
        return nn.Dense(2, name="fc2")(h)


model, x = MLP(), jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
params = model.init(jax.random.key(0), x)
fc2 = params["params"]["fc2"]

# forward hook, see: every submodule's output, and what the module sowed
y, state = model.apply(params, x, capture_intermediates=True, mutable=["intermediates"])
inter = state["intermediates"]
print("captured:", sorted(inter), "fc1 output", inter["fc1"]["__call__"][0].shape)
print("sowed hidden == relu(fc1 output):", bool(jnp.allclose(inter["hidden"][0], nn.relu(inter["fc1"]["__call__"][0]))))


# forward hook, replace: an interceptor around every module method call
def double_fc1(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    return out * 2 if context.module.name == "fc1" and context.method_name == "__call__" else out


with nn.intercept_methods(double_fc1):
    y2 = model.apply(params, x)
by_hand = (2 * inter["hidden"][0]) @ fc2["kernel"] + fc2["bias"]
print("intercept_methods replaced fc1's output:", bool(jnp.allclose(y2, by_hand, atol=1e-6)))

# backward hook, see: the gradient of the zero perturbation is the gradient at h
grads = jax.grad(lambda v: jnp.sum(model.apply(v, x)))(params)
dh = grads["perturbations"]["hidden"]
print("perturb gave dL/dh", dh.shape, "== ones @ fc2 kernel.T:", bool(jnp.allclose(dh, jnp.ones((3, 2)) @ fc2["kernel"].T)))

# backward hook, change: an identity whose custom VJP sees and scales the gradient flowing through it
seen = []


@jax.custom_vjp
def grad_hook(h):
    return h


def hook_fwd(h):
    return h, None


def hook_bwd(_, g):
    jax.debug.callback(lambda g: seen.append(g.shape), g)  # runs on the host, also under jit
    return (g * 0.5,)


grad_hook.defvjp(hook_fwd, hook_bwd)


def loss(x, hooked):
    h = jnp.tanh(x)
    return jnp.sum(jnp.sin(grad_hook(h) if hooked else h))


g_plain = jax.grad(loss)(x, False)
g_hooked = jax.jit(jax.grad(loss), static_argnums=1)(x, True)
jax.effects_barrier()
print("custom_vjp saw a gradient of shape", seen[0], "and halved it:", bool(jnp.allclose(g_hooked, 0.5 * g_plain)))


# saved tensors: what jax.checkpoint keeps for the backward pass is chosen by a policy
def f(w, x):
    h = checkpoint_name(jnp.sin(x @ w), "h")
    return jnp.sum(jnp.cos(h @ w.T))


def residuals(fun, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_saved_residuals(fun, *args)
    return sorted(line.split(" from ")[0] + (" (argument)" if "argument" in line else "")
                  for line in out.getvalue().splitlines())  # without the source file and line


w = jnp.ones((4, 4)) * 0.1
print("saved without checkpoint:", residuals(f, w, x))
print("saved, policy save h:", residuals(jax.checkpoint(f, policy=jax.checkpoint_policies.save_only_these_names("h")), w, x))
print("saved, policy nothing:", residuals(jax.checkpoint(f, policy=jax.checkpoint_policies.nothing_saveable), w, x))


# saved tensors, pack/unpack: a custom VJP decides what its forward keeps and in which form
@jax.custom_vjp
def square(x):
    return x * x


def square_fwd(x):
    return x * x, x.astype(jnp.bfloat16)  # "pack": keep x in bfloat16


def square_bwd(packed, g):
    return (2 * packed.astype(jnp.float32) * g,)  # "unpack": back to float32


square.defvjp(square_fwd, square_bwd)
print("custom_vjp keeps:", residuals(lambda x: jnp.sum(square(x)), x))
print("gradient close to 2x:", bool(jnp.allclose(jax.grad(lambda x: jnp.sum(square(x)))(x), 2 * x, atol=1e-2)))
'''

MLX_EXAMPLE = r'''import mlx.core as mx
import mlx.nn as nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Hooked(nn.Module):
    """Stands in for a child module: calls it, then lets ``fn`` see (and replace) the output."""

    def __init__(self, inner, fn):
        super().__init__()
        self.inner, self.fn = inner, fn

    def __call__(self, *args, **kwargs):
        return self.fn(self, args, self.inner(*args, **kwargs))


mx.random.seed(0)
model, x = MLP(), mx.linspace(-1.0, 1.0, 12).reshape(3, 4)
y = model(x)
print("mlx.nn.Module methods named like a hook:", [n for n in dir(nn.Module) if "hook" in n.lower() and not n.startswith("_")])

# forward hook, see and replace: swap the child for a wrapper (a Module is a dict of its children)
captured = []
fc1, fc2 = model.layers[0], model.layers[2]
model.layers[0] = Hooked(fc1, lambda m, args, out: captured.append(out) or out * 2)
y2 = model(x)
print("wrapper saw fc1's output", captured[0].shape, "and doubling it changed y as computed by hand:",
      mx.allclose(y2, fc2(nn.relu(2 * fc1(x))), atol=1e-6).item())
print("while wrapped, fc1's parameters are renamed:", sorted(k for k, _ in nn.utils.tree_flatten(model.parameters()))[:2])
model.layers[0] = model.layers[0].inner  # "remove" the hook: put the child back
print("unwrapped model gives the old output again:", mx.allclose(model(x), y).item())
relu = nn.ReLU()
relu.__call__ = lambda x: x * 0  # an instance attribute: Python looks __call__ up on the class
print("setting __call__ on one instance changes nothing:", mx.array_equal(relu(x), nn.relu(x)).item())

# backward hook: a custom_function identity whose vjp sees and scales the gradient
seen = []


@mx.custom_function
def grad_hook(h):
    return h


@grad_hook.vjp
def grad_hook_vjp(primals, cotangent, output):
    seen.append(cotangent.shape)
    return cotangent * 0.5


def loss(x, hooked):
    h = mx.tanh(x)
    return mx.sum(mx.sin(grad_hook(h) if hooked else h))


g_plain = mx.grad(lambda x: loss(x, False))(x)
g_hooked = mx.grad(lambda x: loss(x, True))(x)
print("custom_function vjp saw a gradient of shape", seen[0], "and halved it:",
      mx.allclose(g_hooked, 0.5 * g_plain).item())
_, vjps = mx.vjp(lambda x: mx.sin(x), [x], [mx.ones_like(x)])
print("mx.vjp gives the gradient for a chosen cotangent:", mx.allclose(vjps[0], mx.cos(x)).item())

# saved tensors: mx.checkpoint recomputes the function's intermediates in backward instead of keeping them
calls = []


def block(x):
    calls.append(1)
    return mx.sin(mx.sin(x))


g1 = mx.grad(lambda x: mx.sum(block(x)))(x)
n_plain = len(calls)
calls.clear()
g2 = mx.grad(lambda x: mx.sum(mx.checkpoint(block)(x)))(x)
print("Python calls of the block: plain", n_plain, "checkpointed", len(calls), "same gradient:",
      mx.allclose(g1, g2).item())
'''

TF_EXAMPLE = r'''import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # keep TensorFlow's start-up log out of the output
os.environ["KERAS_BACKEND"] = "tensorflow"
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
inputs = keras.Input((4,))
hidden = keras.layers.Dense(8, activation="relu", name="fc1")(inputs)
model = keras.Model(inputs, keras.layers.Dense(2, name="fc2")(hidden))
x = np.linspace(-1.0, 1.0, 12, dtype="float32").reshape(3, 4)
y = model(x)
fc1, fc2 = model.get_layer("fc1"), model.get_layer("fc2")
print("Keras layer methods named like a hook:", [n for n in dir(fc1) if "hook" in n.lower() and not n.startswith("_")])

# forward hook, see: a second functional model over the same layers that also returns fc1's output
probe = keras.Model(inputs, [fc1.output, model.output])
h, y_probe = probe(x)
print("probe model returns fc1's output", tuple(h.shape), "and the same y:", bool(np.allclose(y_probe, y)))

# forward hook, replace: wrap the layer's call on this one instance
original_call = fc1.call
fc1.call = lambda *args, **kwargs: original_call(*args, **kwargs) * 2
y2 = model(x)
print("wrapped call doubled fc1's output:", bool(np.allclose(y2, fc2(2 * fc1.activation(original_call(x))))))
fc1.call = original_call

# backward hook, see: the tape gives the gradient at an intermediate tensor
with tf.GradientTape() as tape:
    h, y_probe = probe(x)
    loss = tf.reduce_sum(y_probe)
dh = tape.gradient(loss, h)
print("tape.gradient(loss, h) is dL/dh:", bool(np.allclose(dh, tf.ones_like(y_probe) @ tf.transpose(fc2.kernel))))

# backward hook, change: an identity with tf.custom_gradient
seen = []


@tf.custom_gradient
def grad_hook(t):
    def grad(g):
        seen.append(tuple(g.shape))
        return g * 0.5
    return tf.identity(t), grad


def loss_of(x, hooked):
    t = tf.tanh(x)
    return tf.reduce_sum(tf.sin(grad_hook(t) if hooked else t))


xv = tf.constant(x)
grads = []
for hooked in (False, True):
    with tf.GradientTape() as tape:
        tape.watch(xv)
        value = loss_of(xv, hooked)
    grads.append(tape.gradient(value, xv))
print("custom_gradient saw", seen[0], "and halved the gradient:", bool(np.allclose(grads[1], 0.5 * grads[0])))

# saved tensors: tf.recompute_grad keeps only the inputs and runs the function again in backward
calls = []


def block(t):
    calls.append(1)
    return tf.sin(tf.sin(t))


for wrap in (block, tf.recompute_grad(block)):
    calls.clear()
    with tf.GradientTape() as tape:
        tape.watch(xv)
        value = tf.reduce_sum(wrap(xv))
    g = tape.gradient(value, xv)
    print("calls of the block:", len(calls), "gradient is cos(sin x) cos x:",
          bool(np.allclose(g, tf.cos(tf.sin(xv)) * tf.cos(xv), atol=1e-6)))
'''

LIBTORCH_EXAMPLE = r'''import tempfile

import torch
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/torch.h>
#include <vector>

// Halves the gradient that reaches h = tanh(x); returns {plain grad, hooked grad, hook calls}.
std::vector<torch::Tensor> grad_hook(torch::Tensor x) {
  pybind11::gil_scoped_release no_gil;  // the autograd engine runs without Python's lock
  std::vector<torch::Tensor> grads;
  int64_t calls = 0;
  for (bool hooked : {false, true}) {
    auto leaf = x.detach().clone().requires_grad_(true);
    auto h = torch::tanh(leaf);
    if (hooked) {
      h.register_hook([&calls](torch::Tensor grad) { ++calls; return grad * 0.5; });
    }
    torch::sin(h).sum().backward();
    grads.push_back(leaf.grad());
  }
  grads.push_back(torch::tensor(calls));
  return grads;
}

// x * x that saves x in bfloat16 ("pack") and casts it back in backward ("unpack").
struct PackedSquare : torch::autograd::Function<PackedSquare> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x) {
    ctx->save_for_backward({x.to(torch::kBFloat16)});
    return x * x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto packed = ctx->get_saved_variables()[0];
    return {2 * packed.to(torch::kFloat) * grads[0]};
  }
};

std::vector<torch::Tensor> packed_square(torch::Tensor x) {
  pybind11::gil_scoped_release no_gil;
  auto leaf = x.detach().clone().requires_grad_(true);
  PackedSquare::apply(leaf).sum().backward();
  return {leaf.grad()};
}

// torch::nn::Module: is there a forward hook to register? (answered at compile time)
template <typename M, typename = void> struct has_hook : std::false_type {};
template <typename M>
struct has_hook<M, std::void_t<decltype(&M::register_forward_hook)>> : std::true_type {};
bool module_has_forward_hook() { return has_hook<torch::nn::Module>::value; }
"""

with tempfile.TemporaryDirectory() as build:
    ext = load_inline("hooklab_cpp_hooks", CPP, functions=["grad_hook", "packed_square", "module_has_forward_hook"],
                      build_directory=build, extra_cflags=["-O0"])
    x = torch.linspace(-1.0, 1.0, 12).reshape(3, 4)
    print("torch::nn::Module has register_forward_hook:", ext.module_has_forward_hook())
    plain, hooked, calls = ext.grad_hook(x)
    print("C++ register_hook ran", int(calls), "time and halved the gradient:", torch.allclose(hooked, 0.5 * plain))
    (grad,) = ext.packed_square(x)
    print("custom Function saved x in bfloat16; gradient close to 2x:", torch.allclose(grad, 2 * x, atol=1e-2),
          "but not exact:", not torch.equal(grad, 2 * x))
'''

ORT_EXAMPLE = r'''import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort
import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
x = torch.linspace(-1.0, 1.0, 12).reshape(3, 4)


def export(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's deprecation notice
        torch.onnx.export(net, (x,), path, dynamo=False, input_names=["x"], output_names=["y"])
    return onnx.load(path)


def session(model_or_path):
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


# the PyTorch side: a forward hook captures the ReLU's output; another one doubles it
captured = {}
handle = net[1].register_forward_hook(lambda m, args, out: captured.setdefault("relu", out.detach()))
with torch.no_grad():
    y_torch = net(x)
handle.remove()
double = net[1].register_forward_hook(lambda m, args, out: out * 2)
with torch.no_grad():
    y_doubled = net(x)

with tempfile.TemporaryDirectory() as folder:
    tmp = Path(folder)
    baked = export(tmp / "baked.onnx")  # exported while the doubling hook is registered
    double.remove()
    print("a forward hook present at export is traced into the graph:", [n.op_type for n in baked.graph.node])
    model = export(tmp / "net.onnx")
    print("ops without it:", [n.op_type for n in model.graph.node])
    relu_out = next(n.output[0] for n in model.graph.node if n.op_type == "Relu")

    # see: the intermediate value becomes one more graph output
    inferred = onnx.shape_inference.infer_shapes(model)
    model.graph.output.append(next(v for v in inferred.graph.value_info if v.name == relu_out))
    y_ort, relu_ort = session(model).run(["y", relu_out], {"x": x.numpy()})
    print("outputs:", [o.name for o in session(model).get_outputs()])
    print("ONNX Runtime's ReLU output == the forward hook's capture:",
          bool(np.allclose(relu_ort, captured["relu"], atol=1e-6)), "and y is unchanged:",
          bool(np.allclose(y_ort, y_torch, atol=1e-6)))

    # replace: cut the graph at that value and change it between the two halves
    onnx.utils.extract_model(str(tmp / "net.onnx"), str(tmp / "head.onnx"), ["x"], [relu_out])
    onnx.utils.extract_model(str(tmp / "net.onnx"), str(tmp / "tail.onnx"), [relu_out], ["y"])
    (relu,) = session(tmp / "head.onnx").run(None, {"x": x.numpy()})
    (y_cut,) = session(tmp / "tail.onnx").run(None, {relu_out: relu * 2})
    print("head ops:", [n.op_type for n in onnx.load(tmp / "head.onnx").graph.node],
          "tail ops:", [n.op_type for n in onnx.load(tmp / "tail.onnx").graph.node])
    print("doubling between the halves == the forward hook that returns out * 2:",
          bool(np.allclose(y_cut, y_doubled, atol=1e-6)), "== the graph with the hook baked in:",
          bool(np.allclose(y_cut, session(baked).run(None, {"x": x.numpy()})[0], atol=1e-6)))
    names = [n for n in dir(ort.InferenceSession) if not n.startswith("_")]
    print("InferenceSession methods named like a hook, callback or gradient:",
          [n for n in names if any(w in n.lower() for w in ("hook", "callback", "grad"))])
'''

FRAMEWORKS: list[Framework] = [
    Framework(
        name="jax", title="JAX / Flax", version="jax 0.10.2, flax 0.12.7",
        runs="overlay: jax[cpu]==0.10.2 flax==0.12.7",
        summary_en=("JAX differentiates functions, not modules, so nothing is registered on an object: the places to "
                    "look are Flax's method interceptors and collections, and JAX's own function transforms."),
        summary_zh=("JAX 求导的对象是函数而不是模块，没有可以挂钩子的对象：要找的是 Flax 的方法拦截器和变量集合，"
                    "以及 JAX 自己的函数变换。"),
        forward=Concept(
            ("flax.linen.intercept_methods", "capture_intermediates=True", "Module.sow", "nnx.capture"), "yes",
            "`nn.intercept_methods(interceptor)` is a context manager: inside it every call of a Flax module's method "
            "goes through `interceptor(next_fun, args, kwargs, context)`, which may change the arguments, the result, "
            "or skip the call (a forward pre-hook and a forward hook in one; `context.module` and "
            "`context.method_name` say where it is). To only look, `apply(..., capture_intermediates=True, "
            "mutable=['intermediates'])` records every submodule's output, and a module offers a value of its own "
            "with `self.sow('intermediates', name, value)`. Flax NNX has `Module.sow` and `nnx.capture` for the same.",
            "`nn.intercept_methods(interceptor)` 是一个上下文管理器：在它里面，Flax 模块的每一次方法调用都要经过 "
            "`interceptor(next_fun, args, kwargs, context)`，它可以改参数、改结果，也可以干脆不调用"
            "（相当于前向前置钩子和前向钩子合在一起；`context.module` 和 `context.method_name` 告诉它当前是哪个模块的哪个方法）。"
            "只想看一看的话，`apply(..., capture_intermediates=True, mutable=['intermediates'])` 会记下每个子模块的输出；"
            "模块自己也可以用 `self.sow('intermediates', name, value)` 主动交出一个值。Flax NNX 里对应的是 "
            "`Module.sow` 和 `nnx.capture`。"),
        backward=Concept(
            ("jax.custom_vjp", "Module.perturb", "jax.debug.callback"), "yes",
            "An array carries no hooks and no `.grad`: gradients are what `jax.grad` returns. To see or change the "
            "gradient at one point, put an identity function there whose `jax.custom_vjp` backward rule receives the "
            "cotangent and returns what should flow on (the example halves it); `jax.debug.callback` in that rule "
            "hands the value to Python, also under `jit`. Flax's `self.perturb(name, x)` adds a zero variable at `x`, "
            "so the gradient with respect to the `perturbations` collection is dL/dx.",
            "数组上没有钩子，也没有 `.grad`：梯度就是 `jax.grad` 的返回值。要在某一点查看或改写梯度，就在那里放一个恒等函数，"
            "用 `jax.custom_vjp` 给它写反向规则：规则拿到流过来的余切（cotangent），返回什么就往下传什么（示例里减半）；"
            "在规则里调用 `jax.debug.callback` 可以把这个值交给 Python，`jit` 之下也照样工作。Flax 的 "
            "`self.perturb(name, x)` 在 `x` 处加一个零变量，于是对 `perturbations` 集合求出的梯度就是 dL/dx。"),
        saved=Concept(
            ("jax.checkpoint", "jax.checkpoint_policies", "checkpoint_name", "print_saved_residuals", "jax.custom_vjp"),
            "partial",
            "What autograd saves is, in JAX, the residuals of the linearized function. `jax.checkpoint` (alias "
            "`jax.remat`) with a policy from `jax.checkpoint_policies` decides which residuals are kept and which are "
            "recomputed (`save_only_these_names` keeps the values tagged with `checkpoint_name`; "
            "`save_and_offload_only_these_names` moves them to host memory, the job of an offloading pack hook), and "
            "`jax.ad_checkpoint.print_saved_residuals` lists them. A `custom_vjp` forward rule returns its residuals "
            "itself, in any form: keeping `x` in bfloat16 and casting it back in the backward rule is a pack/unpack "
            "pair for that one function.",
            "PyTorch 里为反向保存的张量，在 JAX 里是线性化之后函数的残差（residual）。`jax.checkpoint`（别名 `jax.remat`）"
            "配合 `jax.checkpoint_policies` 里的策略，决定哪些残差留下、哪些在反向时重算：`save_only_these_names` "
            "只留下用 `checkpoint_name` 标过名的值，`save_and_offload_only_these_names` 把它们挪到主机内存"
            "（相当于做卸载的 pack 钩子）；`jax.ad_checkpoint.print_saved_residuals` 能列出留下了什么。"
            "`custom_vjp` 的前向规则自己返回残差，形式随意：以 bfloat16 保存 `x`、在反向规则里再转回来，"
            "就是只作用于这一个函数的一对 pack/unpack。"),
        missing_en=("No hook that applies to every saved value of every operation: a policy chooses keep, recompute "
                    "or offload, but cannot transform a residual; a transformation is written per function with "
                    "`custom_vjp`. No gradient-accumulation hook (there is no `.grad` to accumulate into). Plain "
                    "JAX code can be observed only where it offers a point (`sow`, `perturb`, `checkpoint_name`) "
                    "or by rewriting it; only Flax modules can be intercepted from outside."),
        missing_zh=("没有对每个操作的每个保存值都起作用的钩子：策略只能选择保留、重算或卸载，不能改写残差；要改写，"
                    "只能用 `custom_vjp` 逐个函数去写。没有梯度累加钩子（本来就没有可以累加进去的 `.grad`）。"
                    "纯 JAX 代码只能在它自己留出的地方观察（`sow`、`perturb`、`checkpoint_name`），否则就得改代码；"
                    "能从外部拦截的只有 Flax 模块。"),
        links=(("flax.linen.intercept_methods", FLAX + "linen/module.py#L327"),
               ("flax.linen.Module.apply(capture_intermediates=...)", FLAX + "linen/module.py#L2092-L2099"),
               ("flax.linen.Module.sow", FLAX + "linen/module.py#L2568"),
               ("flax.linen.Module.perturb", FLAX + "linen/module.py#L2655"),
               ("flax.nnx.Module.sow, nnx.capture", FLAX + "nnx/module.py#L85"),
               ("jax.custom_vjp, defvjp", JAX + "custom_derivatives.py#L551"),
               ("jax.debug.callback", JAX + "debugging.py#L426"),
               ("jax.checkpoint", JAX + "ad_checkpoint.py#L206"),
               ("jax.checkpoint_policies", JAX + "ad_checkpoint.py#L142-L188"),
               ("checkpoint_name", JAX + "ad_checkpoint.py#L922"),
               ("print_saved_residuals", JAX + "ad_checkpoint.py#L586")),
        runs_zh="在项目环境之上用 uv 叠加安装：jax[cpu]==0.10.2 flax==0.12.7",
        example=JAX_EXAMPLE, packages=("jax", "jaxlib", "flax")),
    Framework(
        name="mlx", title="MLX", version="mlx 0.32.1 (mlx-cpu)",
        runs="overlay: mlx[cpu]==0.32.1",
        summary_en=("MLX is built for Apple silicon; `mlx[cpu]` runs the same API on Linux. `mlx.nn.Module` is a "
                    "dict of its children and has no hook methods; gradients come from function transforms as in "
                    "JAX."),
        summary_zh=("MLX 为 Apple 芯片而写，`mlx[cpu]` 在 Linux 上提供同一套 API。`mlx.nn.Module` 是装着子模块的 "
                    "dict，没有任何钩子方法；梯度和 JAX 一样来自函数变换。"),
        forward=Concept(
            (), "no",
            "No forward hook. What people do instead: replace the child with a wrapper module that calls it and then "
            "looks at (or replaces) the output, `model.layers[0] = Wrapper(model.layers[0])`, and put the child back "
            "to remove it. The wrapper shows in the parameter tree (`layers.0.inner.weight`), so unwrap before saving "
            "weights. Assigning `__call__` on one instance does nothing: Python looks `__call__` up on the class.",
            "没有前向钩子。常见的替代做法是把子模块换成一个包装模块：它先调用原模块，再查看或替换输出，"
            "例如 `model.layers[0] = Wrapper(model.layers[0])`；把原模块放回去就等于移除。包装模块会出现在参数树里"
            "（`layers.0.inner.weight`），所以保存权重前要先拆掉包装。在单个实例上给 `__call__` 赋值不起作用："
            "Python 是在类上查找 `__call__` 的。"),
        backward=Concept(
            ("mx.custom_function", "custom_function.vjp", "mx.vjp"), "yes",
            "`mx.custom_function` turns a function into one whose gradient you define with `@f.vjp`: an identity with "
            "a custom vjp sees the cotangent at that point and returns the one to use (the example halves it). "
            "`mx.vjp(fun, primals, cotangents)` computes a vector-Jacobian product for a cotangent you choose.",
            "`mx.custom_function` 把一个函数包装起来，再用 `@f.vjp` 自己定义它的梯度：一个带自定义 vjp 的恒等函数"
            "能看到这一点的余切，并返回要继续往下传的值（示例里减半）。`mx.vjp(fun, primals, cotangents)` "
            "则对你指定的余切计算向量-雅可比积。"),
        saved=Concept(
            ("mx.checkpoint", "mlx.nn.utils.checkpoint"), "partial",
            "`mx.checkpoint(fun)` keeps only the function's inputs and runs it again during the backward pass (the "
            "example counts two Python calls instead of one); `mlx.nn.utils.checkpoint(module)` does it for a "
            "module. That chooses recompute over keep; what is kept cannot be transformed.",
            "`mx.checkpoint(fun)` 只保留函数的输入，反向时把函数再算一遍（示例里 Python 调用次数从 1 次变成 2 次）；"
            "`mlx.nn.utils.checkpoint(module)` 对模块做同样的事。它只能在“保留”和“重算”之间选择，"
            "没法改写保留下来的东西。"),
        missing_en=("No hook API at all: `mlx.nn.Module` and arrays have no `register_*` method (the example lists "
                    "them), so a module can be observed from outside only by replacing it. No pack/unpack of saved "
                    "values; recompute (`mx.checkpoint`) is the only control over them."),
        missing_zh=("完全没有钩子 API：`mlx.nn.Module` 和数组都没有 `register_*` 方法（示例列出来看过），"
                    "要从外部观察一个模块只能把它替换掉。保存的值没有 pack/unpack；对它们唯一的控制是重算"
                    "（`mx.checkpoint`）。"),
        links=(("mlx.nn.Module (a dict, no hook methods)", MLX + "python/mlx/nn/layers/base.py#L12"),
               ("mlx.core.custom_function", MLX + "python/src/transforms.cpp#L1027-L1029"),
               ("custom_function.vjp", MLX + "python/src/transforms.cpp#L1105"),
               ("mlx.core.vjp", MLX + "python/src/transforms.cpp#L1276"),
               ("mlx.core.checkpoint", MLX + "python/src/transforms.cpp#L1523"),
               ("mlx.nn.utils.checkpoint", MLX + "python/mlx/nn/utils.py#L41"),
               ("C++: custom_vjp, checkpoint", MLX + "mlx/transforms.h#L217-L228")),
        runs_zh="在项目环境之上用 uv 叠加安装：mlx[cpu]==0.32.1",
        example=MLX_EXAMPLE, packages=("mlx", "mlx-cpu")),
    Framework(
        name="tensorflow", title="TensorFlow / Keras 3", version="tensorflow-cpu 2.21.0, keras 3.15.1",
        runs="overlay: tensorflow-cpu==2.21.0",
        summary_en=("Keras layers have no hooks; TensorFlow computes gradients with a `tf.GradientTape` that records "
                    "the operations run inside it."),
        summary_zh="Keras 的层没有钩子；TensorFlow 用 `tf.GradientTape` 记录在它里面执行的操作，再据此求梯度。",
        forward=Concept(
            ("keras.Model", "layer.output", "layer.call"), "partial",
            "To see: build a second functional model over the same layers that also returns the intermediate "
            "(`keras.Model(inputs, [fc1.output, model.output])`), the usual Keras feature extractor. To replace: "
            "wrap `layer.call` on that instance (the example doubles `fc1`'s output), or swap in a wrapper layer. A "
            "model subclassed with its own `call` has no `layer.output` to tap, so only wrapping works there.",
            "查看：在同一组层上再搭一个函数式模型，让它顺带返回中间结果（`keras.Model(inputs, [fc1.output, model.output])`），"
            "这是 Keras 做特征提取的惯用写法。替换：在这个实例上包一层 `layer.call`（示例把 `fc1` 的输出加倍），"
            "或者换上一个包装层。自己写 `call` 的子类模型没有可以接出来的 `layer.output`，只能用包装。"),
        backward=Concept(
            ("tf.GradientTape.gradient", "tf.custom_gradient", "keras.ops.custom_gradient"), "yes",
            "To see: `tape.gradient(loss, h)` returns the gradient at an intermediate tensor `h` computed inside the "
            "tape. To change: an identity decorated with `tf.custom_gradient` returns its own `grad(g)` (the example "
            "halves it); `keras.ops.custom_gradient` is the backend-neutral form.",
            "查看：`tape.gradient(loss, h)` 返回磁带里算出的中间张量 `h` 处的梯度。改写：用 `tf.custom_gradient` "
            "装饰一个恒等函数，由它返回自己的 `grad(g)`（示例里减半）；`keras.ops.custom_gradient` "
            "是与后端无关的写法。"),
        saved=Concept(
            ("tf.recompute_grad", "keras.RematScope", "keras.remat"), "partial",
            "`tf.recompute_grad(f)` keeps only `f`'s inputs and runs it again in the backward pass (the example "
            "counts the calls); Keras 3 has `keras.RematScope` and `keras.remat` for the same per layer. The tape "
            "keeps what it needs; there is no pack/unpack hook on it.",
            "`tf.recompute_grad(f)` 只保留 `f` 的输入，反向时再算一遍（示例数了调用次数）；Keras 3 用 "
            "`keras.RematScope` 和 `keras.remat` 按层做同样的事。磁带需要什么就留什么，没有可以挂上去的 pack/unpack 钩子。"),
        missing_en=("No `register_forward_hook` or anything like it: a Keras layer has no hook method (the example "
                    "lists them). No hook on a tensor: tensors have no `.grad` and no hook list; the tape returns "
                    "gradients. No pack/unpack of what the tape keeps."),
        missing_zh=("没有 `register_forward_hook` 之类的东西：Keras 层没有任何钩子方法（示例列出来看过）。张量上没有钩子："
                    "张量没有 `.grad`，也没有钩子列表，梯度由磁带返回。磁带保留的东西没有 pack/unpack。"),
        links=(("keras Layer.__call__", KERAS + "layers/layer.py#L873"),
               ("keras Layer.call", KERAS + "layers/layer.py#L1062"),
               ("keras.ops.custom_gradient", KERAS + "ops/core.py#L1223"),
               ("keras.RematScope", KERAS + "backend/common/remat.py#L9"),
               ("keras.remat", KERAS + "backend/common/remat.py#L138"),
               ("tf.custom_gradient", TF + "ops/custom_gradient.py#L46"),
               ("tf.recompute_grad", TF + "ops/custom_gradient.py#L601"),
               ("tf.GradientTape.watch", TF + "eager/backprop.py#L864"),
               ("tf.GradientTape.gradient", TF + "eager/backprop.py#L960")),
        runs_zh="在项目环境之上用 uv 叠加安装：tensorflow-cpu==2.21.0（它带来 keras 3.15.1）",
        example=TF_EXAMPLE, packages=("tensorflow-cpu", "keras")),
    Framework(
        name="libtorch", title="libtorch (PyTorch C++)", version="torch 2.15.0",
        runs="project env", needs="c++",
        summary_en=("The C++ frontend shares PyTorch's autograd, so tensor hooks exist; the C++ `torch::nn::Module` "
                    "has none of the Python module's hooks. The example is compiled with "
                    "`torch.utils.cpp_extension.load_inline` (a C++ compiler is needed; the tests skip it without "
                    "one)."),
        summary_zh=("C++ 前端和 PyTorch 共用同一个 autograd，所以张量钩子是有的；但 C++ 的 `torch::nn::Module` 没有 "
                    "Python 模块上的任何钩子。示例用 `torch.utils.cpp_extension.load_inline` 编译"
                    "（需要 C++ 编译器；没有编译器时测试会跳过它）。"),
        forward=Concept(
            (), "no",
            "`torch::nn::Module` has no forward or pre-forward hook (module.h declares none; the example checks at "
            "compile time). Instead: wrap the submodule in a module of your own whose `forward` calls it and then "
            "your code, or call the children one by one in the parent's `forward`.",
            "`torch::nn::Module` 没有前向钩子，也没有前向前置钩子（module.h 里一个都没有声明；示例在编译期检查过）。"
            "替代做法：自己写一个模块把子模块包起来，在它的 `forward` 里先调用子模块、再执行自己的代码；"
            "或者在父模块的 `forward` 里逐个调用子模块。"),
        backward=Concept(
            ("at::Tensor::register_hook", "remove_hook"), "yes",
            "`tensor.register_hook(fn)` is the same hook as Python's: `fn` receives the gradient with respect to "
            "that tensor and may return a replacement (the example halves it); it returns an index for "
            "`remove_hook`. Module backward hooks do not exist; a custom `torch::autograd::Function` defines a "
            "whole backward of its own.",
            "`tensor.register_hook(fn)` 就是 Python 里的那个钩子：`fn` 收到关于这个张量的梯度，可以返回一个替代值"
            "（示例里减半）；它返回一个编号，交给 `remove_hook` 移除。模块反向钩子不存在；自定义的 "
            "`torch::autograd::Function` 可以写一整段自己的反向。"),
        saved=Concept(
            ("torch::autograd::Function", "ctx->save_for_backward", "at::SavedTensorDefaultHooks"), "partial",
            "`at::SavedTensorDefaultHooks::push_hooks` takes two `c10::SafePyObject`s: it is the plumbing of "
            "Python's `torch.autograd.graph.saved_tensors_hooks`, with no C++ function to push. The C++ interface "
            "`SavedVariableHooks` can be attached to one `SavedVariable` with `register_hooks`, which is reached "
            "only through autograd's generated node classes. What a C++ program does: a custom "
            "`torch::autograd::Function` saves what it chooses with `ctx->save_for_backward`, in any form (the "
            "example keeps `x` in bfloat16 and casts it back).",
            "`at::SavedTensorDefaultHooks::push_hooks` 接收的是两个 `c10::SafePyObject`：它是 Python 的 "
            "`torch.autograd.graph.saved_tensors_hooks` 在底层的实现，没有可以推入 C++ 函数的接口。C++ 接口 "
            "`SavedVariableHooks` 可以用 `register_hooks` 挂到单个 `SavedVariable` 上，但只能经由 autograd "
            "生成的节点类拿到它。C++ 程序实际的做法是：自定义 `torch::autograd::Function`，用 "
            "`ctx->save_for_backward` 保存自己选定的东西，形式随意（示例以 bfloat16 保存 `x`，反向时再转回来）。"),
        missing_en=("Module forward, pre-forward, backward and state-dict hooks; default saved-tensor hooks written "
                    "in C++. Only the tensor-level hook and custom autograd functions carry over."),
        missing_zh=("模块的前向、前向预、反向和 state_dict 钩子；用 C++ 写的默认保存张量的钩子。能照搬过来的只有张量级钩子"
                    "和自定义 autograd 函数。"),
        links=(("torch::nn::Module (module.h: no hooks)", TORCH + "torch/csrc/api/include/torch/nn/module.h#L64"),
               ("TensorBase::register_hook", TORCH + "aten/src/ATen/core/TensorBase.h#L872"),
               ("TensorBase::register_hook (definition)", TORCH + "aten/src/ATen/core/TensorBase.h#L933-L940"),
               ("at::SavedTensorDefaultHooks::push_hooks", TORCH + "aten/src/ATen/SavedTensorHooks.h#L34-L37"),
               ("torch::autograd::SavedVariableHooks", TORCH + "torch/csrc/autograd/saved_variable_hooks.h#L9-L16"),
               ("SavedVariable::register_hooks", TORCH + "torch/csrc/autograd/saved_variable.h#L50"),
               ("torch::autograd::Function", TORCH + "torch/csrc/autograd/custom_function.h#L118"),
               ("AutogradContext::save_for_backward", TORCH + "torch/csrc/autograd/custom_function.h#L156"),
               ("torch.utils.cpp_extension.load_inline", TORCH + "torch/utils/cpp_extension.py#L2162")),
        runs_zh="项目环境（另需 C++ 编译器）",
        example=LIBTORCH_EXAMPLE),
    Framework(
        name="torchsharp", title="TorchSharp (.NET)", version="TorchSharp 0.106.0",
        runs="source only: needs the .NET SDK, which this project's machines do not have",
        summary_en=("TorchSharp binds libtorch for .NET and adds module forward hooks of its own, written in C#; "
                    "below the module it has what libtorch has, minus tensor hooks."),
        summary_zh=("TorchSharp 是 libtorch 的 .NET 绑定，并用 C# 自己实现了模块前向钩子；模块之下的能力和 libtorch "
                    "相同，只是少了张量钩子。"),
        forward=Concept(
            ("Module<T,TResult>.register_forward_hook", "register_forward_pre_hook", "HookRemover.remove"), "yes",
            "`register_forward_hook(Func<Module<T,TResult>, T, TResult, TResult>)` and "
            "`register_forward_pre_hook(Func<Module<T,TResult>, T, T>)` return a `HookRemover` whose `remove()` "
            "takes the hook off; a non-null return value replaces the result (or the input). They run in `call(...)` "
            "and not in `forward(...)`, as Python's run in `__call__`: code that calls `forward` directly skips "
            "them. Overloads taking `Action<Module>` only learn that the module runs.",
            "`register_forward_hook(Func<Module<T,TResult>, T, TResult, TResult>)` 和 "
            "`register_forward_pre_hook(Func<Module<T,TResult>, T, T>)` 返回一个 `HookRemover`，调用它的 `remove()` "
            "即可移除；钩子返回非 null 的值就会替换结果（或输入）。它们在 `call(...)` 里执行，而不是在 `forward(...)` "
            "里，和 Python 的钩子在 `__call__` 里执行一样：直接调用 `forward` 的代码会跳过它们。接收 `Action<Module>` "
            "的重载只能得知模块被调用了。"),
        backward=Concept(
            ("Tensor.retain_grad", "torch.autograd.SingleTensorFunction<T>"), "partial",
            "No `register_hook` on a C# `Tensor` and no module backward hooks (the source defines neither). To see a "
            "non-leaf gradient, `retain_grad()` keeps it in `.grad`; to change one, a custom "
            "`torch.autograd.SingleTensorFunction<T>` defines `backward` itself.",
            "C# 的 `Tensor` 上没有 `register_hook`，也没有模块反向钩子（源码里两者都没有定义）。要看非叶子张量的梯度，"
            "用 `retain_grad()` 把它留在 `.grad` 里；要改梯度，就写一个自定义的 "
            "`torch.autograd.SingleTensorFunction<T>`，由它自己定义 `backward`。"),
        saved=Concept(
            ("AutogradContext.save_for_backward",), "partial",
            "No saved-tensor hooks. In a custom `torch.autograd.Function<T>`, `ctx.save_for_backward(...)` saves the "
            "tensors you choose, in the form you choose.",
            "没有保存张量的钩子。在自定义的 `torch.autograd.Function<T>` 里，`ctx.save_for_backward(...)` "
            "保存你选定的张量，形式也由你决定。"),
        missing_en=("Tensor hooks, module backward hooks, saved-tensor hooks and state-dict hooks. The forward hooks "
                    "are TorchSharp's own C# code, not libtorch's."),
        missing_zh="张量钩子、模块反向钩子、保存张量的钩子和 state_dict 钩子。前向钩子是 TorchSharp 自己的 C# 代码，不是 libtorch 的。",
        links=(("HookableModule.register_forward_hook / register_forward_pre_hook",
                SHARP + "NN/Module.cs#L1297-L1330"),
               ("Module<T,TResult>.call runs the hooks, forward does not", SHARP + "NN/Module.cs#L1383-L1418"),
               ("Tensor.retain_grad", SHARP + "Tensor/Tensor.cs#L753"),
               ("torch.autograd.Function<T>", SHARP + "AutogradFunction.cs#L443"),
               ("AutogradContext.save_for_backward", SHARP + "AutogradFunction.cs#L344")),
        runs_zh="只读源码：需要 .NET SDK，本项目的机器上没有"),
    Framework(
        name="onnxruntime", title="ONNX Runtime", version="onnxruntime 1.32.0, onnx 1.23.2",
        runs="project env",
        summary_en=("ONNX Runtime runs an exported graph for inference: no callbacks while it runs, no backward "
                    "pass. What it computes can still be seen and changed, by editing the graph."),
        summary_zh=("ONNX Runtime 只为推理运行导出的计算图：运行时没有回调，也没有反向传播。不过它算出的中间值仍然"
                    "可以查看和改写，办法是修改计算图。"),
        forward=Concept(
            ("graph.output", "InferenceSession.run", "onnx.utils.extract_model", "onnxruntime_DEBUG_NODE_INPUTS_OUTPUTS"),
            "partial",
            "To see: add the intermediate value's name to the graph's outputs and ask `InferenceSession.run` for it "
            "(the example matches PyTorch's forward-hook capture). To replace: cut the graph with "
            "`onnx.utils.extract_model` into a head ending at that value and a tail starting from it, and change the "
            "tensor between the two sessions. A forward hook registered when the model is exported is traced into "
            "the graph (the example finds its `Mul`). A build of ONNX Runtime with "
            "`onnxruntime_DEBUG_NODE_INPUTS_OUTPUTS` dumps every node's inputs and outputs, chosen by "
            "`ORT_DEBUG_NODE_IO_*` environment variables.",
            "查看：把中间值的名字加进图的输出，再向 `InferenceSession.run` 要它（示例与 PyTorch 前向钩子捕获的值一致）。"
            "替换：用 `onnx.utils.extract_model` 把图切成两段，前一段以这个值结束、后一段从它开始，在两个会话之间改写它。"
            "导出时已经注册着的前向钩子会被追踪进计算图（示例在图里找到了它的 `Mul`）。用 "
            "`onnxruntime_DEBUG_NODE_INPUTS_OUTPUTS` 编译的 ONNX Runtime 会转储每个节点的输入和输出，"
            "由 `ORT_DEBUG_NODE_IO_*` 环境变量控制。"),
        backward=Concept(
            (), "no",
            "Inference runs no backward pass, so there is no gradient to hook. Gradient hooks belong to the framework "
            "that trains the model, before export.",
            "推理不做反向传播，没有可以挂钩子的梯度。梯度钩子属于导出之前训练模型的那个框架。"),
        saved=Concept(
            (), "no",
            "Nothing is saved for a backward pass that does not exist.",
            "没有反向传播，也就没有为它保存的东西。"),
        missing_en=("Any callback during `run`, changing a value inside one session, gradients and saved tensors. "
                    "The InferenceSession has no method named like a hook or a callback (the example lists them)."),
        missing_zh=("`run` 过程中的任何回调、在同一个会话内部改写某个值、梯度以及保存的张量。InferenceSession "
                    "没有名字像钩子或回调的方法（示例列出来看过）。"),
        links=(("onnx.utils.extract_model", "https://github.com/onnx/onnx/blob/v1.23.2/onnx/utils.py#L194"),
               ("InferenceSession.run(output_names, ...)",
                ORT + "v1.32.0/onnxruntime/python/onnxruntime_inference_collection.py#L383"),
               ("onnxruntime_DEBUG_NODE_INPUTS_OUTPUTS, ORT_DEBUG_NODE_IO_*", ORT
                + "054142331d5fd28133fce89445f255cbb40bbbfa/onnxruntime/core/framework/"
                  "debug_node_inputs_outputs_utils.h#L4-L13"),
               ("torch.onnx.export", TORCH + "torch/onnx/__init__.py#L65")),
        runs_zh="项目环境",
        example=ORT_EXAMPLE, packages=("onnxruntime", "onnx")),
    Framework(
        name="llama-cpp", title="llama.cpp / ggml", version="llama.cpp 4df29be (llama-cpp-python 0.3.35)",
        runs="source only: needs a C++ build of llama.cpp and a GGUF model file; no model weights are downloaded",
        summary_en=("llama.cpp builds a ggml graph per batch and hands it to the backend scheduler, which can call "
                    "you back for every node: the closest thing to a forward hook, used by `llama-imatrix` and the "
                    "`eval-callback` example."),
        summary_zh=("llama.cpp 为每个批次构建一张 ggml 计算图，交给后端调度器执行；调度器可以在每个节点上回调你的函数。"
                    "这是最接近前向钩子的东西，`llama-imatrix` 和 `eval-callback` 示例用的就是它。"),
        forward=Concept(
            ("llama_context_params.cb_eval", "ggml_backend_sched_eval_callback", "llama_set_adapter_cvec"), "partial",
            "`cb_eval(struct ggml_tensor * t, bool ask, void * user_data)` is called twice per graph node: with "
            "`ask == true` the scheduler asks whether you want this node (answer false and it computes on without "
            "stopping); with `ask == false` the node has been computed and `t` holds it, to be read with "
            "`ggml_backend_tensor_get` when it is not in host memory; returning false cancels the compute. Nodes are "
            "named `name-layer` (`ffn_inp-5`). `llama-imatrix` asks only for matrix multiplications and sums their "
            "squared inputs; `eval-callback` prints every tensor. To change activations, llama.cpp offers control "
            "vectors (`llama_set_adapter_cvec`), added per layer, not a callback that returns a value.",
            "`cb_eval(struct ggml_tensor * t, bool ask, void * user_data)` 在每个图节点上被调用两次：`ask == true` "
            "时调度器问你要不要这个节点（回答 false，它就接着往下算，不停下来）；`ask == false` 时节点已经算完，"
            "`t` 里就是结果，不在主机内存时要用 `ggml_backend_tensor_get` 读出；这时返回 false 会取消整个计算。"
            "节点名形如 `name-layer`（`ffn_inp-5`）。`llama-imatrix` 只要矩阵乘法节点，累加它们输入的平方；"
            "`eval-callback` 打印每一个张量。要改激活值，llama.cpp 提供的是控制向量（`llama_set_adapter_cvec`），"
            "逐层加到激活上，而不是一个能返回新值的回调。"),
        backward=Concept(
            (), "no",
            "Inference has no backward pass. llama.cpp's fine-tuning API (`llama_opt_init`, `llama_opt_epoch`) "
            "trains through ggml-opt, whose `ggml_opt_epoch_callback` reports progress per batch, not gradients.",
            "推理没有反向传播。llama.cpp 的微调 API（`llama_opt_init`、`llama_opt_epoch`）通过 ggml-opt 训练，"
            "它的 `ggml_opt_epoch_callback` 按批次报告进度，拿不到梯度。"),
        saved=Concept(
            (), "no",
            "No backward pass during inference, so nothing is saved for one.",
            "推理时没有反向传播，也就没有为它保存的东西。"),
        missing_en=("Gradient hooks, saved-tensor hooks, and replacing a node's value from the callback (the "
                    "callback observes or cancels). Hook points are graph nodes by name, not modules."),
        missing_zh=("梯度钩子、保存张量的钩子，以及在回调里替换节点的值（回调只能观察或取消）。钩子点是按名字区分的图节点，"
                    "而不是模块。"),
        links=(("llama_context_params.cb_eval", LLAMA + "include/llama.h#L378-L379"),
               ("ggml_backend_sched_eval_callback (ask, then observe)", LLAMA + "ggml/include/ggml-backend.h#L309-L316"),
               ("the scheduler calls it per node", LLAMA + "ggml/src/ggml-backend.cpp#L1735-L1765"),
               ("node names: name-layer", LLAMA + "src/llama-context.cpp#L2503-L2509"),
               ("llama-imatrix: collect_imatrix", LLAMA + "tools/imatrix/imatrix.cpp#L234-L252"),
               ("llama-imatrix sets cb_eval", LLAMA + "tools/imatrix/imatrix.cpp#L1154-L1155"),
               ("eval-callback example", LLAMA + "examples/eval-callback/eval-callback.cpp#L53-L56"),
               ("common_debug_cb_eval", LLAMA + "common/debug.cpp#L143"),
               ("llama_set_adapter_cvec (control vectors)", LLAMA + "include/llama.h#L710-L722"),
               ("llama_opt_init, llama_opt_epoch", LLAMA + "include/llama.h#L1614-L1623"),
               ("ggml_opt_epoch_callback", LLAMA + "ggml/include/ggml-opt.h#L208-L216")),
        runs_zh="只读源码：需要编译 llama.cpp（C++），还需要一个 GGUF 模型文件；本项目不下载模型权重"),
]


# The examples' comments in Chinese: the Chinese site's page and the Chinese program show the same code with these
# comments (example_in), so nothing of the code differs between the languages; tests check every comment has one.
COMMENTS_ZH = {
    "the module itself offers a value to whoever asks": "模块自己把一个值交给需要它的人",
    "a zero added here: its gradient is dL/dh": "在这里加一个零：它的梯度就是 dL/dh",
    "forward hook, see: every submodule's output, and what the module sowed":
        "前向钩子，查看：每个子模块的输出，以及模块用 sow 交出的值",
    "forward hook, replace: an interceptor around every module method call":
        "前向钩子，替换：包住每一次模块方法调用的拦截器",
    "backward hook, see: the gradient of the zero perturbation is the gradient at h":
        "反向钩子，查看：那个零扰动的梯度就是 h 处的梯度",
    "backward hook, change: an identity whose custom VJP sees and scales the gradient flowing through it":
        "反向钩子，修改：一个恒等函数，它自定义的 VJP 看到并缩放流过它的梯度",
    "runs on the host, also under jit": "在主机上运行，在 jit 下也一样",
    "saved tensors: what jax.checkpoint keeps for the backward pass is chosen by a policy":
        "保存的张量：jax.checkpoint 为反向保留什么，由一个策略决定",
    "without the source file and line": "去掉源文件和行号",
    "saved tensors, pack/unpack: a custom VJP decides what its forward keeps and in which form":
        "保存的张量，打包 / 解包：自定义的 VJP 决定它的前向保留什么、以什么形式保留",
    '"pack": keep x in bfloat16': "“打包”：把 x 存成 bfloat16",
    '"unpack": back to float32': "“解包”：转回 float32",
    "forward hook, see and replace: swap the child for a wrapper (a Module is a dict of its children)":
        "前向钩子，查看和替换：把子模块换成一个包装（Module 就是它的子模块组成的字典）",
    '"remove" the hook: put the child back': "“移除”钩子：把子模块放回去",
    "an instance attribute: Python looks __call__ up on the class": "实例属性不行：Python 在类上查找 __call__",
    "backward hook: a custom_function identity whose vjp sees and scales the gradient":
        "反向钩子：一个 custom_function 恒等函数，它的 vjp 看到并缩放梯度",
    "saved tensors: mx.checkpoint recomputes the function's intermediates in backward instead of keeping them":
        "保存的张量：mx.checkpoint 不保留函数的中间结果，而是在反向时重新计算",
    "keep TensorFlow's start-up log out of the output": "不让 TensorFlow 的启动日志混进输出",
    "forward hook, see: a second functional model over the same layers that also returns fc1's output":
        "前向钩子，查看：在同一组层上再建一个函数式模型，让它也返回 fc1 的输出",
    "forward hook, replace: wrap the layer's call on this one instance": "前向钩子，替换：只在这一个实例上包住层的调用",
    "backward hook, see: the tape gives the gradient at an intermediate tensor": "反向钩子，查看：tape 给出中间张量处的梯度",
    "backward hook, change: an identity with tf.custom_gradient": "反向钩子，修改：一个带 tf.custom_gradient 的恒等函数",
    "saved tensors: tf.recompute_grad keeps only the inputs and runs the function again in backward":
        "保存的张量：tf.recompute_grad 只保留输入，反向时再运行一遍函数",
    "the TorchScript-based exporter's deprecation notice": "基于 TorchScript 的导出器给出的弃用提示",
    "the PyTorch side: a forward hook captures the ReLU's output; another one doubles it":
        "PyTorch 这边：一个前向钩子截取 ReLU 的输出，另一个把它加倍",
    "exported while the doubling hook is registered": "在加倍的钩子注册着的时候导出",
    "see: the intermediate value becomes one more graph output": "查看：中间值成为图的又一个输出",
    "replace: cut the graph at that value and change it between the two halves": "替换：在这个值处把图切开，在两半之间修改它",
    "Halves the gradient that reaches h = tanh(x); returns {plain grad, hooked grad, hook calls}.":
        "把到达 h = tanh(x) 的梯度减半；返回 {不加钩子的梯度, 加了钩子的梯度, 钩子调用次数}。",
    "the autograd engine runs without Python's lock": "autograd 引擎运行时不持有 Python 的锁",
    'x * x that saves x in bfloat16 ("pack") and casts it back in backward ("unpack").':
        "x * x：把 x 存成 bfloat16（“打包”），反向时再转回来（“解包”）。",
    "torch::nn::Module: is there a forward hook to register? (answered at compile time)":
        "torch::nn::Module：有没有前向钩子可以注册？（在编译时回答）",
}
_COMMENT = re.compile(r"(?m)(?P<mark>(?<![:\w])#(?![\w!])|//) (?P<text>[^\n]*)$")


def example_in(example: str, lang: str) -> str:
    """An example with its comments (``# ...`` in Python, ``// ...`` in the C++ it compiles) in ``lang``; the code is
    the same. A comment with no Chinese raises, naming it."""
    if lang == "en":
        return example

    def swap(m: re.Match[str]) -> str:
        text = m.group("text")
        if text not in COMMENTS_ZH:
            raise KeyError(f"the example comment {text!r} has no Chinese in COMMENTS_ZH")
        return f"{m.group('mark')} {COMMENTS_ZH[text]}"
    return _COMMENT.sub(swap, example)
