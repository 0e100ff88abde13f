"""The site search's test cases and their measurement in a real browser (tests/tools/test_browser.py runs them).

- whole terms a learner types: 50 Chinese (ten asked for from the start, 18 from notebooks 15-16, 19 of notebook 00's
  glossary, 3 a learner would type) and 30 English: recall and precision against the pages whose text holds the
  term, and the rank of the page built around it (the term in its highest heading);
- 12 Chinese queries of two or three words typed together, as Chinese is written (混合精度钩子);
- the hook behaviour matrix's page: a cell's key, a family's and a context's names;
- 22 error messages and warnings pasted as a learner's own run prints them: PyTorch's whole message with the learner's
  names, shapes and numbers (the notebooks' committed outputs, from which the cases are taken, print the course's),
  and the symptom-index rows (``symptoms.html#row-<id>``, and notebook 00's table's ``#symptom-row-<id>``) and
  explaining cells (``NN_name.html#symptom-<id>``) that are the right results.

- a learner's own words (issue 56, :data:`LEARNER`): 48 English and 46 Chinese queries as learners type them
  (symptoms, not the course's terms: hook not firing, 钩子没有被调用, 显存一直涨), each with the results that are a useful
  first one (a notebook teaching it, a symptom's row or cell, a kind of symptom, a recipe): the share whose first
  result is useful, per language; and :data:`LEARNER_HELD_OUT`, 27 more in each language written before the search
  was tuned on LEARNER and never tuned on, the same measure;
- the recipes found by the site's search (issue 53, :func:`recipe_queries`): each recipe of recipes/*.ipynb asked
  of the English site by the library and the asker's words (and the message pasted, when there is one) and of the
  Chinese site by its ``asked_zh``: the share of questions whose recipe (its anchor or its page) is among the first
  three results, per language.

Run as a script on a built site to print the tables (both engines: the site's Pagefind search, or Sphinx's own on
a site built before it; ``--only=learner,heldout,recipes`` asks only those; ``--misses`` lists the recipes not
found)::

    .venv/bin/python tests/tools/search_cases.py build/site [CHROMIUM] [--json] [--only=learner,recipes] > tables.md
"""
from __future__ import annotations

import functools
import html.parser
import re
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

ZH_TERMS = [
    # the ten the first review asked for
    "钩子", "检查点", "梯度裁剪", "注意力", "归纳头", "分片", "反向传播", "内存", "保存张量", "非有限",
    # notebooks 15 and 16
    "梯度累积", "混合精度", "量化", "适配器", "卸载", "元设备", "微批次", "梯度缩放", "优化器", "融合",
    "观察器", "指数移动平均", "归因", "学习率", "权重衰减", "检查点内存", "训练循环", "回调",
    # notebook 00's glossary
    "句柄", "前向钩子", "反向钩子", "前向前置钩子", "反向前置钩子", "全局钩子", "张量钩子", "累加后钩子", "保存的张量",
    "激活检查点", "打包钩子", "解包钩子", "状态字典", "图中断", "逐样本梯度", "计算图", "叶子张量", "激活值", "重算",
    # what a learner would type
    "显存", "梯度爆炸", "钩子不触发",
]
EN_TERMS = [
    "register_forward_hook", "saved_tensors_hooks", "HookScope", "FSDP", "gradient accumulation", "mixed precision",
    "state dict", "per-sample gradients", "memory leak", "graph break", "device map", "activation checkpointing",
    "gradient clipping", "backward hook", "forward pre-hook", "torch.compile", "LoRA", "quantization",
    "attention", "induction head", "DDP", "pruning", "weight norm", "GradScaler", "autocast", "offload",
    "meta device", "Grad-CAM", "anomaly detection", "hook order",
]
# two or three words typed together, and the words a page must hold (all of them) to be a right result
ZH_TOGETHER = {
    "混合精度钩子": ["混合精度", "钩子"], "梯度累积钩子": ["梯度累积", "钩子"], "保存张量钩子": ["保存张量", "钩子"],
    "分布式通信钩子": ["分布式", "通信钩子"], "编译图中断": ["编译", "图中断"], "前向钩子返回值": ["前向钩子", "返回值"],
    "检查点内存": ["检查点", "内存"], "钩子顺序": ["钩子", "顺序"], "反向钩子不触发": ["反向钩子", "不触发"],
    "激活检查点钩子": ["激活检查点", "钩子"], "梯度裁剪钩子": ["梯度裁剪", "钩子"], "模块钩子句柄": ["模块", "钩子", "句柄"],
}
# the page built around a topic: it must come first
TOPIC_FIRST = {
    ("zh", "梯度累积"): "16_hooks_across_training", ("en", "gradient accumulation"): "16_hooks_across_training",
    ("zh", "保存的张量"): "06_saved_tensor_hooks", ("en", "saved tensor hooks"): "06_saved_tensor_hooks",
    ("zh", "激活检查点"): "07_activation_checkpointing", ("en", "activation checkpointing"): "07_activation_checkpointing",
    ("zh", "张量钩子"): "01_tensor_hooks", ("en", "module backward hooks"): "04_module_backward_hooks",
}

# the hook behaviour matrix's page: a cell's key (as the page says: search for it) lands on the cell's row, whose
# anchor is the key (tools/site/conf.py), and so do the family's and the context's words typed together; a family's
# or a context's name finds the page (None: the page is listed above the line)
MATRIX = [
    ("en", "full-backward-hook@autograd-grad", "full-backward-hook@autograd-grad"),
    ("zh", "full-backward-hook@autograd-grad", "full-backward-hook@autograd-grad"),
    ("en", "forward-hook@compile", "forward-hook@compile"), ("zh", "param-hook@fsdp2", "param-hook@fsdp2"),
    ("en", "full backward hook compiled autograd", "full-backward-hook@compiled-autograd"),
    ("en", "register_full_backward_hook", None), ("en", "compiled autograd", None),
    ("zh", "完整反向钩子", None), ("zh", "编译的自动求导", None),
]


@dataclass(frozen=True)
class Pasted:
    """An error or warning as a learner's run prints it, and the symptoms (ids) whose row and cell explain it."""
    text: str
    symptoms: tuple[str, ...]
    source: str  # which committed output it comes from, and what the learner's run changed


