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
from . import rows
from .rows import HOW_ZH

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "docs" / "hook_matrix.json"
LIBRARY_MATRIX = ROOT / "docs" / "library_matrix.json"
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
           "back": "All library profiles",
           "operations": "What its operations do to your hooks (the library matrix)",
           "operations_note": "Each operation was run on a small model with one hook of each family registered on "
                              "`{target}` (or its first parameter, or around the run) before it and after it, then a "
                              "forward, a backward, `state_dict()` and `load_state_dict()`, and again after "
                              "`handle.remove()`. A cell is listed when it differs from the same hook on the model "
                              "before the operation; the fix is given where the matrix proves it (registered after the "
                              "operation, the hook behaves as without it). Cells observed here: {cells}, unusual: "
                              "{unusual}. `python -m tools.profiles.cells` observes them again.",
           "as_without": "every hook behaves as without the operation ({cells} cells)",
           "family": "hook", "when": "registered", "how": "how it differs", "fix": "fix",
           "before": "before", "after": "after", "operation_raised": "the operation itself raised: `{error}`",
           "not_yet": "Operations of the table not observed yet: {names}.",
           "cannot": "Cannot run on this machine: {names}.",
           "in_short": "In short: what its operations do to your hooks",
           "in_short_note": "From the library matrix's rows below: of {observed} operations observed, {changing} "
                            "change what one of your hooks does (the worst first); the table of each operation further "
                            "down says how, hook by hook.",
           "in_short_row": "{before} of {families} hooks registered before it behave otherwise, {after} registered "
                           "after it; registering after it is the fix for {fixed}. Seen most, in cells: {most}.",
           "in_short_same": "Every hook behaves as without them: {names}.",
           "program": "The program that observes these cells again",
           "prints": "It prints (its warnings first, each once; then each cell as the matrix stores it, `without the "
                     "operation` being its baseline):"},
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
           "back": "全部库的钩子画像",
           "operations": "它的各个操作对你的钩子做了什么（库矩阵）",
           "operations_note": "每个操作都在一个小模型上实际运行：每个钩子族各一个钩子，注册在 `{target}`（或它的第一个参数，"
                              "或包住整次运行）上，一次在操作之前、一次在操作之后；然后前向、反向、`state_dict()`、"
                              "`load_state_dict()`，`handle.remove()` 之后再跑一遍。和不做这个操作时同一个钩子的表现不同的格子"
                              "才列出来；矩阵能证明修法的地方写出修法（在操作之后注册，钩子就和没有这个操作时一样）。"
                              "这里观察的格子：{cells}，不寻常的：{unusual}。`python -m tools.profiles.cells` 会重新观察。",
           "as_without": "每个钩子都和没有这个操作时一样（{cells} 格）",
           "family": "钩子", "when": "注册时机", "how": "哪里不同", "fix": "修法",
           "before": "操作之前", "after": "操作之后", "operation_raised": "操作本身就报错：`{error}`",
           "not_yet": "操作表里还没有观察的操作：{names}。",
           "cannot": "这台机器上跑不了：{names}。",
           "in_short": "简而言之：它的各个操作对你的钩子做了什么",
           "in_short_note": "取自下面库矩阵的各行：观察过的 {observed} 个操作中，{changing} 个会改变你的某个钩子的行为"
                            "（最严重的在前）；再往下每个操作的表格逐个钩子说明怎样不同。",
           "in_short_row": "在它之前注册的 {families} 种钩子中 {before} 种的行为与不做这个操作时不同，之后注册的有 {after} 种；"
                           "改在它之后注册能修好 {fixed} 种。最常见的不同（按格子数）：{most}。",
           "in_short_same": "每种钩子都和不做这些操作时一样：{names}。",
           "program": "把这些格子重新观察一遍的程序", "prints": "它打印（先是警告，每条一次；然后是"
           "每个格子，按矩阵保存的样子，`without the operation` 是它的基线）："},
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


FIX_ZH = {"register the hook after the operation": "在操作之后注册钩子"}


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


