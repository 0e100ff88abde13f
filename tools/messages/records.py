"""What a record of ``docs/hook_messages.json`` names and how records are counted: the sources a message comes
from, the families it is filed under (each with its title in both languages), and the coverage per source.

The message index (:mod:`tools.messages.hook_messages`) writes the records; the symptom index's page
(:mod:`tools.messages.symptoms`) counts and groups them. Both import this module, and it imports neither.

>>> [row["messages"] for row in coverage([{"source": "torch", "status": "cell"}])][:1]
[1]
>>> dict(excuses([{"status": "excused", "reason": "internal"}, {"status": "open"}]))
{'internal': 1}
"""
from __future__ import annotations

from collections import Counter
from typing import Any

TORCH_PY = "torch"
TORCH_CPP = "torch C++"
CURATED = "curated"
# source name -> the top-level packages it reads
LIBRARIES = {"accelerate": ("accelerate",), "diffusers": ("diffusers",), "peft": ("peft",), "captum": ("captum",),
             "lightning": ("pytorch_lightning", "lightning_fabric"), "timm": ("timm",), "torchao": ("torchao",)}
SOURCES = (TORCH_PY, TORCH_CPP, *LIBRARIES, CURATED)


FAMILIES = {
    "tensor-hooks": ("张量钩子", "Tensor hooks"),
    "node-hooks": ("Node 钩子与多梯度钩子", "Node and multi-grad hooks"),
    "module-hooks": ("模块钩子", "Module hooks"),
    "saved-tensor-hooks": ("保存张量钩子", "Saved-tensor hooks"),
    "checkpoint": ("激活检查点", "Activation checkpointing"),
    "state-dict-hooks": ("state_dict 钩子", "state_dict hooks"),
    "optimizer-hooks": ("优化器钩子", "Optimizer hooks"),
    "parametrize": ("参数化、剪枝与权重归一化", "Parametrizations, pruning and weight norm"),
    "ddp": ("DDP 通信钩子", "DDP communication hooks"),
    "fsdp": ("FSDP 与 FSDP2", "FSDP and FSDP2"),
    "distributed": ("其他分布式钩子", "Other distributed hooks"),
    "compile": ("torch.compile 与钩子", "torch.compile and hooks"),
    "script-fx-export": ("TorchScript、FX 与 export", "TorchScript, FX and export"),
    "views-and-in-place": ("视图与原地操作", "Views and in-place operations"),
    "autograd": ("自动求导引擎", "The autograd engine"),
    "devices": ("设备与卸载", "Devices and offloading"),
    "accelerate": ("accelerate", "accelerate"),
    "diffusers": ("diffusers", "diffusers"),
    "peft": ("PEFT", "PEFT"),
    "captum": ("captum", "captum"),
    "lightning": ("Lightning", "Lightning"),
    "timm": ("timm", "timm"),
    "torchao": ("torchao", "torchao"),
    "python": ("Python 本身", "Python itself"),
}


def coverage(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per source (and a total row): messages, shown in a cell, triggered in a test, excused, open."""
    rows = []
    for source in (*SOURCES, "all"):  # every source, also one without messages (torchao has none)
        mine = [r for r in records if source == "all" or r["source"] == source]
        count = Counter(r["status"] for r in mine)
        rows.append({"source": source, "messages": len(mine), "cell": count["cell"], "test": count["test"],
                     "excused": count["excused"], "open": count["open"]})
    return rows


def excuses(records: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["reason"] for r in records if r["status"] == "excused")
