"""Sorting the messages: the family a message belongs to (its row's section of the index), and the texts whose "hook"
is another idea (left out of the index, and listed by category)."""
from __future__ import annotations

import re

from .hook_messages_data import LIBRARIES, TORCH_CPP, TORCH_PY
from .hook_messages_python import Found

# (source, file prefix, function pattern, text pattern, reason): texts whose "hook" is another idea
OTHER_MEANINGS: tuple[tuple[str, str, str, str, str], ...] = (
    (TORCH_PY, "torch/_inductor/", "", "",
     "Inductor's code-generation callbacks (render, epilogue and launch hooks) and choice overrides"),
    (TORCH_PY, "torch/utils/data/", "", "", "DataPipe serialization callbacks (getstate / reduce_ex hooks)"),
    (TORCH_PY, "torch/_vendor/", "", "", "a vendored kernel library's warm-up hooks"),
    (TORCH_PY, "torch/distributed/_symmetric_memory/", "", "", "Triton kernel initialisation hooks"),
    (TORCH_PY, "torch/fx/", r"node_hook|replace_hook|create_node_hook|erase_node_hook|deepcopy_hook|"
     r"_node_metadata_hook", "", "FX graph-editing callbacks (node created / replaced / erased)"),
    (TORCH_PY, "torch/_export/passes/_node_metadata_hook.py", "", "", "FX graph-editing callbacks (node metadata)"),
    (TORCH_PY, "torch/_dynamo/", "", r"bytecode hook|hooks must not be None for AOT|Unprocessed hooks remaining|"
     r"old_hook_target_remap", "Dynamo's own compile callbacks (bytecode and guard hooks)"),
    (TORCH_PY, "torch/_dynamo/utils.py", "CleanupHook", "", "Dynamo's clean-up callbacks for generated names"),
    (TORCH_PY, "torch/_dynamo/variables/builtin.py", "call_isinstance", "",
     "Python's __instancecheck__ / __subclasscheck__ methods, which a graph break calls hooks"),
    (TORCH_CPP, "", "", r"HooksInterface|HPUHooks|XLAHooks|getAcceleratorHooks|PRIVATEUSE1",
     "device-backend interfaces (PrivateUse1 / HPU / XLA 'hooks')"),
    (TORCH_CPP, "", "", r"^aoti_torch_save_tensor_handle", "AOTInductor's debug dump of a tensor to a file"),
    (TORCH_CPP, "", "", r"extra files hook|Hooks for compiling autograd|hooks to override eval_frame",
     "TorchScript serialization callbacks and module docstrings"),
)

# the reasons above in the index's Chinese page
OTHER_MEANINGS_ZH = {
    "Inductor's code-generation callbacks (render, epilogue and launch hooks) and choice overrides":
        "Inductor 的代码生成回调（render、epilogue、launch 钩子）与候选方案的覆盖",
    "DataPipe serialization callbacks (getstate / reduce_ex hooks)": "DataPipe 的序列化回调（getstate / reduce_ex 钩子）",
    "a vendored kernel library's warm-up hooks": "随 PyTorch 附带的内核库的预热钩子",
    "Triton kernel initialisation hooks": "Triton 内核的初始化钩子",
    "FX graph-editing callbacks (node created / replaced / erased)": "FX 的图编辑回调（节点创建、替换、删除）",
    "FX graph-editing callbacks (node metadata)": "FX 的图编辑回调（节点元数据）",
    "Dynamo's own compile callbacks (bytecode and guard hooks)": "Dynamo 自己的编译回调（字节码与 guard 钩子）",
    "Dynamo's clean-up callbacks for generated names": "Dynamo 为生成的名字做清理的回调",
    "Python's __instancecheck__ / __subclasscheck__ methods, which a graph break calls hooks":
        "Python 的 __instancecheck__ / __subclasscheck__ 方法（图中断信息把它们叫作 hook）",
    "device-backend interfaces (PrivateUse1 / HPU / XLA 'hooks')": "设备后端接口（PrivateUse1 / HPU / XLA 的“hooks”）",
    "AOTInductor's debug dump of a tensor to a file": "AOTInductor 把张量写入文件的调试输出",
    "TorchScript serialization callbacks and module docstrings": "TorchScript 的序列化回调与模块的文档字符串",
}


def left_out_category(category: str, lang: str) -> str:
    """A category of left-out texts ("source: reason") in the page's language.

    >>> left_out_category("torch: Triton kernel initialisation hooks", "zh")
    'torch：Triton 内核的初始化钩子'
    """
    source, _, reason = category.partition(": ")
    if lang != "zh" or reason not in OTHER_MEANINGS_ZH:
        return category
    return f"{source}：{OTHER_MEANINGS_ZH[reason]}"