PASTED = [
    Pasted("RuntimeError: Output 0 of BackwardHookFunctionBackward is a view and is being modified inplace. This view "
           "was created inside a custom Function (or because an input was returned as-is) and the autograd logic to "
           "handle view+inplace would override the custom backward associated with the custom Function, leading to "
           "incorrect gradients. This behavior is forbidden. You can fix this by cloning the output of the custom "
           "Function.", ("full-backward-hook-inplace-view-error", "full-backward-hook-on-resnet-fails",
                         "full-backward-hook-on-bn1-view-error", "full-backward-hook-before-inplace-relu",
                         "in-place-pre-hook-shared-input"),
           "04: the whole message, with the node's Backward suffix"),
    Pasted("RuntimeError: hook 'scale_grad' has changed the type of value (was torch.cuda.HalfTensor got "
           "torch.cuda.FloatTensor)", ("hook-returns-default-dtype-zeros", "tensor-hook-changes-dtype-under-autocast"),
           "01/10: the learner's hook name, CUDA half precision"),
    Pasted('Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    feats.register_hook(save_grad)'
           "\nRuntimeError: cannot register a hook on a tensor that doesn't require gradient",
           ("tensor-hook-never-fires-or-cannot-register", "hook-never-fires-no-input-requires-grad",
            "grad-cam-under-inference-mode"), "01/08/11: with the learner's traceback"),
    Pasted("RuntimeError: post accumulate grad hooks cannot be registered on non-leaf tensors",
           ("post-accumulate-hook-on-non-leaf", "parametrized-weight-hook-never-fires"), "02/09: as printed"),
    Pasted("RuntimeError: forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got "
           "<class 'torch.Tensor'>.", ("with-kwargs-pre-hook-returns-args-only", "step-pre-hook-cannot-skip-step"),
           "03: the message's end, which the notebook leaves out"),
    Pasted("RuntimeError: Backward hook returned an invalid number of grad_input, got 1, but expected 3",
           ("backward-hook-returns-wrong-type",), "04: the learner's counts"),
    Pasted("/home/me/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py:1830: FutureWarning: Using a "
           "non-full backward hook when the forward contains multiple autograd Nodes is deprecated and will be "
           "removed in future versions. This hook will be missing some grad_input. Please use "
           "register_full_backward_hook to get the documented behavior.", ("non-full-backward-hook-warning",),
           "04: with the file and line of the learner's install"),
    Pasted("RuntimeError: Cannot use both regular backward hooks and full backward hooks on a single Module. Please "
           "use only one of them.", ("mixing-old-and-full-backward-hooks",), "04: the whole message"),
    Pasted("RuntimeError: A saved tensor pack hook is modifying its input in place. Tensors provided as input to pack "
           "hook can not be modified by in-place operations as this can lead to unexpected side-effects. Please "
           "open an issue if you need to perform in-place operations on the input to a pack hook.",
           ("pack-hook-modifies-input-in-place",), "06: the whole message"),
    Pasted("RuntimeError: torch.func.{grad, vjp, jacrev, hessian} don't yet support saved tensor hooks. Please open "
           "an issue with your use case.", ("torch-func-under-saved-tensor-hooks",), "06: the whole message"),
    Pasted("/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:87: UserWarning: None of the inputs "
           "have requires_grad=True. Gradients will be None", ("reentrant-checkpoint-no-input-requires-grad",),
           "07: with the learner's path"),
    Pasted("torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: A different number of tensors was saved "
           "during the original forward and recomputation. Number of tensors saved during forward: 12 Number of "
           "tensors saved during recomputation: 9.", ("checkpoint-recomputation-differs-from-forward",
                                                      "checkpoint-different-number-of-tensors-saved"),
           "07/16: the learner's counts"),
    Pasted("torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for the following "
           "tensors have different metadata than during the forward pass. tensor at position 13: saved metadata: "
           "{'shape': torch.Size([512, 768]), 'dtype': torch.float16, 'device': device(type='cuda', index=0)} "
           "recomputed metadata: {'shape': torch.Size([0]), 'dtype': torch.float16, 'device': "
           "device(type='cuda', index=0)}", ("checkpoint-mha-under-outer-saved-tensor-hooks",
                                             "checkpoint-frozen-parameter-released-metadata",
                                             "checkpoint-release-hook-frozen-parameter"),
           "07/16/14: the learner's shapes, dtype and device"),
    Pasted('RuntimeError: Error(s) in loading state_dict for ResNet:\n\tMissing key(s) in state_dict: "fc.weight", '
           '"fc.bias". \n\tUnexpected key(s) in state_dict: "classifier.weight", "classifier.bias".',
           ("old-checkpoint-missing-keys", "state-dict-hook-ignores-prefix"), "09: the learner's model and keys"),
    Pasted("size mismatch for classifier.weight: copying a param with shape torch.Size([1000, 512]) from checkpoint, "
           "the shape in current model is torch.Size([10, 512]).", ("strict-false-does-not-forgive-size-mismatch",),
           "09: the learner's layer and shapes"),
    Pasted("RuntimeError: Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at "
           "the moment.  If you were attempting to deepcopy a module, this may be because of a "
           "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001",
           ("deepcopy-pruned-module-fails", "deepcopy-old-weight-norm-fails"), "09: the whole message"),
    Pasted("RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following "
           "reasons: 1) Use of a module parameter outside the `forward` function. Please make sure model parameters "
           "are not shared across multiple concurrent forward-backward passes. or try to use _set_static_graph() as "
           "a workaround if this module graph does not change during training loop.2) Reused parameters in multiple "
           "reentrant backward passes. Parameter at index 73 with name module.encoder.layer.11.output.dense.weight "
           "has been marked as ready twice.", ("ddp-reentrant-checkpoint-wrong-gradients",),
           "10: the learner's parameter index and name"),
    Pasted("RuntimeError: one of the variables needed for gradient computation has been modified by an inplace "
           "operation: [torch.cuda.HalfTensor [8, 12, 197, 64]], which is output 0 of "
           "ScaledDotProductEfficientAttentionBackward0, is at version 2; expected version 0 instead. Hint: enable "
           "anomaly detection to find the operation that failed to compute its gradient, with "
           "torch.autograd.set_detect_anomaly(True).", ("in-place-ablation-sdpa-saved-output",
                                                       "weight-constraint-pre-hook-breaks-shared-module-backward"),
           "12: the learner's GPU kernel, shape and versions"),
    Pasted("RuntimeError: Function 'PowBackward0' returned nan values in its 0th output.",
           ("anomaly-mode-nan-in-backward",), "13: another backward function"),
    Pasted("RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be "
           "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
           "`error_if_nonfinite=False`", ("clip-grad-norm-non-finite",), "13: the whole message"),
    Pasted("RuntimeError: The size of tensor a (0) must match the size of tensor b (4096) at non-singleton dimension 1",
           ("sharded-parameter-empty-in-accumulate-grad", "sharder-backward-pre-hook-dict-output"),
           "14: the learner's layer width"),
    Pasted("RuntimeError: Tensor on device meta is not on the expected device cuda:0!",
           ("tensor-on-meta-device-in-hook",), "15: the learner's device"),
]




