"""vllm: the model runs in worker processes, compiled with ``torch.compile`` (guards dropped) and replayed from CUDA
graphs; the API process holds no model to hook. ``LLM.apply_model`` / ``collective_rpc`` run your function next to the
model; logits are changed through ``LogitsProcessor`` classes. Read from the source: it needs a GPU build."""
from __future__ import annotations

from ..spec import Library

SRC = "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/"
LIBRARY = Library(
    slug="vllm", name="vllm", status="source", category="serving",
    entry="vllm.LLM(model=..., enforce_eager=True).apply_model(lambda model: ...)",
    names=("LLM", "apply_model", "collective_rpc", "WorkerBase", "TorchCompileWithNoGuardsWrapper",
           "skip_all_guards_unsafe", "support_torch_compile", "enforce_eager", "CompilationMode", "CUDAGraphMode",
           "VLLM_ALLOW_INSECURE_SERIALIZATION", "VLLM_ENABLE_V1_MULTIPROCESSING", "LogitsProcessor",
           "logits_processors", "enable_layerwise_nvtx_tracing"),
    sources=(SRC + "entrypoints/llm.py#L573-L614", SRC + "v1/engine/llm_engine.py#L503-L504",
             SRC + "v1/worker/worker_base.py#L165-L167", SRC + "v1/serial_utils.py#L220-L225",
             SRC + "compilation/wrapper.py#L64-L70", SRC + "compilation/wrapper.py#L125-L145",
             SRC + "config/vllm.py#L1766-L1768", SRC + "v1/sample/logits_processor/interface.py#L60-L100",
             SRC + "utils/nvtx_pytorch_hooks.py#L273-L279", SRC + "compilation/decorators.py#L411-L416",
             SRC + "compilation/decorators.py#L533-L538", SRC + "compilation/decorators.py#L765"),
    why_source={"en": "vLLM's engine needs a GPU build (CUDA kernels, a real model); read from the v0.33.0 release "
                      "(the PyPI wheel's sources, which match tag v0.33.0).",
                "zh": "vLLM 的引擎需要 GPU 版本（CUDA 算子、真实模型）；按 v0.33.0 版本阅读源码（PyPI 轮子里的源码，"
                      "与 v0.33.0 标签一致）。"},
    installs=(
        {"where": "every module except dropout-like ones (worker process)", "kind": "forward_pre + forward",
         "what": "only with `enable_layerwise_nvtx_tracing`: NVTX range push/pop hooks for profiling"},
    ),
    order={"en": "The only way to register a hook is inside a worker, e.g. `llm.apply_model(lambda m: "
                 "m.model.layers[0].register_forward_hook(h))`. By then the forward has been compiled once by "
                 "`TorchCompileWithNoGuardsWrapper`, which drops every Dynamo guard, so Dynamo never retraces and "
                 "a hook added later is not in the compiled code; batches replayed from CUDA graphs run no Python "
                 "at all. With `enforce_eager=True` (compilation mode NONE, CUDA graphs off) the model runs eagerly "
                 "and the hook fires in the worker on every forward, prefill and each decode step alike, except on the "
                 "module whose class carries `@support_torch_compile` (e.g. `LlamaModel`, at `model.model`): the "
                 "decorator replaces that class's `__call__`, which calls `self.forward` directly, so that module's "
                 "own hooks never run, eager or not.",
           "zh": "唯一能注册钩子的地方是 worker 内部，例如 `llm.apply_model(lambda m: "
                 "m.model.layers[0].register_forward_hook(h))`。这时前向已经被 `TorchCompileWithNoGuardsWrapper` "
                 "编译过一次，它丢掉了 Dynamo 的所有 guard，Dynamo 不会重新追踪，后加的钩子不在编译好的代码里；"
                 "从 CUDA graph 重放的 batch 更是完全不执行 Python。设 `enforce_eager=True`（编译模式为 NONE、"
                 "关闭 CUDA graph）后模型按 eager 执行，钩子在 worker 里每次前向都会触发，prefill 和每个 decode "
                 "步都一样；唯一的例外是类上带 `@support_torch_compile` 的那个模块（例如 `model.model` 处的 "
                 "`LlamaModel`）：装饰器替换了这个类的 `__call__`，直接调用 `self.forward`，所以无论是否 eager，"
                 "它自己的钩子都不会运行。"},
    words={
        "en": {"summary": "vLLM runs the model in worker processes (`VLLM_ENABLE_V1_MULTIPROCESSING=1` by "
                          "default), so the `LLM` object has no module to hook. `apply_model(fn)` is "
                          "`collective_rpc(\"apply_model\", args=(fn,))`: each worker calls `fn(model)`; a function "
                          "(not a method name) crosses the process boundary only with "
                          "`VLLM_ALLOW_INSECURE_SERIALIZATION=1` (pickle). A hook registered that way runs only "
                          "if the model runs eagerly (`enforce_eager=True`); under the default compilation (guards "
                          "dropped) and CUDA graphs it is silently skipped. Results must come back through the "
                          "RPC's return value or the worker's own files.",
               "remove": "Remove it the same way, from inside the worker: keep the handle in the worker (e.g. on "
                         "the module) and call `llm.apply_model(lambda m: m._my_handle.remove())`.",
               "api": "`LLM.collective_rpc(method_or_callable, args=..., kwargs=...)`, `LLM.apply_model(fn)`; for "
                      "logits, a `LogitsProcessor` subclass (`validate_params`, `update_state`, `apply(logits)`, "
                      "`is_argmax_invariant`) passed as `logits_processors=[...]` when the engine is built."},
        "zh": {"summary": "vLLM 在 worker 进程里运行模型（默认 `VLLM_ENABLE_V1_MULTIPROCESSING=1`），`LLM` 对象上"
                          "没有可以挂钩子的模块。`apply_model(fn)` 就是 `collective_rpc(\"apply_model\", args=(fn,))`："
                          "每个 worker 调用 `fn(model)`；要把函数（而不是方法名）送过进程边界，必须设 "
                          "`VLLM_ALLOW_INSECURE_SERIALIZATION=1`（走 pickle）。这样注册的钩子只有在模型以 eager 方式"
                          "运行（`enforce_eager=True`）时才会执行；在默认的编译（丢掉 guard）和 CUDA graph 下它会被"
                          "悄无声息地跳过。结果只能通过 RPC 的返回值或 worker 自己写的文件拿回来。",
               "remove": "同样要在 worker 里移除：把句柄留在 worker 里（比如存在模块上），再调用 "
                         "`llm.apply_model(lambda m: m._my_handle.remove())`。",
               "api": "`LLM.collective_rpc(method_or_callable, args=..., kwargs=...)`、`LLM.apply_model(fn)`；"
                      "改 logits 用 `LogitsProcessor` 子类（`validate_params`、`update_state`、`apply(logits)`、"
                      "`is_argmax_invariant`），在构建引擎时通过 `logits_processors=[...]` 传入。"},
    },
    surprises=(
        {"fact": "source: " + SRC + "compilation/decorators.py#L533-L538",
         "en": "Hooks on the module whose class is decorated with `@support_torch_compile` (e.g. `LlamaModel`) never "
               "run, not even with `enforce_eager=True`: the decorator replaces the class's `__call__` with one that "
               "calls `self.forward` directly.",
         "zh": "类上带 `@support_torch_compile` 的模块（例如 `LlamaModel`）上的钩子永远不会运行，即使设了 "
               "`enforce_eager=True`：装饰器把这个类的 `__call__` 换成了直接调用 `self.forward` 的版本。"},
        {"fact": "source: " + SRC + "compilation/wrapper.py#L125-L145",
         "en": "A hook added through `apply_model` after start-up is silently skipped by the compiled forward: vLLM "
               "drops every Dynamo guard, so nothing triggers a retrace.",
         "zh": "启动后通过 `apply_model` 加上的钩子会被编译好的前向悄无声息地跳过：vLLM 丢掉了 Dynamo 的所有 "
               "guard，没有任何东西会触发重新追踪。"},
    ),
)
