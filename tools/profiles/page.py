"""The library profiles on the course's website: a page that lists them all (``profiles``) and a page per library
(``profiles-<slug>``), in each language, from hooklab/course/assets/profiles/library_profiles.json.

Each library's page carries its own API names, so the site's search finds it by them (``AlignDevicesHook``,
``wandb.watch``); the behaviour-matrix cells its hooks inherit are shown with what the matrix observed.
tools/site/build.py's ``extra_pages`` takes :func:`pages`.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..hook_matrix.page import observed

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "docs" / "hook_matrix.json"
TEXT = {
    "en": {"title": "Library profiles: what each library does to your hooks",
           "intro": "Which hooks a library puts on your model, when they run against yours, what survives a copy, a "
                    "state dict, compiling and checkpointing, and how to take them off: measured by running each "
                    "library on a CPU with a small model (your four module hooks registered before and after its entry "
                    "point, every hook on the hooked module logged as it fires), or, where a library needs a GPU or "
                    "does not install beside the course's PyTorch, read from its source at the pinned links. In a "
                    "notebook, `print(course.profile(\"name\"))` reads one; notebook 15, section 10, teaches how to "
                    "find out the same for a library that has no profile.",
           "library": "Library", "category": "Area", "status": "How we know", "puts": "What it puts on the model",
           "measured": "measured: {name} {version} on torch {torch}", "source": "read from its source",
           "entry": "Entry point", "installs": "What it puts on the model", "during": "What is on the model while it runs",
           "none": "nothing", "order": "One forward and backward, in firing order",
           "order_note": "Your hooks are registered on `{target}` before (`yours, before`) and after (`yours, after`) "
                         "the entry point; a library's hook on that module is named by its owner and kind.",
           "forward": "forward", "backward": "backward", "during_entry": "during the entry point",
           "survives": "What survives", "inherits": "The behaviour-matrix cells its hooks inherit",
           "remove": "How to take it off", "api": "Its own hook or callback API", "surprises": "What you might not expect",
           "facts": "More facts, measured", "names": "Its API names", "sources": "Sources",
           "why_source": "Why it is not run here", "order_source": "When its hooks run against yours (from the source)",
           "where": "where", "kind": "kind", "what": "what", "owner": "owner",
           "survival": {"deepcopy": "`copy.deepcopy`", "state_dict_keys": "`state_dict()` keys",
                        "loads_fresh_state_dict": "loading a fresh model's state dict",
                        "compile": "`torch.compile` (eager backend)", "checkpoint": "non-reentrant checkpointing",
                        "accumulate": "two backward passes", "removed": "its own removal"},
           "swapped": "Modules it replaced", "yours": "Your hooks registered before the entry point, after it",
           "back": "All library profiles"},
    "zh": {"title": "库的钩子画像：每个库对你的钩子做了什么",
           "intro": "一个库往你的模型上装了哪些钩子、它们和你的钩子谁先谁后、深拷贝、状态字典、编译和检查点之后还剩什么、"
                    "怎样把它们拿掉：每个库都在 CPU 上用一个小模型实际运行测得（在它的入口前后各注册你的四个模块钩子，"
                    "被挂钩模块上的每个钩子触发时都记下来）；需要 GPU、或无法与课程的 PyTorch 装在一起的库，则按固定"
                    "版本的链接阅读源码得来。在笔记本里用 `print(course.profile(\"库名\"))` 读一份画像；第 15 课第 10 节"
                    "教你对一个没有画像的库自己查出同样的事。",
           "library": "库", "category": "领域", "status": "依据", "puts": "装到模型上的东西",
           "measured": "实测：{name} {version}，torch {torch}", "source": "读源码",
           "entry": "入口", "installs": "装到模型上的东西", "during": "它运行期间模型上有什么", "none": "没有",
           "order": "一次前向和反向，按触发顺序",
           "order_note": "你的钩子注册在 `{target}` 上，一组在入口之前（`yours, before`），一组在入口之后（`yours, after`）；"
                         "库在这个模块上的钩子以它的所属者和种类标出。",
           "forward": "前向", "backward": "反向", "during_entry": "入口调用期间",
           "survives": "哪些能保留", "inherits": "它的钩子继承的行为矩阵格子",
           "remove": "如何移除", "api": "它自己的钩子或回调接口", "surprises": "可能出乎你意料的地方",
           "facts": "更多实测事实", "names": "它的 API 名称", "sources": "出处",
           "why_source": "为什么这里不运行它", "order_source": "它的钩子与你的钩子的先后（读源码）",
           "where": "位置", "kind": "种类", "what": "内容", "owner": "所属",
           "survival": {"deepcopy": "`copy.deepcopy`", "state_dict_keys": "`state_dict()` 的键",
                        "loads_fresh_state_dict": "加载一个新模型的状态字典", "compile": "`torch.compile`（eager 后端）",
                        "checkpoint": "非重入式检查点", "accumulate": "两次反向传播", "removed": "用它自己的方法移除"},
           "swapped": "它换掉的模块", "yours": "你在入口之前注册的钩子，入口之后在哪里",
           "back": "全部库的钩子画像"},
}


CATEGORY_ZH = {"trackers and trainers": "实验跟踪与训练框架", "distributed and memory": "分布式与内存",
               "quantization and compression": "量化与压缩", "model libraries": "模型库",
               "interpretability and attribution": "可解释性与归因", "measurement": "测量", "privacy": "隐私",
               "serving": "推理服务"}
ZH_VALUES = [(r"^same$", "不变"), (r"^(\d+) of (\d+) kept$", r"\2 个中保留 \1 个"), (r"^clean$", "键完全一致"),
             (r"^accumulates$", "照常累加"), (r"^nothing left$", "不留痕迹"), (r"^raises (\w+)$", r"抛出 \1"),
             (r"^no gradients$", "参数上没有梯度"), (r"^(\d+) added, (\d+) gone$", r"多 \1 个，少 \2 个"),
             (r"^(\d+) missing, (\d+) unexpected$", r"缺 \1 个，多 \2 个"),
             (r"^does not accumulate as two backward passes do$", "不像两次反向那样累加"),
             (r"(\d+)x -> (\d+)x", r"\1 次 → \2 次"), (r"^(\d+) left: ", r"留下 \1 个："), (r"^nothing$", "没有"),
             (r"^kept$", "还在原处"), (r"^taken off$", "被拿掉了"), (r"^moved to (.+)$", r"移到了 \1 上")]


def value(text: str, lang: str) -> str:
    """A survival result in ``lang`` (the file keeps the English words).

    >>> value("3 of 4 kept", "zh"), value("torch: forward_pre x 1x -> 2x", "zh"), value("same", "en")
    ('4 个中保留 3 个', 'torch: forward_pre x 1 次 → 2 次', 'same')
    """
    if lang != "zh":
        return text
    for pattern, replacement in ZH_VALUES:
        text = re.sub(pattern, replacement, text)
    return text


def _esc(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def load(path: Path | None = None) -> dict[str, Any]:
    from .generate import PROFILES
    return json.loads((path or PROFILES).read_text(encoding="utf-8"))


def _matrix() -> dict[str, Any]:
    return json.loads(MATRIX.read_text(encoding="utf-8"))["cells"] if MATRIX.exists() else {}


def _status(record: dict[str, Any], t: dict[str, str]) -> str:
    measured = record.get("measured")
    if record["status"] == "source" or not measured:
        return t["source"]
    return t["measured"].format(name=record["name"], version=measured.get("version"), torch=measured.get("torch"))


def _puts(record: dict[str, Any], t: dict[str, str]) -> str:
    probe = (record.get("measured") or {}).get("probe")
    rows = probe["installs"] + (probe.get("during") or []) if probe else list(record.get("installs", []))
    kinds = sorted({r["kind"] for r in rows})
    return ", ".join(kinds) if kinds else t["none"]


def index_page(doc: dict[str, Any], lang: str) -> str:
    """The page that lists every profile."""
    t = TEXT[lang]
    lines = ["(profiles)=", f"# {t['title']}", "", t["intro"], "",
             f"| {t['library']} | {t['category']} | {t['status']} | {t['puts']} |", "|---|---|---|---|"]
    for slug, record in doc["libraries"].items():
        category = CATEGORY_ZH.get(record["category"], record["category"]) if lang == "zh" else record["category"]
        lines.append(f"| [{_esc(record['title'])}](profiles-{slug}.md) | {_esc(category)} | "
                     f"{_esc(_status(record, t))} | {_esc(_puts(record, t))} |")
    return "\n".join(lines) + "\n"


def _rows(rows: list[dict[str, str]], t: dict[str, str]) -> list[str]:
    if not rows:
        return [t["none"], ""]
    keys = [k for k in ("where", "kind", "what", "owner") if any(k in r for r in rows)]
    out = ["| " + " | ".join(t[k] for k in keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(_esc(r.get(k, "")) for k in keys) + " |" for r in rows]
    return [*out, ""]


def library_page(slug: str, record: dict[str, Any], lang: str, matrix: dict[str, Any],
                 programs: dict[str, Any] | None = None) -> str:
    """One library's page; ``programs``: docs/programs/profiles.json's, each surprise followed by its program (and
    what to do instead), collapsed."""
    t, words = TEXT[lang], record["words"][lang]
    lines = [f"(profiles-{slug})=", f"# {record['title']}", "", f"[{t['back']}](profiles.md) · {_esc(_status(record, t))}",
             "", words["summary"], "", f"**{t['entry']}**: `{record['entry']}`", ""]
    probe = (record.get("measured") or {}).get("probe")
    if probe:
        lines += [f"## {t['installs']}", "", *_rows(probe["installs"], t)]
        if probe.get("during") is not None:
            lines += [f"## {t['during']}", "", *_rows(probe["during"], t)]
        if probe.get("modules_replaced"):
            lines += [f"## {t['swapped']}", "", *[f"- `{change}`" for change in probe["modules_replaced"]], ""]
        if probe.get("your_hooks"):
            lines += [f"## {t['yours']}", "", "| | |", "|---|---|"]
            lines += [f"| `{kind}` | {_esc(value(state, lang))} |" for kind, state in probe["your_hooks"].items()]
            lines.append("")
        lines += [f"## {t['order']}", "", t["order_note"].format(target=_target(record)), ""]
        for part in ("entry", "forward", "backward"):
            steps = probe["order"].get(part) or []
            if steps or part != "entry":
                name = t["during_entry"] if part == "entry" else t[part]
                lines.append(f"- {name}: " + (" → ".join(f"`{s}`" for s in steps) or t["none"]))
        lines += ["", f"## {t['survives']}", "", "| | |", "|---|---|"]
        results = {**probe["survives"], **({"removed": probe["removed"]} if "removed" in probe else {})}
        lines += [f"| {label} | {_esc(value(results[k], lang))} |" for k, label in t["survival"].items() if k in results]
        lines.append("")
        if probe["inherits"]:
            lines += [f"## {t['inherits']}", ""]
            lines += [f"- [`{cell}`](hook_matrix.md): {_esc(observed(matrix[cell], lang))}" for cell in probe["inherits"]
                      if cell in matrix]
            lines.append("")
    else:
        lines += [f"## {t['why_source']}", "", (record.get("why_source") or {}).get(lang, ""), "",
                  f"## {t['installs']}", "", *_rows(list(record.get("installs", [])), t)]
        if record.get("order"):
            lines += [f"## {t['order_source']}", "", record["order"][lang], ""]
    lines += [f"## {t['remove']}", "", words["remove"], "", f"## {t['api']}", "", words["api"], ""]
    if record.get("surprises"):
        from .programs import surprise_lines
        lines += [f"## {t['surprises']}", ""]
        for i, s in enumerate(record["surprises"], 1):
            pid = f"{slug}:source-{i}" if record["status"] == "source" else f"{slug}:{s['fact']}"
            lines += [f"- {s[lang]}", "", *surprise_lines(pid, (programs or {}).get(pid), lang)]
    facts = (record.get("measured") or {}).get("facts")
    if facts:
        lines += [f"## {t['facts']}", "", "| | |", "|---|---|"]
        lines += [f"| `{key}` | {_esc(json.dumps(value, ensure_ascii=False))} |" for key, value in facts.items()]
        lines.append("")
    if record.get("names"):
        lines += [f"## {t['names']}", "", ", ".join(f"`{n}`" for n in record["names"]), ""]
    if record.get("sources"):
        lines += [f"## {t['sources']}", "", *[f"- <{s}>" for s in record["sources"]], ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _target(record: dict[str, Any]) -> str:
    from .libraries import modules
    module = modules().get(record["slug"])
    return getattr(module, "TARGET", "") or "the model"


def slugs_for(libraries: list[str], path: Path | None = None) -> list[tuple[str, str]]:
    """(name, slug) of the profiles of ``libraries`` (names as a recipe's metadata gives them: ``torch_geometric``,
    ``pytorch-lightning``), in that order, those without a profile left out.

    >>> slugs_for(["torch", "accelerate", "no-such-library"])
    [('accelerate', 'accelerate')]
    """
    from .generate import PROFILES
    if not (path or PROFILES).exists():
        return []
    doc = load(path)

    def norm(name: str) -> str:
        return name.lower().replace("-", "_").replace(" ", "_")
    names = [norm(record["name"]) for record in doc["libraries"].values()]
    known = {}
    for slug, record in doc["libraries"].items():
        known.setdefault(norm(slug), (record["name"], slug))
        if names.count(norm(record["name"])) == 1:  # "torch" names fourteen of PyTorch's own tools: none of them
            known.setdefault(norm(record["name"]), (record["name"], slug))
    return list(dict.fromkeys(known[norm(n)] for n in libraries if norm(n) in known))


def pages(path: Path | None = None) -> dict[str, Callable[[Path, str, list[str]], str]]:
    """The site's profile pages: ``profiles`` and ``profiles-<slug>``, name -> a function of (root, language,
    notebook names), as tools/site/build.py's ``extra_pages`` takes them; none when the file is missing."""
    from .generate import PROFILES
    if not (path or PROFILES).exists():
        return {}
    doc = load(path)
    found: dict[str, Callable[[Path, str, list[str]], str]] = {"profiles": lambda root, lang, names: index_page(doc, lang)}
    matrix = _matrix()
    from .programs import load_programs
    programs = load_programs()
    for slug, record in doc["libraries"].items():
        found[f"profiles-{slug}"] = (lambda root, lang, names, slug=slug, record=record:
                                     library_page(slug, record, lang, matrix, programs))
    return found