# --- a learner's own words (issue 56) ---------------------------------------------------------------------------

# Queries as learners type them: symptoms in their own words, not the course's terms, and each with the results that
# are a useful first one: ``row:<id>`` a symptom's row of the symptom index (symptoms.html#row-<id>, notebook 00's
# #symptom-row-<id>) or the cell that explains it (NN_name.html#symptom-<id>); ``kind:<id>`` a kind of silent
# symptom (symptoms.html#kind-<id>, the list of its rows); ``recipe:<id>`` a recipe; a page's name (a notebook
# teaching the topic: any place on it).
NEVER = ("kind:never-fires", "row:tensor-hook-never-fires-or-cannot-register", "row:hook-skipped-by-forward-call",
         "row:hook-never-fires-forward-called-directly", "row:hook-never-fires-no-input-requires-grad",
         "03_module_forward_hooks", "08_pitfalls_and_corrections")
TWICE = ("kind:fires-twice", "row:same-hook-registered-twice-runs-twice", "row:hooks-stack-on-rerun",
         "row:hooks-stack-when-cell-reruns", "row:hooks-pile-up-registered-every-epoch")
GRAD_NONE = ("row:non-leaf-grad-is-none", "row:param-data-grad-is-none", "01_tensor_hooks")
MEMORY = ("kind:memory-and-cost", "row:stored-activations-keep-graph-alive", "row:hooks-pile-up-registered-every-epoch",
          "row:hook-closure-keeps-model-alive", "13_debugging_and_cost", "16_hooks_across_training")
SHAPE = ("row:tensor-hook-changes-size-or-type", "row:backward-hook-returns-wrong-type",
         "row:node-hook-returns-wrong-type-or-shape", "04_module_backward_hooks", "01_tensor_hooks")
FEATURES = ("03_module_forward_hooks", "05_applications", "row:feature-hook-numpy-or-returned-detach",
            "08_pitfalls_and_corrections")
REMOVE = ("01_tensor_hooks", "03_module_forward_hooks", "row:wrapper-hooks-never-removed",
          "row:clearing-hook-dict-breaks-pruning")
NAN = ("13_debugging_and_cost", "api", "row:log-of-logits-loss-nan", "row:anomaly-mode-nan-in-backward",
       "row:sqrt-at-zero-inf-gradient")
SAVE_MEMORY = ("07_activation_checkpointing", "06_saved_tensor_hooks")
COMPILE = ("11_compilers_and_function_transforms", "row:hook-registered-after-compile-ignored",
           "row:hook-added-after-compile-never-fires", "row:hook-registered-after-torch-compile-ignored")
COPY = ("kind:fires-on-a-copy", "row:deepcopy-copies-hooks", "row:parameter-hooks-dropped-by-save-and-deepcopy",
        "09_hooks_beyond_autograd")
LATE = ("kind:wrong-call-recorded", "row:late-binding-loop-variable-in-hook", "row:late-binding-lambda-in-loop")
SCALED = ("kind:scaled-gradient", "row:hook-sees-scaled-gradient-under-gradscaler", "10_distributed_and_mixed_precision")
KWARGS = ("row:pre-hook-sees-empty-args-for-keyword-call", "row:attention-pre-hook-empty-args", "03_module_forward_hooks",
          "12_transformer_language_models")
LSTM = ("row:full-backward-hook-on-lstm-never-fires", "row:lstm-backward-hook-grad-output-none")
PICKLE = ("row:torch-save-model-with-lambda-hook", "row:parameter-hooks-dropped-by-save-and-deepcopy",
          "09_hooks_beyond_autograd")
DDP = ("row:ddp-hooks-see-local-gradient", "10_distributed_and_mixed_precision")
SHARDED = ("row:hooks-after-fsdp2-sharding", "row:hook-sees-empty-sharded-parameter",
           "10_distributed_and_mixed_precision", "14_hooks_in_frameworks")
META = ("row:hook-sees-meta-weights", "row:tensor-on-meta-device-in-hook", "15_hooks_in_libraries")
LORA = ("row:hook-misses-lora-adapter", "15_hooks_in_libraries")
GRADCAM = ("row:vit-grad-cam-zero-at-last-block", "05_applications")
RECOMPUTE = ("row:forward-hooks-fire-again-in-recomputation", "row:submodule-hook-runs-twice-under-checkpointing",
             "07_activation_checkpointing",
             # checkpointing runs a hook twice in this way too (a parameter's hooks, reentrant variant); added when the
             # search first answered with it, as a right answer the list had missed
             "row:reentrant-checkpoint-runs-parameter-hooks-twice")
COST = ("13_debugging_and_cost", "row:per-parameter-hooks-quadratic-backward", "row:logging-forces-host-sync-every-step",
        "kind:memory-and-cost", "16_hooks_across_training")
ATTENTION = ("12_transformer_language_models",)
CHANGE_OUTPUT = ("03_module_forward_hooks", "12_transformer_language_models", "row:forward-hook-returns-by-accident")
MICRO = ("row:per-backward-hook-runs-per-micro-batch", "16_hooks_across_training")
FREED = ("row:hook-closure-keeps-model-alive", "row:bound-method-hook-reference-cycle", "13_debugging_and_cost",
         "kind:memory-and-cost")
ORDER = ("00_introduction", "02_node_hooks_and_order")
INPLACE = ("row:inplace-grad-edit-in-hook-leaks-to-other-branch", "row:inplace-grad-edit-changes-sibling-grads",
           "01_tensor_hooks", "08_pitfalls_and_corrections")
OLD_KEYS = ("row:old-checkpoint-missing-keys", "09_hooks_beyond_autograd")
CLIP = ("01_tensor_hooks", "05_applications", "08_pitfalls_and_corrections", "api")
EXPLODE = ("05_applications", "13_debugging_and_cost")
FROZEN = ("row:tensor-hook-never-fires-or-cannot-register", "row:hook-never-fires-no-input-requires-grad",
          "01_tensor_hooks", "recipe:tensor-hooks-06")
TO_CPU = ("06_saved_tensor_hooks",)
RNG = ("row:checkpoint-preserve-rng-state-false-wrong-grad", "07_activation_checkpointing")
MASK = ("row:gradient-mask-does-not-freeze-under-weight-decay", "01_tensor_hooks", "05_applications")
TUPLE_OUT = ("row:decoder-layer-output-0-is-first-sample", "12_transformer_language_models")