def operations_section(slug: str, lang: str, library_matrix: dict[str, Any] | None,
                       cell_programs: dict[str, Any] | None = None) -> list[str]:
    """The library matrix's rows of library ``slug`` (docs/library_matrix.json): one table per operation observed,
    of its unusual cells with how each differs and its fix, then the program that observes them again
    (``cell_programs``: docs/programs/library_matrix.json's), collapsed; nothing when the library has no operation
    observed."""
    standing = (library_matrix or {}).get("operations", {}).get(slug)
    if not standing or not standing["observed"]:
        return []
    t, cells, odd = TEXT[lang], library_matrix["cells"], library_matrix["unusual"]
    from .libraries import modules
    target = getattr(modules().get(slug), "TARGET", "") or "the model"
    lines = [f"## {t['operations']}", "", t["operations_note"].format(target=target, cells=standing["cells"],
                                                                     unusual=standing["unusual"]), ""]
    operations: dict[str, list[str]] = {}
    for key in cells:
        if key.startswith(f"{slug}:"):
            operations.setdefault(key.split("|")[0], []).append(key)
    for name, keys in operations.items():
        lines += [f"### `{name.split(':', 1)[1]}`", ""]
        raised = next((cells[k]["operation raised"] for k in keys if "operation raised" in cells[k]), None)
        if raised and all("operation raised" in cells[k] for k in keys):
            lines += [t["operation_raised"].format(error=_esc(raised)), "",
                      *_program_lines((cell_programs or {}).get(name), lang)]
            continue
        order = {family: i for i, family in enumerate(library_matrix["families"])}
        listed = sorted((k for k in keys if k in odd["cells"]),
                        key=lambda k: (order[k.split("|")[1]], k.split("|")[2] != "before"))
        if not listed:
            lines += [t["as_without"].format(cells=len(keys)), ""]
            continue
        lines += [f"| {t['family']} | {t['when']} | {t['how']} | {t['fix']} |", "|---|---|---|---|"]
        for key in listed:
            _, family, when = key.split("|")
            how = odd["cells"][key]
            fix = odd["fixes"].get(key, {}).get("fix", "")
            if lang == "zh":
                how, fix = [HOW_ZH.get(h, h) for h in how], FIX_ZH.get(fix, fix)
            lines.append(f"| `{family}` | {t[when]} | {_esc(('；' if lang == 'zh' else '; ').join(how))} | {_esc(fix)} |")
        lines += ["", *_program_lines((cell_programs or {}).get(name), lang)]
    for label, names in (("not_yet", [o for o in _table_operations(slug) if o not in operations
                                      and o not in standing["cannot run here"]]),
                         ("cannot", list(standing["cannot run here"]))):
        if names:
            lines += [t[label].format(names=", ".join(f"`{n.split(':', 1)[1]}`" for n in names)), ""]
    return lines


def in_short(slug: str, lang: str, library_matrix: dict[str, Any] | None) -> list[str]:
    """What a reader of library ``slug``'s page reads first: its operations that change what a hook does, the worst
    first, each with how many hooks behave otherwise registered before it and after it, how many registering after it
    fixes and the most frequent differences; then those that change nothing. Made from the library matrix's rows
    (docs/library_matrix.json, by :func:`tools.profiles.rows.library`, as ``course.profile`` prints them); nothing
    when the library has no operation observed."""
    row = rows.library(slug, library_matrix or {})
    if row is None:
        return []
    t, families = TEXT[lang], len(library_matrix["families"])  # type: ignore[index]
    lines = [f"## {t['in_short']}", "", t["in_short_note"].format(observed=row["observed"],
                                                                   changing=len(row["operations"])), ""]
    for operation in row["operations"]:
        most = ("、" if lang == "zh" else ", ").join(
            f"{how['zh']}（{how['cells']} 格）" if lang == "zh" else f"{how['en']} ({how['cells']})"
            for how in operation["most"])
        said = t["in_short_row"].format(before=len(operation["before"]), after=len(operation["after"]),
                                        families=families, fixed=len(operation["fixed"]), most=_esc(most))
        lines.append(f"- `{operation['name']}`{'：' if lang == 'zh' else ': '}{said}")
    if row["same"]:
        lines += ["", t["in_short_same"].format(names=", ".join(f"`{name}`" for name in row["same"]))]
    return [*lines, ""]


def _program_lines(entry: dict[str, Any] | None, lang: str) -> list[str]:
    """An operation's program (tools/profiles/cell_programs.py) and what it prints, collapsed; [] without one."""
    if not entry or not entry.get("show"):
        return []
    from .programs import _fence
    t, show = TEXT[lang], entry["show"]
    return ["<details>", f"<summary>{t['program']}</summary>", "", *_fence(show["code"][lang], "python"), "",
            t["prints"], "", *_fence(show["prints"], "text"), "", "</details>", ""]


def _table_operations(slug: str) -> list[str]:
    from . import operations
    table = json.loads(operations.TABLE.read_text(encoding="utf-8"))
    return [f"{slug}:{o['name']}" for o in table["libraries"].get(slug, {}).get("operations", [])]


def library_page(slug: str, record: dict[str, Any], lang: str, matrix: dict[str, Any],
                 programs: dict[str, Any] | None = None, library_matrix: dict[str, Any] | None = None,
                 cell_programs: dict[str, Any] | None = None) -> str:
    """One library's page; ``programs``: docs/programs/profiles.json's, each surprise followed by its program (and
    what to do instead), collapsed; ``library_matrix``: docs/library_matrix.json, its rows of this library's
    operations as tables (:func:`operations_section`), each with its program from ``cell_programs``."""
    t, words = TEXT[lang], record["words"][lang]
    lines = [f"(profiles-{slug})=", f"# {record['title']}", "", f"[{t['back']}](profiles.md) · {_esc(_status(record, t))}",
             "", words["summary"], "", f"**{t['entry']}**: `{record['entry']}`", "",
             *in_short(slug, lang, library_matrix)]
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
    lines += operations_section(slug, lang, library_matrix, cell_programs)
    from .messages import section
    lines += section(slug, lang)
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
    library_matrix = json.loads(LIBRARY_MATRIX.read_text(encoding="utf-8")) if LIBRARY_MATRIX.exists() else None
    from .cell_programs import load as load_cell_programs
    cell_programs = load_cell_programs()
    for slug, record in doc["libraries"].items():
        found[f"profiles-{slug}"] = (lambda root, lang, names, slug=slug, record=record:
                                     library_page(slug, record, lang, matrix, programs, library_matrix,
                                                  cell_programs))
    return found
