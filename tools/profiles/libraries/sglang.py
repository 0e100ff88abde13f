"""sglang: the model lives in the scheduler subprocess(es) and decodes through captured CUDA graphs; a hook registered
in the calling process never reaches it. sglang offers its own ways in: ``--forward-hooks`` specs (registered in the
scheduler after graph capture), ``--debug-tensor-dump-output-folder``, custom logit processors and returned hidden
states. Read from the source: it needs a GPU build."""
from __future__ import annotations

from ..spec import Library

SRC = "https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/srt/"
LIBRARY = Library(
    slug="sglang", name="sglang", status="source", category="serving",
    entry="sglang.Engine(model_path=..., forward_hooks=[{...}]).generate(prompt, sampling_params)",
    names=("Engine", "forward_hooks", "register_forward_hooks", "hook_factory", "target_modules",
           "finalize_cuda_graph_capture", "debug_tensor_dump_output_folder", "TensorDumper",
           "register_forward_hook_for_model", "CustomLogitProcessor", "enable_custom_logit_processor",
           "custom_logit_processor", "return_hidden_states", "enable_return_hidden_states", "collective_rpc",
           "handle_rpc_request", "Scheduler", "ModelRunner"),
    sources=(SRC + "model_executor/hook_manager.py#L11-L55",
             SRC + "model_executor/model_runner_components/cuda_graph_setup.py#L452-L459",
             SRC + "arg_groups/fields/observability.py#L231-L237",
             SRC + "debug_utils/tensor_dump_forward_hook.py#L1-L10",
             SRC + "arg_groups/serving_hook.py#L543-L560",
             SRC + "sampling/custom_logit_processor.py#L24-L48",
             SRC + "entrypoints/engine.py#L1862-L1867", SRC + "managers/scheduler.py#L5608-L5628",
             SRC + "entrypoints/engine.py#L894-L980"),
    why_source={"en": "sglang's runtime needs CUDA (its kernels and CUDA graphs) and a real model; read from the "
                      "v0.5.23 release (the PyPI wheel's sources, which match tag v0.5.23).",
                "zh": "sglang 的运行时需要 CUDA（它的算子和 CUDA graph）以及一个真实模型；按 v0.5.23 版本阅读源码"
                      "（PyPI 轮子里的源码，与 v0.5.23 标签一致）。"},
    installs=(
        {"where": "modules matching `target_modules` globs (scheduler process)", "kind": "forward",
         "what": "`--forward-hooks` / `Engine(forward_hooks=[{\"name\", \"target_modules\", \"hook_factory\", "
                 "\"config\"}])`: `hook_factory(config)` is imported by path and its hook registered with "
                 "`register_forward_hook` on each match, after CUDA-graph capture"},
        {"where": "every leaf module (and the top-level model) in the scheduler process", "kind": "forward",
         "what": "`--debug-tensor-dump-output-folder`: a `TensorDumper` hook writes every output to "
                 "`Pass{n}.pt`; this mode disables CUDA graphs"},
    ),
    order={"en": "sglang's own hooks are the only ones on the served model. `--forward-hooks` are registered in "
                 "`finalize_cuda_graph_capture`, after the graphs are captured, so they run only on batches that "
                 "take the eager path (prefill, or any batch the graphs cannot run); a decode batch replayed from "
                 "a CUDA graph runs no Python hook at all. The tensor dump hooks run on every forward because the "
                 "dump mode turns CUDA graphs off.",
           "zh": "被服务的模型上只有 sglang 自己挂的钩子。`--forward-hooks` 在 `finalize_cuda_graph_capture` 里、"
                 "CUDA graph 捕获完成之后才注册，所以只在走 eager 路径的 batch 上运行（prefill，或 graph 跑不了的 "
                 "batch）；从 CUDA graph 重放的 decode batch 不运行任何 Python 钩子。张量转储模式会关闭 CUDA graph，"
                 "所以转储钩子每次前向都运行。"},
    words={
        "en": {"summary": "`Engine` starts scheduler processes that load and run the model; the calling process "
                          "only has a tokenizer manager, so `register_forward_hook` there has nothing to attach "
                          "to. Hooks reach the model as `forward_hooks` specs: an importable factory path and glob "
                          "patterns over module names, resolved in every scheduler process. For logits there is "
                          "`CustomLogitProcessor` (serialised with `dill`, needs `--enable-custom-logit-processor`), "
                          "for activations `return_hidden_states=True` (needs `--enable-return-hidden-states`) or "
                          "the tensor dump.",
               "remove": "Hooks given as `forward_hooks` stay for the server's life (no handle is kept); start the "
                         "engine without them. `collective_rpc(method, **kwargs)` only calls an existing "
                         "`Scheduler` method by name, so it cannot send a callable that would remove or add hooks.",
               "api": "`forward_hooks=[{\"name\": ..., \"target_modules\": [\"model.layers.*.mlp\"], "
                      "\"hook_factory\": \"pkg.mod:factory\", \"config\": {...}}]` (the factory returns a "
                      "`(module, input, output)` hook); `custom_logit_processor=Cls.to_str()` with "
                      "`custom_params` per request; `return_hidden_states=True`."},
        "zh": {"summary": "`Engine` 会启动调度进程，由它们加载并运行模型；调用方进程里只有分词管理器，在那里调用 "
                          "`register_forward_hook` 根本没有模型可挂。钩子要以 `forward_hooks` 规格的形式送进去："
                          "一个可导入的工厂函数路径加上匹配模块名的通配模式，在每个调度进程里解析。要改 logits 用 "
                          "`CustomLogitProcessor`（用 `dill` 序列化，需要 `--enable-custom-logit-processor`），"
                          "要取激活用 `return_hidden_states=True`（需要 `--enable-return-hidden-states`）或张量转储。",
               "remove": "以 `forward_hooks` 给出的钩子在服务整个生命周期内都在（没有保存句柄）；要去掉就不带它们重启。"
                         "`collective_rpc(method, **kwargs)` 只能按名字调用 `Scheduler` 已有的方法，"
                         "没法传一个可调用对象进去增删钩子。",
               "api": "`forward_hooks=[{\"name\": ..., \"target_modules\": [\"model.layers.*.mlp\"], "
                      "\"hook_factory\": \"pkg.mod:factory\", \"config\": {...}}]`（工厂返回一个 "
                      "`(module, input, output)` 钩子）；`custom_logit_processor=Cls.to_str()`，每个请求配 "
                      "`custom_params`；`return_hidden_states=True`。"},
    },
    surprises=(
        {"fact": "source: " + SRC + "model_executor/model_runner_components/cuda_graph_setup.py#L452-L459",
         "en": "`--forward-hooks` are registered after CUDA-graph capture on purpose: they fire on prefill and other "
               "eager batches, but not on decode batches replayed from a graph.",
         "zh": "`--forward-hooks` 故意在 CUDA graph 捕获之后才注册：它们在 prefill 等 eager batch 上触发，"
               "从 graph 重放的 decode batch 上则不触发。"},
    ),
)