LEARNER = {
    "en": [
        ("hook not firing", NEVER), ("my forward hook is never called", NEVER),
        ("register_forward_hook does nothing", NEVER), ("grad is None after backward", GRAD_NONE),
        ("why is the gradient of my intermediate tensor None", GRAD_NONE),
        ("memory keeps growing every iteration", MEMORY), ("memory leak with hooks", MEMORY),
        ("hook fires twice", TWICE), ("hook called multiple times per forward", TWICE),
        ("backward hook returns wrong shape", SHAPE), ("how to get the output of an intermediate layer", FEATURES),
        ("extract features from a resnet layer", FEATURES), ("how to remove a hook", REMOVE),
        ("remove all hooks from model", REMOVE), ("gradients exploding", EXPLODE), ("loss becomes nan", NAN),
        ("find which layer produces nan", NAN), ("cuda out of memory during training", SAVE_MEMORY),
        ("reduce gpu memory of activations", SAVE_MEMORY), ("hook not working with torch.compile", COMPILE),
        ("hook added after compile is ignored", COMPILE), ("deepcopy model with hooks", COPY),
        ("all hooks record the same layer name", LATE), ("hook in a for loop uses the last layer", LATE),
        ("gradients in hook are huge with amp", SCALED), ("hook gets empty args when calling with kwargs", KWARGS),
        ("backward hook on lstm not called", LSTM), ("can't pickle model with hook", PICKLE),
        ("ddp gradient in hook not averaged", DDP), ("fsdp hook sees empty weight", SHARDED),
        ("weight is on meta device inside hook", META), ("hook does not see lora output", LORA),
        ("grad-cam heatmap all zeros for vit", GRADCAM), ("checkpointing makes my hooks run twice", RECOMPUTE),
        ("hooks slow down training", COST), ("get attention weights from a transformer", ATTENTION),
        ("modify the output of a layer with a hook", CHANGE_OUTPUT),
        ("hook runs every micro batch with gradient accumulation", MICRO),
        ("model not freed after del", FREED), ("in what order do hooks run", ORDER),
        ("changing grad in hook changes another branch", INPLACE), ("load old checkpoint missing keys", OLD_KEYS),
        ("clip gradients inside a hook", CLIP), ("cannot register hook on frozen layer", FROZEN),
        ("offload activations to cpu to save memory", TO_CPU),
        ("checkpoint with dropout gives different gradients", RNG),
        ("zeroing gradients with a mask does not freeze weights", MASK),
        ("forward hook output is a tuple in huggingface", TUPLE_OUT),
    ],
    "zh": [
        ("钩子没有触发", NEVER), ("钩子没有被调用", NEVER), ("前向钩子不执行", NEVER), ("hook 不生效", NEVER),
        ("反向传播后梯度为空", GRAD_NONE), ("梯度为空", GRAD_NONE), ("中间变量的梯度是 None", GRAD_NONE),
        ("内存泄漏", MEMORY), ("显存一直涨", MEMORY), ("钩子触发了两次", TWICE), ("钩子执行了好几次", TWICE),
        ("形状不对", SHAPE), ("反向钩子返回值报错", SHAPE), ("怎么拿到中间层的输出", FEATURES),
        ("提取中间层特征", FEATURES), ("怎么删除钩子", REMOVE), ("梯度爆炸怎么办", EXPLODE),
        ("loss 变成 nan", NAN), ("哪一层出现了 nan", NAN), ("显存不够", SAVE_MEMORY),
        ("编译以后钩子不起作用", COMPILE), ("深拷贝模型后钩子还在", COPY), ("循环里注册钩子都记成最后一层", LATE),
        ("混合精度下钩子看到的梯度特别大", SCALED), ("用关键字参数调用时前置钩子拿不到输入", KWARGS),
        ("LSTM 的反向钩子不触发", LSTM), ("带钩子的模型保存报错", PICKLE), ("DDP 里钩子看到的梯度没有平均", DDP),
        ("FSDP 之后钩子里的权重是空的", SHARDED), ("钩子里权重在 meta 设备上", META), ("LoRA 的钩子没触发", LORA),
        ("Grad-CAM 全是零", GRADCAM), ("用了检查点钩子跑两遍", RECOMPUTE), ("钩子让训练变慢", COST),
        ("注意力权重怎么取出来", ATTENTION), ("用钩子修改某层的输出", CHANGE_OUTPUT),
        ("梯度累积时钩子每个微批次都跑", MICRO), ("del 模型以后显存不释放", FREED), ("钩子的执行顺序", ORDER),
        ("在钩子里原地改梯度影响了别的分支", INPLACE), ("加载旧的 checkpoint 缺少 key", OLD_KEYS),
        ("冻结的层注册钩子报错", FROZEN), ("把激活存到 CPU 上省显存", TO_CPU), ("用钩子裁剪梯度", CLIP),
        ("检查点加 dropout 梯度不一样", RNG), ("用掩码把梯度置零权重还是在变", MASK),
    ],
}


# Held out (issue 56): written before this round's tuning of hooklab-search.js (its SYNONYMS and ranking) and of the
# recipe pages, and measured once before it; they are not to be tuned on (no synonym or rule added for one of them).
# They measure whether what was tuned on LEARNER holds for words it was not tuned on.
FORWARD_CALLED = ("row:hook-skipped-by-forward-call", "row:hook-never-fires-forward-called-directly",
                  "kind:never-fires", "03_module_forward_hooks", "08_pitfalls_and_corrections")
RERUN = ("row:hooks-stack-on-rerun", "row:hooks-stack-when-cell-reruns", "kind:fires-twice",
         "03_module_forward_hooks", "08_pitfalls_and_corrections")
STORED = ("row:stored-activations-keep-graph-alive", "kind:memory-and-cost", "08_pitfalls_and_corrections",
          "13_debugging_and_cost")
EMA_COPY = ("row:hook-fires-on-a-copy", "row:hook-copied-into-ema-and-eval-copies", "kind:fires-on-a-copy",
            "15_hooks_in_libraries", "16_hooks_across_training")
VIEW_INPLACE = ("row:full-backward-hook-inplace-view-error", "row:full-backward-hook-before-inplace-relu",
                "row:full-backward-hook-on-resnet-fails", "04_module_backward_hooks", "08_pitfalls_and_corrections")
OLD_VS_FULL = ("04_module_backward_hooks", "row:non-full-backward-hook-warning")
EPOCH_PILE = ("row:hooks-pile-up-registered-every-epoch", "kind:fires-twice", "16_hooks_across_training")
RETURNED = ("row:forward-hook-returns-by-accident", "kind:return-value", "03_module_forward_hooks",
            "08_pitfalls_and_corrections")