# (file pattern, function pattern, text pattern, family): the first rule that matches decides; "" matches anything
FAMILY_RULES: tuple[tuple[str, str, str, str], ...] = (
    (r"", "", r"region_activation_memory_budget", "compile"),
    (r"", "", r"SavedTensor object|saved_tensors can only be accessed|'saved_variables' is deprecated",
     "saved-tensor-hooks"),
    (r"", "", r"gradient edge", "node-hooks"),
    (r"nn/modules/module\.py", r"state_dict", r"state.dict|load_state_dict", "state-dict-hooks"),
    (r"", "", r"Forward hooks only exist|Forward pre hooks only exist|__forward|define hook|method or hook with that|"
     r"previous hook if it exists|as forward hook or forward pre_hook|Note that hooks can return anything", "script-fx-export"),
    (r"", "", r"comm.hook|communication hook|allreduce hook|Reducer|DDP|hooks have fired for this", "ddp"),
    (r"", "", r"abort hook|completion hook|AbortHook|CompletionHook|trace hook|hooks are registered\.", "distributed"),
    (r"torch/utils/hooks\.py|nn/modules/module\.py|torch/utils/__init__\.py", "", "", "module-hooks"),
    (r"checkpoint", "", "", "checkpoint"),
    (r"ddp_comm_hooks|nn/parallel/distributed|zero_redundancy|reducer", "", "", "ddp"),
    (r"distributed/fsdp", "", "", "fsdp"),
    (r"torch/distributed", "", "", "distributed"),
    (r"_dynamo|_functorch|_higher_order_ops|_inductor|cuda/graphs|xpu/graphs", "", "", "compile"),
    (r"torch/jit|torch/fx|_export|torch/export", "", "", "script-fx-export"),
    (r"nn/utils/(parametriz|prune|spectral_norm|weight_norm)", "", "", "parametrize"),
    (r"optim/", "", "", "optimizer-hooks"),
    (r"nn/modules/module\.py", "", r"state_dict|load_state_dict", "state-dict-hooks"),
    (r"", "", r"saved tensor|pack hook|unpack hook|pack_hook|unpack_hook|saved_tensors_hooks|SavedVariable|"
     r"saved intermediate|register_hooks on a saved|saved_variable|SavedTensorHooks|save_on_cpu|"
     r"allow_mutation_on_saved", "saved-tensor-hooks"),
    (r"autograd/graph", r"multi_grad", "", "node-hooks"),
    (r"autograd/graph", "", "", "saved-tensor-hooks"),
    (r"", "", r"node creation hook|NodeCreationHook|node_creation|Node hook|pre_hook id|grad_fn", "node-hooks"),
    (r"", "", r"comm hook|communication hook|allreduce hook|Reducer|DDP", "ddp"),
    (r"", "", r"FSDP|FlatParameter", "fsdp"),
    (r"", "", r"ProcessGroup|FlightRecorder|NanCheck|HealthCheck|AbortHook|CompletionHook|onCompletion|collective",
     "distributed"),
    (r"", "", r"compiled autograd|compiled_autograd|torch\.compile|dynamo|Dynamo", "compile"),
    (r"", "", r"script|TorchScript|ir_emitter|forward hook '|pre-hook '", "script-fx-export"),
    (r"", "", r"post accumulate|post_accumulate|PostAccumulateGrad|tensor that doesn't require|variable that doesn't|"
     r"backwards_hooks|_register_hook_dict|hook returned|has returned an incorrect|Tensor post|TensorPreHook|"
     r"cpp_hook|CppFunction|Variable, but hook|no hook at position|hooks_\.empty|retain_grad", "tensor-hooks"),
    (r"", "", r"", "module-hooks"),
)


def family_of(source: str, file: str, function: str, text: str) -> str:
    if source in LIBRARIES:
        return source
    for file_rule, function_rule, text_rule, family in FAMILY_RULES:
        if (not file_rule or re.search(file_rule, file)) and (not function_rule or re.search(function_rule, function)) \
                and (not text_rule or re.search(text_rule, text)):
            return family
    return "module-hooks"


def other_meaning(found: Found) -> str | None:
    for source, prefix, function, text, reason in OTHER_MEANINGS:
        if found.source == source and found.file.startswith(prefix) and \
                (not function or re.search(function, found.function)) and (not text or re.search(text, found.text)):
            return reason
    return None

