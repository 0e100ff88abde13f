"""The data file ``docs/hook_messages.json`` and its vocabulary (sources, families): reading it, what changed between
two versions, the coverage it states. It imports nothing else of the tools (the symptom index's page reads it)."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "hook_messages.json"
EXAMPLES = ROOT / "docs" / "hook_message_examples.json"

TORCH_PY = "torch"
TORCH_CPP = "torch C++"
CURATED = "curated"
# source name -> the top-level packages it reads
LIBRARIES = {"accelerate": ("accelerate",), "diffusers": ("diffusers",), "peft": ("peft",), "captum": ("captum",),
             "lightning": ("pytorch_lightning", "lightning_fabric"), "timm": ("timm",), "torchao": ("torchao",)}
SOURCES = (TORCH_PY, TORCH_CPP, *LIBRARIES, CURATED)


@dataclass
class Message:
    """One message of the data file: its words, where they come from, the family of hooks it is about (made by
    ``hook_messages.extract``, read by ``hook_messages_status``: here, so that both import it from a module that
    imports neither)."""

    id: str
    source: str
    kind: str
    family: str
    text: str
    call: str
    places: list[str] = field(default_factory=list)
    detail: str = ""
    sources: list[str] = field(default_factory=list)  # every source with these words (the first is ``source``)

    def as_json(self) -> dict[str, Any]:
        out = {"id": self.id, "source": self.source, "kind": self.kind, "family": self.family, "call": self.call,
               "text": self.text, "places": self.places}
        if len(self.sources) > 1:
            out["sources"] = self.sources
        if self.detail:
            out["detail"] = self.detail
        return out


class HookMessageError(Exception):
    """The triage file or the data is inconsistent; the message says what to fix."""


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


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


def _read_json(path: Path, restore: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HookMessageError(f"cannot read {path}: {exc}. It is written by the tools, not by hand: restore it with "
                               f"`git checkout -- {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`"
                               f" or {restore}") from None


def load(path: Path = DATA) -> dict[str, Any]:
    """The data file; :class:`HookMessageError` naming it, and how to restore it, when it cannot be read.

    >>> len(load()["messages"]) > 100
    True
    """
    data = _read_json(path, "write it again with `python -m tools.messages.hook_messages --write`")
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise HookMessageError(f"{path} holds no list of messages: restore it with `git checkout` or write it again "
                               "with `python -m tools.messages.hook_messages --write`")
    return data


def load_examples(root: Path = ROOT) -> dict[str, str]:
    path = root / "docs" / "hook_message_examples.json"
    if not path.is_file():
        return {}
    examples = _read_json(path, "store them again with `python -m tools.messages.hook_messages --examples`")
    if not isinstance(examples, dict):
        raise HookMessageError(f"{path} is not an object of message id -> example: restore it with `git checkout`")
    return examples


def difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What changed between two versions of the data, in words: texts added and removed per source, then statuses."""
    lines = []
    before = {(m["source"], m["text"]): m for m in old.get("messages", [])}
    after = {(m["source"], m["text"]): m for m in new.get("messages", [])}
    for source in SOURCES:
        added = sorted(t for s, t in after.keys() - before.keys() if s == source)
        removed = sorted(t for s, t in before.keys() - after.keys() if s == source)
        if added or removed:
            lines.append(f"{source} ({old.get('versions', {}).get(source, '?')} -> "
                         f"{new.get('versions', {}).get(source, '?')}): {len(added)} message(s) added, "
                         f"{len(removed)} removed")
            lines += [f"  + {t[:160]!r}" for t in added] + [f"  - {t[:160]!r}" for t in removed]
    for key in sorted(before.keys() & after.keys()):
        a, b = before[key], after[key]
        if a != b:
            changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            lines.append(f"{b['id']}: {', '.join(changed)} changed")
    old_left, new_left = left_out_texts(old), left_out_texts(new)
    for category in sorted(old_left.keys() | new_left.keys()):
        added = sorted(new_left.get(category, set()) - old_left.get(category, set()))
        removed = sorted(old_left.get(category, set()) - new_left.get(category, set()))
        if added or removed:
            lines.append(f"left out ({category}): {len(added)} text(s) added, {len(removed)} removed")
            lines += [f"  + {t[:160]!r}" for t in added] + [f"  - {t[:160]!r}" for t in removed]
    if old.get("left_out") != new.get("left_out") and old_left == new_left:
        lines.append("left out: the places of the texts changed")
    return lines


# --- coverage -----------------------------------------------------------------------------------------------

def coverage(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per source (and a total row): messages, shown in a cell, triggered in a test, excused, open."""
    rows = []
    for source in (*SOURCES, "all"):  # every source, also one without messages (torchao has none)
        mine = [r for r in records if source == "all" or r["source"] == source]
        count = Counter(r["status"] for r in mine)
        rows.append({"source": source, "messages": len(mine), "cell": count["cell"], "test": count["test"],
                     "excused": count["excused"], "open": count["open"]})
    return rows


def left_out_texts(data: dict[str, Any]) -> dict[str, set[str]]:
    """category ("source: reason") -> the texts left out as another meaning of "hook" (``data["left_out"]``: each
    category's texts with their places)."""
    left = data.get("left_out", {})
    return {category: {e["text"] for e in entries if isinstance(e, dict) and "text" in e}
            for category, entries in left.items() if isinstance(entries, list)}


def excuses(records: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["reason"] for r in records if r["status"] == "excused")


def report(data: dict[str, Any]) -> str:
    lines = ["source       messages  cell  test  excused  open  triggered"]
    for row in coverage(data["messages"]):
        triggered = row["cell"] + row["test"]
        share = f"{triggered}/{row['messages'] - row['excused']}"
        lines.append(f"{row['source']:<12} {row['messages']:>8} {row['cell']:>5} {row['test']:>5} "
                     f"{row['excused']:>8} {row['open']:>5}  {share}")
    lines.append("excused by reason: " + ", ".join(f"{k} {v}" for k, v in sorted(excuses(data['messages']).items())))
    lines.append("left out (another meaning of 'hook'), texts per category: " +
                 ", ".join(f"{k}: {len(v)}" for k, v in left_out_texts(data).items()))
    return "\n".join(lines)