LEARNER_HELD_OUT = {
    "en": [
        ("register_hook callback never gets executed", NEVER),
        ("module hook doesn't trigger when I call model.forward directly", FORWARD_CALLED),
        ("x.grad returns None for a tensor that is not a leaf", GRAD_NONE),
        ("RAM usage increases each batch when saving activations in a hook", STORED),
        ("print statement in hook appears two times", TWICE),
        ("rerunning jupyter cell registers the hook again", RERUN),
        ("how do I unregister a forward hook", REMOVE),
        ("save intermediate activations of every layer", FEATURES),
        ("detect where NaN appears in backward pass", NAN),
        ("torch.compile ignores hook registered later", COMPILE),
        ("copy.deepcopy keeps the hooks of the original model", COPY),
        ("lambda hooks in a loop all print the same name", LATE),
        ("gradients look 65536 times bigger in my hook", SCALED),
        ("pre hook args tuple is empty", KWARGS),
        ("DDP hook shows per-rank gradient instead of the mean", DDP),
        ("accelerate offloaded model weights are meta tensors in forward hook", META),
        ("peft lora adapter not captured by my forward hook", LORA),
        ("activation checkpointing calls forward hook again during backward", RECOMPUTE),
        ("hook overhead makes backward very slow with many parameters", COST),
        ("change layer output via forward hook return value", CHANGE_OUTPUT),
        ("gradient clipping with register_hook", CLIP),
        ("modifying grad in place inside hook affects other tensor", INPLACE),
        ("full backward hook on LSTM never runs", LSTM),
        ("torch.save fails on model with hooks attached: can't pickle local object", PICKLE),
        ("hook fires but on the EMA copy of the model", EMA_COPY),
        ("view modified inplace error with full backward hook and ReLU(inplace=True)", VIEW_INPLACE),
        ("difference between register_backward_hook and register_full_backward_hook", OLD_VS_FULL),
    ],
    "zh": [
        ("register_hook 注册的函数一直没执行", NEVER),
        ("直接调用 forward 钩子不生效", FORWARD_CALLED),
        ("非叶子节点的 grad 是 None", GRAD_NONE),
        ("训练时显存越来越大", MEMORY),
        ("钩子里保存激活导致内存泄露", STORED + MEMORY),
        ("重新运行单元格后钩子重复注册", RERUN),
        ("每个 epoch 注册一次钩子越来越多", EPOCH_PILE),
        ("怎么移除 forward hook", REMOVE),
        ("如何获取中间层的特征图", FEATURES),
        ("反向传播出现 NaN 怎么定位", NAN),
        ("torch.compile 之后新注册的钩子没用", COMPILE),
        ("深拷贝之后钩子也被复制了", COPY),
        ("循环中用 lambda 注册钩子结果都一样", LATE),
        ("GradScaler 下钩子里梯度很大", SCALED),
        ("前置钩子的 args 是空元组", KWARGS),
        ("多卡 DDP 钩子拿到的是本卡的梯度", DDP),
        ("accelerate 卸载后权重在 meta 上", META),
        ("peft 加了 LoRA 之后钩子抓不到", LORA),
        ("梯度检查点让前向钩子又执行一遍", RECOMPUTE),
        ("注册很多钩子后反向传播变得很慢", COST),
        ("inplace 的 ReLU 和完整反向钩子一起用报错", VIEW_INPLACE),
        ("torch.save 模型时报 can't pickle lambda", PICKLE),
        ("ViT 的 Grad-CAM 热力图一片空白", GRADCAM),
        ("怎么拿到 transformer 的注意力矩阵", ATTENTION),
        ("梯度累积时优化器钩子每个小批次都执行", MICRO),
        ("加载预训练权重 missing keys", OLD_KEYS),
        ("hook 返回值把模块输出替换掉了", RETURNED),
    ],
}


@functools.cache
def silent_kinds() -> dict[str, tuple[str, ...]]:
    """A kind of silent symptom -> its rows (docs/silent_symptoms.toml): a row of the kind is a useful result too."""
    import tomllib

    path = Path(__file__).resolve().parents[2] / "docs" / "silent_symptoms.toml"
    return {kind["id"]: tuple(kind["rows"]) for kind in tomllib.loads(path.read_text(encoding="utf-8"))["kind"]}


def useful(href: str, folder: Path, wanted: tuple[str, ...]) -> bool:
    """Whether a result's link is one of ``wanted`` (see :data:`LEARNER`)."""
    for target in wanted:
        kind, _, ident = target.partition(":")
        if not ident and page_of(href) == target:
            return True
        if kind == "kind" and (leads_to(href, folder, ("symptoms",), {f"kind-{ident}"})
                               or useful(href, folder, tuple(f"row:{row}" for row in silent_kinds().get(ident, ())))):
            return True
        if kind == "row":
            homes = tuple(p for p in pages(folder) if p[:2].isdigit()
                          and f"symptom-{ident}" in targets(folder / f"{p}.html").element)
            if (leads_to(href, folder, ("symptoms",), {f"row-{ident}"})
                    or leads_to(href, folder, ("00_introduction",), {f"symptom-row-{ident}"})
                    or leads_to(href, folder, homes, {f"symptom-{ident}"})):
                return True
        if kind == "recipe" and any(leads_to(href, folder, (q.page,), {f"recipe-{ident}"})
                                    for q in recipe_queries() if q.recipe == ident):
            return True
    return False


def measure_learner(page, base: str, site: Path, queries: dict | None = None) -> list[dict]:
    """Each learner query (:data:`LEARNER`, or ``queries`` in its form: :data:`LEARNER_HELD_OUT`) asked of its site:
    whether the first result is a useful one, and where the first useful one stands among the links (None: not
    listed)."""
    rows = []
    for lang, cases in (LEARNER if queries is None else queries).items():
        folder = site / lang
        for query, wanted in cases:
            answer = ask(page, base, folder, lang, query)
            hrefs = answer["main"] + answer["more"]
            at = rank(hrefs, lambda h: useful(h, folder, wanted))
            rows.append({"lang": lang, "query": query, "rank": at, "first": hrefs[0] if hrefs else None})
    return rows


def learner_shares(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """language -> (queries whose first result is useful, queries)."""
    return {lang: (sum(r["rank"] == 1 for r in rows if r["lang"] == lang), sum(r["lang"] == lang for r in rows))
            for lang in ("zh", "en")}


def learner_table(rows: list[dict]) -> str:
    lines = ["| learner's words (issue 56) | useful first result | share |", "|---|---|---|"]
    for lang, (good, asked) in learner_shares(rows).items():
        lines.append(f"| {lang} | {good} of {asked} | {good / asked:.0%} |")
    lines += ["", "| query | site | first useful at | first result |", "|---|---|---|---|"]
    lines += [f"| {r['query']} | {r['lang']} | {r['rank']} | `{(r['first'] or '').rsplit('/', 1)[-1][:70]}` |"
              for r in rows if r["rank"] != 1]
    return "\n".join(lines)


# --- the recipes found by the site's search (issue 53) ----------------------------------------------------------

@dataclass(frozen=True)
class RecipeQuery:
    """What a learner with a recipe's question types into the site's search: on the English site the asker's words
    with the library (``f"{library} {symptom}"``, the symptom alone when it names the library) or the message they
    paste; on the Chinese site the recipe's ``asked_zh`` (written with the recipe)."""
    recipe: str  # the bank id
    page: str    # recipes-NN_chapter (the built page)
    lang: str
    kind: str    # "words", "message" or "asked_zh"
    text: str


def recipe_queries() -> list[RecipeQuery]:
    """Every recipe of recipes/*.ipynb (their hooklab.recipe metadata, read as course.ask's index reads it) and its
    queries, from the bank's fields: none is the recipe's heading or text."""
    from tools.ask.index import recipe_entries
    from tools.recipes import bank

    questions = {q.id: q for q in bank.load()}
    out = []
    for entry in recipe_entries():
        rid, page = entry["id"].removeprefix("recipe:"), entry["page"].split("#")[0].removesuffix(".html")
        question = questions[rid]
        named = question.library.lower() in question.symptom.lower()
        out.append(RecipeQuery(rid, page, "en", "words",
                               question.symptom if named else f"{question.library} {question.symptom}"))
        if question.message:
            out.append(RecipeQuery(rid, page, "en", "message", question.message))
        if entry.get("asked_zh"):
            out.append(RecipeQuery(rid, page, "zh", "asked_zh", entry["asked_zh"]))
    return out


RECIPES_TOP = 3  # the recipe's anchor or its page among the first three results


def measure_recipes(page, base: str, site: Path, langs: tuple[str, ...] = ("en", "zh")) -> list[dict]:
    """Each recipe query asked of its site: the rank of the recipe's page among the pages listed, and of a link
    landing on the recipe (its ``recipe-<id>`` anchor, or an element inside it) among the links; whether the built
    site holds the recipe at all (a site built before the recipe was written does not)."""
    rows = []
    for case in recipe_queries():
        if case.lang not in langs:
            continue
        folder = site / case.lang
        path = folder / f"{case.page}.html"
        on_site = path.is_file() and f"recipe-{case.recipe}" in targets(path).element
        answer = ask(page, base, folder, case.lang, case.text)
        hrefs = answer["main"] + answer["more"]
        rows.append({"lang": case.lang, "recipe": case.recipe, "kind": case.kind, "query": case.text,
                     "page": case.page, "on site": on_site,
                     "page rank": rank(in_order(answer), lambda p: p == case.page),
                     "anchor rank": rank(hrefs, lambda h: leads_to(h, folder, (case.page,), {f"recipe-{case.recipe}"})),
                     "first": [page_of(h) for h in hrefs[:RECIPES_TOP]]})
    return rows


def recipe_found(row: dict) -> bool:
    return min(row["page rank"] or 99, row["anchor rank"] or 99) <= RECIPES_TOP


def recipe_shares(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """Per language (a question counts as found in a language when its message or its words find its recipe in the
    first three) and per kind of query: (found, asked), over the recipes the site holds."""
    table: dict[str, tuple[int, int]] = {}
    questions: dict[tuple[str, str], bool] = {}
    for r in rows:
        if not r["on site"]:
            continue
        found, asked = table.get(r["kind"], (0, 0))
        table[r["kind"]] = (found + recipe_found(r), asked + 1)
        key = (r["lang"], r["recipe"])
        questions[key] = questions.get(key, False) or recipe_found(r)
    for lang in ("en", "zh"):
        mine = [v for (lg, _), v in questions.items() if lg == lang]
        if mine:
            table[lang] = (sum(mine), len(mine))
    return table


def recipe_table(rows: list[dict], misses: bool = False) -> str:
    lines = ["| recipes (issue 53) | recipe in the first three | share |", "|---|---|---|"]
    for key, (found, asked) in recipe_shares(rows).items():
        name = {"en": "a question, en: its message or its words", "zh": "a question, zh: its asked_zh"}.get(key, key)
        lines.append(f"| {name} | {found} of {asked} | {found / asked:.0%} |")
    absent = sorted({r["recipe"] for r in rows if not r["on site"]})
    if absent:
        lines.append(f"\nnot on this built site (left out): {len(absent)}: {', '.join(absent)}")
    if misses:
        lines += [f"miss {r['lang']} {r['recipe']} [{r['kind']}] {r['query'][:90]!r} -> {r['first']}"
                  for r in rows if r["on site"] and not recipe_found(r)]
    return "\n".join(lines)


# --- what the built site holds ---------------------------------------------------------------------------------

class Article(html.parser.HTMLParser):
    """A built page's article: its text and its headings (level, text)."""

    def __init__(self, text: str):
        super().__init__()
        self.parts: list[str] = []
        self.headings: list[tuple[int, str]] = []
        self._in, self._heading = 0, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "article" and "bd-article" in (dict(attrs).get("class") or ""):
            self._in = 1
        if self._in and re.fullmatch(r"h[1-6]", tag):
            self._heading = [int(tag[1]), []]

    def handle_endtag(self, tag):
        if tag == "article":
            self._in = 0
        if self._heading and tag == f"h{self._heading[0]}":
            self.headings.append((self._heading[0], "".join(self._heading[1]).replace("#", "").strip()))
            self._heading = None

    def handle_data(self, data):
        if self._in:
            self.parts.append(data)
            if self._heading:
                self._heading[1].append(data)

    @property
    def text(self) -> str:
        return "".join(self.parts)


@functools.cache
def article(path: Path) -> Article:
    return Article(path.read_text(encoding="utf-8"))


def pages(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.html") if p.stem not in ("search", "genindex", "py-modindex"))


def holds(text: str, term: str, lang: str) -> bool:
    """Whether ``text`` holds ``term``: a Chinese term as a substring, an English one as whole words (case ignored;
    a plural s / es and a trailing number allowed: FSDP is in FSDP2)."""
    if lang == "zh" and re.search(r"[\u4e00-\u9fff]", term):
        return term in text
    words = r"[\s\-]+".join(re.escape(w) for w in re.split(r"[\s\-]+", term))
    return re.search(rf"(?<![\w]){words}(?:s|es)?\d*(?![\w])", text, re.I) is not None


def relevant(folder: Path, words: list[str], lang: str) -> set[str]:
    return {p for p in pages(folder) if all(holds(article(folder / f"{p}.html").text, w, lang) for w in words)}


def best_pages(folder: Path, term: str, lang: str) -> list[str]:
    """The pages built around ``term``, sorted: those with it in their highest heading (title, section, subsection),
    of those the ones that say it most often. Pages that tie on both are each the best page (a choice among them
    would depend on the order of a set, and the measure with it)."""
    def key(page: str) -> tuple[int, int]:
        a = article(folder / f"{page}.html")
        level = min((lvl for lvl, text in a.headings if holds(text, term, lang)), default=9)
        count = len(re.findall(re.escape(term), a.text, re.I))
        return level, -count
    keys = {page: key(page) for page in relevant(folder, [term], lang)}
    return sorted(page for page, k in keys.items() if k == min(keys.values())) if keys else []


# --- asking the site in a browser ----------------------------------------------------------------------------

def engine(folder: Path) -> str:
    return "pagefind" if (folder / "pagefind" / "pagefind.js").is_file() else "sphinx"


def ask(page, base: str, folder: Path, lang: str, query: str) -> dict[str, list[str]]:
    """The site's answer to ``query`` typed into its search page: {"main": hrefs in order, "more": hrefs listed
    after them (Pagefind: pages holding the words apart)}; an href keeps its #anchor."""
    page.goto(f"{base}{lang}/search.html?q={urllib.parse.quote(query)}")
    if engine(folder) == "pagefind":
        page.wait_for_selector("#search-results[data-done]", state="attached", timeout=60_000)
        read = "links => links.map(a => a.getAttribute('href'))"
        return {"main": page.eval_on_selector_all("ul.hooklab-search-main > li > a.hooklab-result", read),
                "more": page.eval_on_selector_all("ul.hooklab-search-more > li > a.hooklab-result", read)}
    page.wait_for_function("() => { const s = document.querySelector('#search-results .search-summary'); "
                           "return s && /\\d|match|没有/.test(s.textContent); }", timeout=60_000)
    hrefs = page.eval_on_selector_all("#search-results ul.search li a", "a => a.map(x => x.getAttribute('href'))")
    return {"main": hrefs, "more": []}


def page_of(href: str) -> str:
    path = urllib.parse.urlsplit(href).path.rstrip("/")
    name = path.rsplit("/", 1)[-1]
    return name[:-5] if name.endswith(".html") else "index"


def in_order(answer: dict[str, list[str]]) -> list[str]:
    """The pages listed, in order, each once."""
    return list(dict.fromkeys(page_of(h) for h in answer["main"] + answer["more"]))


def rank(items: list[str], wanted) -> int | None:
    return next((i for i, item in enumerate(items, 1) if wanted(item)), None)


class Targets(html.parser.HTMLParser):
    """Where each id of a built page leads: for every id, the names of the element it lands on and of each element
    around it (innermost first). An element's names are its id and the ids of the empty ``<span id>`` it holds
    (docutils writes a section's or a cell's further targets so: a Chinese row's ``row-<id>`` beside the anchor made
    from its heading, a cell's ``symptom-<id>`` beside its ``explain-NN-<cell>``); an empty span's own id leads to
    the element holding it."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, text: str):
        super().__init__()
        self.names: list[list[str]] = []      # element number -> its names
        self.parent: list[int | None] = []    # element number -> the element around it
        self.element: dict[str, int] = {}     # id -> the element it lands on
        self._stack: list[tuple[str, int]] = []
        self._span: tuple[str, int] | None = None  # a span with an id, open and empty so far
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self._span = None
        ident = dict(attrs).get("id")
        number = len(self.names)
        self.names.append([ident] if ident else [])
        self.parent.append(self._stack[-1][1] if self._stack else None)
        if ident:
            self.element.setdefault(ident, number)
        if tag not in self.VOID:
            self._stack.append((tag, number))
            if tag == "span" and ident:
                self._span = (ident, number)

    def handle_endtag(self, tag):
        span, self._span = self._span, None
        if span and tag == "span" and self._stack and self._stack[-1][1] == span[1]:
            holder = self.parent[span[1]]
            if holder is not None:  # an empty span: its id is a name of the element holding it
                self.names[holder].append(span[0])
                self.element[span[0]] = holder
        while self._stack:
            if self._stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if data.strip():
            self._span = None

    def around(self, ident: str) -> list[str]:
        """The names of the element ``ident`` leads to and of every element around it; [] for an unknown id."""
        number, found = self.element.get(ident), []
        while number is not None:
            found += self.names[number]
            number = self.parent[number]
        return found


@functools.cache
def targets(path: Path) -> Targets:
    return Targets(path.read_text(encoding="utf-8"))


def leads_to(href: str, folder: Path, pages: tuple[str, ...], names: set[str]) -> bool:
    """Whether ``href`` (a result's link) lands in one of ``pages`` on an element named one of ``names`` or inside
    one."""
    page, fragment = page_of(href), urllib.parse.unquote(urllib.parse.urlsplit(href).fragment)
    return page in pages and bool(fragment) and bool(set(targets(folder / f"{page}.html").around(fragment)) & names)


def pasted_ranks(answer: dict[str, list[str]], case: Pasted, folder: Path) -> dict[str, int | None]:
    """1-based ranks in the listed results of: a symptom-index row of the case (the symptom page's row
    ``row-<id>``, or the row of notebook 00's table, ``symptom-row-<id>``, of one of the case's symptoms; the link
    may name the row by another of its anchors, or an element inside it), a cell that explains it (the cell the
    site marks ``symptom-<id>``, whichever of its anchors the link names), and, for a search that links pages only,
    the symptom page and the page of such a cell."""
    hrefs = answer["main"] + answer["more"]
    rows = {f"row-{s}" for s in case.symptoms} | {f"symptom-row-{s}" for s in case.symptoms}
    cells = {f"symptom-{s}" for s in case.symptoms}
    homes = {p for p in pages(folder) if p[:2].isdigit() and cells & set(targets(folder / f"{p}.html").element)}
    return {"row": rank(hrefs, lambda h: leads_to(h, folder, ("symptoms", "00_introduction"), rows)),
            "cell": rank(hrefs, lambda h: leads_to(h, folder, tuple(homes), cells)),
            "symptom page": rank(in_order(answer), lambda p: p == "symptoms"),
            CELL_PAGE: rank(in_order(answer), lambda p: p in homes)}


def measure(page, base: str, site: Path, *, whole_terms: bool = True) -> dict:
    """Every case on the site served at ``base`` from folder ``site`` (with zh/ and en/); ``whole_terms=False`` leaves
    out the 80 whole terms and asks each pasted message on one site only, the Chinese and the English in turn (102 of
    the 153 searches: tests/tools/test_browser.py asks them all weekly)."""
    out: dict = {"terms": [], "together": [], "topic": [], "pasted": [], "matrix": []}
    for lang, terms in (("zh", ZH_TERMS), ("en", EN_TERMS)) if whole_terms else ():
        folder = site / lang
        for term in terms:
            answer = ask(page, base, folder, lang, term)
            listed, main = in_order(answer), list(dict.fromkeys(page_of(h) for h in answer["main"]))
            want, best = relevant(folder, [term], lang), best_pages(folder, term, lang)
            out["terms"].append({"lang": lang, "query": term, "relevant": sorted(want), "listed": listed,
                                 "main": main, "best": best, "best rank": rank(listed, lambda p: p in best)})
    folder = site / "zh"
    for query, words in ZH_TOGETHER.items():
        listed = in_order(ask(page, base, folder, "zh", query))
        out["together"].append({"query": query, "relevant": sorted(relevant(folder, words, "zh")), "listed": listed})
    for (lang, query), topic in TOPIC_FIRST.items():
        listed = in_order(ask(page, base, site / lang, lang, query))
        out["topic"].append({"lang": lang, "query": query, "topic": topic,
                             "rank": rank(listed, lambda p: p == topic)})
    for lang, query, key in MATRIX:
        answer = ask(page, base, site / lang, lang, query)
        main = list(dict.fromkeys(page_of(h) for h in answer["main"]))
        out["matrix"].append({"lang": lang, "query": query, "key": key, "first": (answer["main"] or [""])[0],
                              "rank": rank(main, lambda p: p == "hook_matrix")})
    for number, case in enumerate(PASTED):
        for lang in ("zh", "en") if whole_terms else (("zh", "en")[number % 2],):
            answer = ask(page, base, site / lang, lang, case.text)
            out["pasted"].append({"lang": lang, "query": case.text, "source": case.source,
                                  **pasted_ranks(answer, case, site / lang), "links": answer["main"][:8]})
    return out


def scores(rows: list[dict]) -> dict[str, float]:
    """Recall (pages found of the pages holding the term), precision (of the pages listed: all; main: the list
    before the 'not together' line), the best page first and in the top 3."""
    recall = [len(set(r["listed"]) & set(r["relevant"])) / len(r["relevant"]) for r in rows if r["relevant"]]
    precision = [len(set(r["listed"]) & set(r["relevant"])) / len(r["listed"]) for r in rows if r["listed"]]
    main = [len(set(r["main"]) & set(r["relevant"])) / len(r["main"]) for r in rows if r["main"]]
    scored = [r for r in rows if r["best"]]
    return {"queries": len(rows), "recall": sum(recall) / max(1, len(recall)),
            "precision": sum(precision) / max(1, len(precision)), "precision (main list)": sum(main) / max(1, len(main)),
            "best first": sum(r["best rank"] == 1 for r in scored), "best in top 3": sum(
                (r["best rank"] or 99) <= 3 for r in scored), "scored": len(scored)}


CELL_PAGE = "cell's page"


def tables(result: dict) -> str:
    lines = []
    for lang in ("zh", "en"):
        rows = [r for r in result["terms"] if r["lang"] == lang]
        s = scores(rows)
        lines.append(f"{lang}, {s['queries']} whole terms: recall {s['recall']:.3f}, precision {s['precision']:.3f} "
                     f"(main list {s['precision (main list)']:.3f}), best page first {s['best first']}/{s['scored']}, "
                     f"top 3 {s['best in top 3']}/{s['scored']}")
    lines += ["", "| typed together | pages holding every word | found | listed |", "|---|---|---|---|"]
    found_all = want_all = 0
    for r in result["together"]:
        found = len(set(r["listed"]) & set(r["relevant"]))
        found_all, want_all = found_all + found, want_all + len(r["relevant"])
        lines.append(f"| {r['query']} | {len(r['relevant'])} | {found} | {len(r['listed'])} |")
    lines += [f"| all | {want_all} | {found_all} | |", "", "| topic query | its notebook | rank |", "|---|---|---|"]
    lines += [f"| {r['lang']} `{r['query']}` | {r['topic'][:2]} | {r['rank']} |" for r in result["topic"]]
    lines += ["", "| hook matrix query | site | first result | matrix page's rank |", "|---|---|---|---|"]
    lines += [f"| `{r['query']}` | {r['lang']} | `{r['first'].rsplit('/', 1)[-1]}` | {r['rank']} |"
              for r in result["matrix"]]
    lines += ["", "| # | pasted (start) | from | site | row | cell | symptom page | cell's page |",
              "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(result["pasted"]):
        start = r["query"].replace("\n", " ")[:60].replace("|", "\\|")
        lines.append(f"| {i // 2 + 1} | {start}… | {r['source']} | {r['lang']} | {r['row']} | {r['cell']} | "
                     f"{r['symptom page']} | {r[CELL_PAGE]} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import http.server
    import threading

    from playwright.sync_api import sync_playwright

    site = Path(argv[0]).resolve()
    chromium = next((a for a in argv[1:] if not a.startswith("--")), "/usr/bin/chromium")
    only = next((a.split("=", 1)[1] for a in argv if a.startswith("--only=")), "terms,learner,recipes")
    parts = set(only.split(","))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium,
                                                 args=["--no-sandbox", "--disable-dev-shm-usage"])
            page = browser.new_page()
            base = f"http://127.0.0.1:{server.server_address[1]}/"
            result = measure(page, base, site) if "terms" in parts else None
            learner = measure_learner(page, base, site) if "learner" in parts else None
            held = measure_learner(page, base, site, LEARNER_HELD_OUT) if "heldout" in parts else None
            recipes = measure_recipes(page, base, site) if "recipes" in parts else None
            browser.close()
    finally:
        server.shutdown()
    print(f"engine: {engine(site / 'zh')}\n")
    if result is not None:
        print(tables(result))
    if learner is not None:
        print("\n" + learner_table(learner))
    if held is not None:
        print("\nheld out:\n" + learner_table(held))
    if recipes is not None:
        print("\n" + recipe_table(recipes, misses="--misses" in argv))
    if "--json" in argv:
        import json
        print(json.dumps({"cases": result, "learner": learner, "held out": held, "recipes": recipes},
                         ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
