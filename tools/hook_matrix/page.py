"""The site's page of the hook behaviour matrix, in each language, generated from ``docs/hook_matrix.json``.

    python -m tools.hook_matrix page --lang zh

The page (MyST Markdown, ``hook_matrix.md`` next to the notebooks' pages, built by ``tools/site/build.py``) has:

- an overview per group of contexts: one row per family, one column per context, each cell a symbol (fires N
  times, does not fire, raises, n/a), a surprising cell marked with ⚠;
- the surprising cells: what happens, why, and a link to the cell that teaches it;
- one table per family: every context, what the hook did in a few words (a cell that differs from its family's
  eager cell only in its warnings says so: :func:`warnings_only`), the key (``forward-hook@compile``, which
  the site's search and the browser's find both match), and the cell that teaches it.

Links to a notebook cell are MyST references to targets that :func:`add_site_anchors` puts before each cited cell
in the site's copy of a notebook (the committed notebooks are not changed).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from ..messages import symptoms

PROGRAMS = Path(__file__).resolve().parents[2] / "docs" / "programs" / "matrix.json"  # tools/hook_matrix/programs.py

TEXT = {
    "zh": {
        "title": "钩子行为矩阵",
        "intro": ("每一种 PyTorch 钩子（行）在每一种运行方式（列）下做了什么：触发几次、收到什么、返回值是否生效、报什么错。"
                  "表中每一格都是在 torch {torch} 上实际运行一个小探针观察到的（编译用 `{backend}` 后端，预编译用 "
                  "`{precompile}`）。怎样读、怎样扩展它，见第 17 课。"),
        "maintainers": "维护者参考",
        "kept": ("探针是 `python -m tools.hook_matrix`，结果记录在 `docs/hook_matrix.json`，这一页由它生成；"
                 "`./course test` 每次重新运行一个固定样本，每周的 CI 重新运行全部格子，`./course rerun` 在新版 PyTorch "
                 "上列出变化的格子。"),
        "legend": ("图例：**N** 触发 N 次；**0** 不触发；**✗** 报错；**n/a** 不适用（原因见该族的表）；**⚠** 出人意料的格子；"
                   "**1/2**：探针和另一种写法结果不同（该族的表里写明是哪种写法）。"
                   "每一格的键形如 `forward-hook@compile`（族@运行方式），可以直接搜索。"),
        "counts": "共 {families} 族 × {contexts} 种运行方式 = {cells} 格：实际运行 {observed} 格，不适用 {na} 格；出人意料的 {surprising} 格。",
        "overview": "总览", "surprising": "出人意料的格子", "families": "逐族的表", "contexts": "运行方式",
        "groups": {"autograd": "自动求导的各种用法", "compiler": "编译、导出与追踪", "transform": "变换、检查点、混合精度与量化",
                   "copy": "复制与遍历", "loading": "加载状态与 meta 设备", "threads": "线程", "training": "训练循环的写法",
                   "distributed": "分布式"},
        "source_only": "从源代码读到的（CPU 上不能运行）",
        "source_only_intro": "这两种情形在 CPU 上不能运行，所以不在表里；下面是从 PyTorch 2.15.0 的源代码读到的结论。",
        "family_groups": {"autograd": "张量与计算图", "module": "模块", "state": "状态与优化器",
                          "distributed": "分布式"},
        "columns_surprise": ("格子", "发生了什么", "为什么", "在哪里讲"),
        "columns_family": ("运行方式", "观察到的", "键", "在哪里讲"),
        "family_line": "API：`{api}`。改写返回值时探针返回：{returns}。",
        "how": "一次运行",
        "fires": "触发 {n} 次", "never": "不触发", "raises": "报错", "return": "返回值",
        "returned": {"used": "生效", "ignored": "被忽略", "rejected": "被拒绝"},
        "shape": "{label}：{what}", "same": "同上",
        "na": "不适用", "teaches_family": "讲这一族", "teaches_cell": "讲这一格",
        "warnings_only": "和 eager 只差警告（{which}）",
        "which": {"deprecation": "弃用提示", "other": "不是弃用提示", "both": "弃用提示和其他警告"},
        "phases": {"forward": "前向", "backward": "反向", "second backward": "第二次反向", "register": "注册",
                   "export": "导出", "trace": "追踪", "capture": "捕获", "load": "加载", "copy": "复制",
                   "save and load": "保存与加载", "transform": "变换", "first call": "第一次调用", "step": "训练步",
                   "script": "script", "apply": "apply", "state_dict": "state_dict", "load_state_dict": "load_state_dict",
                   "run": "运行", "to_empty": "to_empty", "freeze": "freeze", "prepare": "prepare", "calibrate": "校准",
                   "convert": "convert"},
    },
    "en": {
        "title": "The hook behaviour matrix",
        "intro": ("What every PyTorch hook family (rows) does under every way code runs (columns): how often it fires, "
                  "what it receives, whether its return value is used, what it raises. Every cell was observed by "
                  "running a small probe on torch {torch} (compiled with the `{backend}` backend, precompiled with "
                  "`{precompile}`). Notebook 17 teaches how to read it and how to extend it."),
        "maintainers": "For maintainers",
        "kept": ("The probe is `python -m tools.hook_matrix`; the cells are kept in `docs/hook_matrix.json`, from which "
                 "this page is generated. `./course test` runs a fixed sample again every time, the weekly CI every "
                 "cell, and `./course rerun` lists the cells that change on a new PyTorch."),
        "legend": ("Legend: **N** fires N times; **0** does not fire; **✗** raises; **n/a** not applicable (the "
                   "family's table says why); **⚠** a surprising cell; **1/2**: the probe and another way of writing "
                   "it differ (the family's table says which way). Each cell has a key such as "
                   "`forward-hook@compile` (family@context): search for it."),
        "counts": "{families} families × {contexts} contexts = {cells} cells: {observed} observed by running, {na} "
                  "not applicable; {surprising} surprising.",
        "overview": "Overview", "surprising": "The surprising cells", "families": "Family by family",
        "contexts": "The contexts",
        "groups": {"autograd": "Ways of running autograd", "compiler": "Compiling, exporting and tracing",
                   "transform": "Transforms, checkpointing, mixed precision and quantization",
                   "copy": "Copies and tree walks", "loading": "Loading state and the meta device", "threads": "Threads",
                   "training": "Training-loop patterns", "distributed": "Distributed"},
        "source_only": "Read from source (a CPU cannot run these)",
        "source_only_intro": ("A CPU cannot run these two, so they are not columns of the table; what follows is read "
                              "from PyTorch 2.15.0's source."),
        "family_groups": {"autograd": "Tensors and the graph", "module": "Modules", "state": "State and optimizers",
                          "distributed": "Distributed"},
        "columns_surprise": ("Cell", "What happens", "Why", "Taught in"),
        "columns_family": ("Context", "Observed", "Key", "Taught in"),
        "family_line": "API: `{api}`. In the probe's modify run the hook returns: {returns}.",
        "how": "one run",
        "fires": "fires {n}×", "never": "does not fire", "raises": "raises", "return": "return value",
        "returned": {"used": "used", "ignored": "ignored", "rejected": "rejected"},
        "shape": "{label}: {what}", "same": "the same",
        "na": "n/a", "teaches_family": "the family", "teaches_cell": "this cell",
        "warnings_only": "only the warnings differ from eager ({which})",
        "which": {"deprecation": "deprecation notices", "other": "not deprecation notices",
                  "both": "deprecation notices and others"},
        "phases": {},
    },
}
_NB = re.compile(r"^(\d\d)_")


def anchor(notebook: str, cell: str) -> str:
    """The MyST target name put before a cited cell: ``matrix-<NN>-<cell id>``."""
    match = _NB.match(notebook)
    return f"matrix-{match[1] if match else 'nb'}-{cell}".lower()


def cited_cells(doc: dict[str, Any]) -> dict[str, set[str]]:
    """Notebook file name -> the ids of its cells that the matrix cites."""
    cited: dict[str, set[str]] = {}
    for record in doc["cells"].values():
        taught = record.get("taught_by")
        if taught:
            cited.setdefault(taught["notebook"], set()).add(taught["cell"])
    return cited


def add_site_anchors(nb: dict[str, Any], name: str, cited: dict[str, set[str]]) -> dict[str, Any]:
    """A copy of notebook ``name`` (its file name) with a MyST target ``(matrix-NN-<id>)=`` right before each cell
    the matrix cites (for the page's links)."""
    ids = cited.get(name, set())
    if not ids:
        return nb
    out = copy.deepcopy(nb)
    cells = []
    for cell in out.get("cells", []):
        if cell.get("id") in ids:
            cells.append(symptoms.anchor_cell(anchor(name, cell["id"]), "hooklab-matrix-anchor"))
        cells.append(cell)
    out["cells"] = cells
    return out


def _esc(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    ticks = "``" if "`" in text else "`"
    pad = " " if ticks == "``" else ""
    return f"{ticks}{pad}{text}{pad}{ticks}".replace("|", "\\|")


def _mark(record: dict[str, Any]) -> str:
    if record.get("error"):
        return f"✗{record['calls']}" if record["calls"] else "✗"
    return str(record["calls"])


def symbol(record: dict[str, Any]) -> str:
    """The overview's symbol of a cell; ``1/2`` where another way of writing the probe (a shape) differs."""
    if record["status"] == "n/a":
        mark = "n/a"
    else:
        marks = [_mark(record)]
        for shape in record.get("shapes", []):
            if "calls" in shape and _mark(shape) not in marks:
                marks.append(_mark(shape))
        mark = "/".join(marks)
    return ("⚠" + mark) if record.get("surprising") else mark


_SAME = ("calls", "by_phase", "receives", "return_value", "error", "notes")  # hook_matrix.observe.SAME


def observed(record: dict[str, Any], lang: str) -> str:
    """What a cell observed, in a few words of ``lang``."""
    t = TEXT[lang]
    if record["status"] == "n/a":
        return f"{t['na']}: " + (record.get("reason_zh") if lang == "zh" else record.get("reason", ""))
    if record.get("status") != "observed":
        return f"{record.get('status')}: {record.get('error', '')}"
    parts = []
    if record["calls"]:
        phases = ", ".join(f"{t['phases'].get(p, p)} {n}" for p, n in record["by_phase"].items())
        parts.append(t["fires"].format(n=record["calls"]) + f" ({phases})")
    else:
        parts.append(t["never"])
    if record.get("receives"):
        parts.append(_code(record["receives"][0][record["receives"][0].index("x ") + 2:]
                           if "x " in record["receives"][0] else record["receives"][0]))
    parts += _returned(record, lang)
    if record.get("error"):
        parts.append(f"{t['raises']} {_code(record['error'])}")
    for note in record.get("notes", []):
        parts.append(_code(note))
    for shape in record.get("shapes", []):
        if "calls" not in shape:  # the same run, another return value
            what = "; ".join(_returned(shape, lang))
        elif all(shape.get(k) == record.get(k) for k in _SAME):
            what = t["same"]
        else:
            what = observed({"status": "observed", **shape}, lang)
        parts.append(t["shape"].format(label=shape["zh"] if lang == "zh" else shape["en"], what=what))
    return "; ".join(parts)


def _returned(record: dict[str, Any], lang: str) -> list[str]:
    """What the return value did, in ``lang``, with the error's text where it was rejected."""
    t = TEXT[lang]
    value = record.get("return_value") or ""
    head, _, rest = value.partition(": ")
    if head not in t["returned"]:
        return []
    return [f"{t['return']} {t['returned'][head]}" + (f" {_code(rest)}" if head == "rejected" and rest else "")]


def _link(record: dict[str, Any], lang: str, built: set[str] | None) -> str:
    taught = record.get("taught_by")
    if not taught:
        return ""
    t = TEXT[lang]
    label = f"{taught['notebook'][:2]} · " + (t["teaches_cell"] if taught["scope"] == "cell" else t["teaches_family"])
    if built is not None and Path(taught["notebook"]).stem not in built:
        return label  # that notebook's page is not in this build
    return f"{{ref}}`{label} <{anchor(taught['notebook'], taught['cell'])}>`"


# what the probe's modify run returns, and what one run of a context is, in Chinese (the English is in the JSON)
RETURNS_ZH = {"the gradient doubled": "加倍的梯度", "a stray value": "一个多余的值（API 不接受返回值）",
              "grad_outputs doubled": "加倍的 grad_outputs", "grad_inputs doubled": "加倍的 grad_inputs",
              "what is saved doubled": "加倍后再保存", "the unpacked tensor doubled": "加倍的解包结果",
              "the input doubled": "加倍的输入", "the output doubled": "加倍的输出",
              "grad_output doubled": "加倍的 grad_output", "grad_input doubled": "加倍的 grad_input",
              "every output doubled": "每个模块的输出都加倍", "every grad_input doubled": "每个模块的 grad_input 都加倍",
              "every input doubled": "每个模块的输入都加倍", "every grad_output doubled": "每个模块的 grad_output 都加倍",
              "a tensor of the parameter's size (the API takes None)": "与参数同样大小的张量（API 只接受 None）",
              "a state dict with a key added": "多一个键的状态字典",
              "a state dict with another learning rate": "换了学习率的状态字典", "the weight doubled": "加倍的权重",
              "the averaged bucket doubled": "平均后再加倍的梯度桶", "the gradient doubled in place": "原地加倍的梯度"}
HOW_ZH = {
    "eager": "前向、loss.backward()、opt.step()、state_dict() 与 load_state_dict()",
    "autograd-grad": "torch.autograd.grad(loss, parameters)", "backward-inputs": "loss.backward(inputs=[x])：只求输入的梯度",
    "retain-graph": "loss.backward(retain_graph=True); loss.backward()",
    "double-backward": "g = autograd.grad(loss, x, create_graph=True); g.square().sum().backward()",
    "no-grad": "在 torch.no_grad() 下前向，不反向", "inference-mode": "在 torch.inference_mode() 下前向，不反向",
    "inplace": "h = subject(x); h.add_(1); head(h)", "view": "h = subject(x); h.narrow(1, 0, 2).mul_(2); head(h)",
    "used-twice": "subject(subject(x))：模块和它的权重都用两次", "unused-branch": "算了 subject(x)，损失只来自 head(x)",
    "compile": "torch.compile(net, backend='aot_eager')，钩子在第一次调用之前注册",
    "compile-hook-after": "第一次编译调用（前向和反向）之后再注册钩子，然后第二次调用",
    "compiled-autograd": "compiled_autograd=True 时 torch.compile 一个调用 backward 的训练步",
    "export": "torch.export.export(net, (x,)).module()，然后前向和反向",
    "precompile": "precompile.capture 捕获 model(x)，再 precompile.load，然后前向和反向",
    "jit-script": "torch.jit.script(net)，然后前向和反向", "jit-trace": "torch.jit.trace(net, (x,))，然后前向和反向",
    "fx-root": "用 symbolic_trace(subject) 替换 subject（挂钩子的模块是根）",
    "fx-child": "symbolic_trace(net)：挂钩子的模块是子模块，被追踪穿过",
    "vmap": "vmap(net)(x) 按批次映射，然后反向", "func-grad": "torch.func.grad 作用于 functional_call(net, params, x).sum()",
    "checkpoint-reentrant": "checkpoint(net, x, use_reentrant=True)", "checkpoint": "checkpoint(net, x, use_reentrant=False)",
    "deepcopy": "注册钩子后深拷贝 (net, opt)，运行副本", "pickle": "注册钩子后保存并加载 (net, opt)，运行加载的副本",
    "apply": "在 subject 有两个父模块的模型上用 net.apply(...) 注册",
    "ddp": "2 个 gloo 进程；DDP(net)，然后普通的 eager 运行",
    "fsdp2": "2 个 gloo 进程；fully_shard(subject)、fully_shard(net)，然后普通的 eager 运行",
    "fsdp1": "2 个 gloo 进程；FullyShardedDataParallel(net, auto_wrap_policy=ModuleWrapPolicy({Subject}), "
             "device_id=cpu)，然后普通的 eager 运行",
    "tensor-parallel": "2 个 gloo 进程，2 个 rank 的 CPU 网格；parallelize_module(net, mesh, {'subject.lin': "
                       "ColwiseParallel(use_local_output=False), 'head': RowwiseParallel()})，然后普通的 eager 运行",
    "autocast": "在 torch.autocast('cpu', dtype=torch.bfloat16) 下前向",
    "forward-ad": "torch.func.jvp(net, (x,), (ones,))：输出和它的切向量，不反向",
    "export-strict": "torch.export.export(net, (x,), strict=True).module()，然后前向和反向",
    "jit-freeze": "torch.jit.freeze(torch.jit.script(net.eval()))，然后前向和反向",
    "functional-call": "functional_call(net, 参数的副本, (x,))，然后反向（不加变换）",
    "quantization": "QuantStub -> net -> DeQuantStub，x86 的 qconfig：prepare、一次校准前向、convert、一次前向、state_dict() 与 "
                    "load_state_dict()",
    "load-assign": "注册钩子，load_state_dict(state, assign=True)，然后普通的 eager 运行，优化器在加载之前建好",
    "load-mmap": "保存状态字典，torch.load(path, mmap=True)，load_state_dict(state)（拷贝进参数），然后普通的 eager 运行",
    "meta-to-empty": "在 torch.device('meta') 下构建，注册钩子，to_empty(device='cpu')，初始化，再建优化器，然后普通的 eager 运行",
    "thread": "钩子在调用者的线程里注册；前向、反向、opt.step() 和状态字典都在一个 threading.Thread 里运行",
    "contextvar": "前向；然后设置一个 ContextVar 和一个 threading.local，backward()，再把两者复原；notes 记下每次钩子调用看到了什么",
    "split-batch": "两个微批次（各做一次前向和反向），然后 opt.step()；DDP / FSDP2 下第一个微批次放在 no_sync() / "
                         "set_requires_gradient_sync(False) 里",
    "grad-scaler": "scaler.scale(loss).backward()、scaler.step(opt)、scaler.update()；一条 note 比较钩子收到的梯度和不缩放时的",
    "data-parallel": "在没有 GPU 的机器上 torch.nn.DataParallel(net)，然后普通的 eager 运行",
}


def page(doc: dict[str, Any], lang: str, *, built: set[str] | None = None,
         programs: dict[str, Any] | bool = True) -> str:
    """The page in ``lang``; ``built``: the notebook pages (names without .ipynb) of this build, whose cells the page
    links to (None: all); ``programs``: the unusual cells' programs (docs/programs/matrix.json's ``programs``; True:
    read from that file where it exists; False: none)."""
    t = TEXT[lang]
    families, contexts, cells = doc["families"], doc["contexts"], doc["cells"]
    records = list(cells.values())
    na = sum(r["status"] == "n/a" for r in records)
    surprising = [r for r in records if r.get("surprising")]
    title_of = {c["id"]: (c["zh"] if lang == "zh" else c["title"]) for c in contexts}
    quiet = warnings_only(cells)
    lines = [f"# {t['title']}", "",
             t["intro"].format(torch=doc["torch"], backend=doc["compile_backend"],
                               precompile=doc["precompile_backend"]), "",
             t["counts"].format(families=len(families), contexts=len(contexts), cells=len(records),
                                observed=len(records) - na, na=na, surprising=len(surprising)), "",
             t["legend"], "", f"## {t['contexts']}", "", "| | " + t["how"] + " |", "|---|---|"]
    for c in contexts:
        how = HOW_ZH.get(c["id"], c["how"]) if lang == "zh" else c["how"]
        lines.append(f"| `{c['id']}`: {_esc(title_of[c['id']])} | {_esc(how)} |")
    lines += ["", f"## {t['overview']}", ""]
    for group, heading in t["groups"].items():
        group_contexts = [c for c in contexts if c["group"] == group]
        if not group_contexts:
            continue
        lines += [f"### {heading}", "", "| | " + " | ".join(_esc(title_of[c["id"]]) for c in group_contexts) + " |",
                  "|---|" + "---|" * len(group_contexts)]
        for f in families:
            row = [symbol(cells[f"{f['id']}@{c['id']}"]) for c in group_contexts]
            lines.append(f"| `{f['id']}` | " + " | ".join(row) + " |")
        lines.append("")
    lines += [f"## {t['surprising']}", "", "| " + " | ".join(t["columns_surprise"]) + " |", "|---|---|---|---|"]
    for r in surprising:
        key = f"{r['family']}@{r['context']}"
        lines.append(f"| ⚠ `{key}` | {_esc(observed(r, lang))} | {_esc(r['why'][lang])} | {_link(r, lang, built)} |")
    lines += ["", f"## {t['families']}", ""]
    for group, heading in t["family_groups"].items():
        lines += [f"### {heading}", ""]
        for f in (f for f in families if f["group"] == group):
            name = f["zh"] if lang == "zh" and f.get("zh") else f["api"]
            returns = (RETURNS_ZH.get(f["returns"], f["returns"]) if lang == "zh" else f["returns"]) or "—"
            lines += [f"#### `{f['id']}`: {_esc(name)}", "", t["family_line"].format(api=f["api"], returns=returns), "",
                      "| " + " | ".join(t["columns_family"]) + " |", "|---|---|---|---|"]
            for c in contexts:
                key = f"{f['id']}@{c['id']}"
                r = cells[key]
                mark = "⚠ " if r.get("surprising") else ""
                seen = observed(r, lang) + (f" · {warnings_label(quiet[key], lang)}" if key in quiet else "")
                lines.append(f"| {mark}{_esc(title_of[c['id']])} | {_esc(seen)} | `{key}` | {_link(r, lang, built)} |")
            lines.append("")
    if programs is not False:  # each unusual cell as a program (docs/programs/matrix.json, tools/hook_matrix/programs.py)
        lines += programs_section(doc, lang, None if programs is True else programs)
    if doc.get("source_only"):
        lines += [f"## {t['source_only']}", "", t["source_only_intro"], ""]
        for entry in doc["source_only"]:
            lines += [f"### {entry['title_zh'] if lang == 'zh' else entry['title']}", "", linked(entry[lang]), ""]
    lines += [f"## {t['maintainers']}", "", t["kept"], ""]  # how the page is kept: after what a learner reads
    return "\n".join(lines).rstrip("\n") + "\n"


DEPRECATION = ("DeprecationWarning", "FutureWarning", "PendingDeprecationWarning")


def is_deprecation(warning: str) -> bool:
    """Whether a recorded warning (``Category: message``) is a deprecation notice: by its category, or by a message
    that says something is or will be deprecated.

    >>> is_deprecation("FutureWarning: `torch.jit.script` is deprecated."), is_deprecation("UserWarning: x")
    (True, False)
    """
    return warning.split(":", 1)[0] in DEPRECATION or "deprecated" in warning


def warnings_only(cells: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The cells that differ from their family's eager cell only in their warnings, by key: observed, not eager, not
    marked surprising, with the eager cell's observation (whether and how often the hook fired, in which phases, what
    it received, what its return value did, the error, the notes: :data:`_SAME`; and the other ways of writing the
    probe) and other warnings. Each with the warnings it adds, those of eager it lacks, and ``which`` they are:
    ``deprecation`` (deprecation notices only), ``other`` (none is one) or ``both``."""
    out = {}
    for key, record in cells.items():
        family, context = key.split("@")
        plain = cells.get(f"{family}@eager")
        if context == "eager" or plain is None or record["status"] != "observed" or record.get("surprising") \
                or record.get("warnings") == plain.get("warnings") \
                or any(record.get(f) != plain.get(f) for f in ("fires", *_SAME, "shapes")):
            continue
        added = [w for w in record["warnings"] if w not in plain["warnings"]]
        gone = [w for w in plain["warnings"] if w not in record["warnings"]]
        told = [is_deprecation(w) for w in added + gone]
        which = "deprecation" if told and all(told) else "both" if any(told) else "other"
        out[key] = {"which": which, "added": added, "gone": gone}
    return out


def warnings_label(found: dict[str, Any], lang: str) -> str:
    """The words after a warnings-only cell's observation: the hook as in eager, and which warnings differ."""
    t = TEXT[lang]
    return t["warnings_only"].format(which=t["which"][found["which"]])


_BARE_URL = re.compile(r"(?<!\]\()(?<!<)https?://[A-Za-z0-9_./#~:%+-]*[A-Za-z0-9_/#-]")


def linked(text: str) -> str:
    """``text`` with each bare address made a link named by its file (and line anchor): a bare address is one word
    that no line can break, and made the page wider than a phone's screen.

    >>> linked("read engine.cpp (https://github.com/pytorch/pytorch/blob/v2.15.0/torch/cuda/graphs.py#L1626-L1636), "
    ...        "or [this](https://example.org/a)")
    'read engine.cpp ([graphs.py#L1626-L1636](https://github.com/pytorch/pytorch/blob/v2.15.0/torch/cuda/graphs.py#L1626-L1636)), or [this](https://example.org/a)'
    """
    return _BARE_URL.sub(lambda m: f"[{m[0].rstrip('/').rsplit('/', 1)[-1]}]({m[0]})", text)


def write_page(doc: dict[str, Any], folder: Path, lang: str, *, built: set[str] | None = None) -> Path:
    """``folder``/hook_matrix.md: the page in ``lang``, linking to the cells of the ``built`` notebooks."""
    path = folder / "hook_matrix.md"
    path.write_text(page(doc, lang, built=built), encoding="utf-8")
    return path


# the words a program of an unusual cell is written with (tools/hook_matrix/programs.py), and its page section
WORDS = {
    "en": {"head": "{key}: {title}", "model": "the probe's model: subject = Linear(3, 3) after tanh, then a head",
           "hook": "the hook notes the phase of each call", "install": "where the hook is registered",
           "run": "the run: {how}", "show": "what fired", "fix": "the fix: {fix}",
           "quiet": "what PyTorch prints is not what fired"},
    "zh": {"head": "{key}：{title}", "model": "探针的模型：subject = tanh 之后的 Linear(3, 3)，再接一个输出头",
           "hook": "钩子记下每次调用所在的阶段", "install": "钩子注册在哪里",
           "run": "运行：{how}", "show": "触发了什么", "fix": "修正：{fix}",
           "quiet": "PyTorch 自己打印的内容不算"},
}

# ---- the unusual cells as programs (docs/programs/matrix.json, written by tools/hook_matrix/programs.py) ------

PAGE = {
    "en": {"title": "The unusual cells as programs",
           "intro": ("A cell is unusual when it is marked surprising or its fires, calls, error or warnings differ from "
                     "its family's eager cell: {unusual} cells. {shown} of them have a program generated from the "
                     "probe's code (the context's setup, the hook, the run, what fired), {fixed} also the same "
                     "program with a workaround. {processes} of them need a process group: their program makes its "
                     "run in each of two gloo processes on this machine (hooklab.run_workers) and prints rank 0's "
                     "lines, and rank 1's where they differ. What a program prints is what it printed run on its own "
                     "on a CPU "
                     "(OMP_NUM_THREADS=1). Below, each program's hook, where it is registered and its run; "
                     "`python -m tools.hook_matrix programs --keys <key> --print` prints the whole program, with the "
                     "model and the helpers its run calls."),
           "quiet": ("{quiet} of the {unusual} differ from their family's eager cell only in their warnings "
                     "({deprecation} of them only in deprecation notices): the hook fires as often, in the same "
                     "phases, receives the same, its return value does the same and the run notes the same, so "
                     "their program shows a warning, not a hook that behaves otherwise; they are marked “{tag}”."),
           "tag": "only the warnings differ",
           "kinds": ("Of the {unusual}: {fixed} have a workaround that makes the hook fire as in eager; {tried} were "
                     "tried against every strategy below that applies to them, and none did; for {none} no strategy "
                     "applies (each says why); {warnings} differ from eager only in their warnings ({deprecation} "
                     "only in a deprecation notice), so the hook behaves as in eager there; and in {fires} the hook "
                     "fires as in eager but the cell differs in something a program's count of calls does not show "
                     "(what the hook receives, what its return value does, what the run notes; each says which)."),
           "strategies": "The workaround strategies",
           "strategies_intro": ("The strategies of `tools/hook_matrix/fixes.toml`, in the order they are tried. Each "
                                "change of a strategy that applies to a cell (by its column and family) is made to "
                                "the cell's program, which is run: the first that then fires as the family's eager "
                                "cell (the same number of calls in the same phases, no error) is the cell's "
                                "workaround, and every one is listed under the program as tried."),
           "strategy_line": "**{name}** ({changes} changes, tried in {cells} cells, the workaround of {fixed}). {en} "
                            "*How it changes a program:* {how}.",
           "warnings_tag": "warnings only", "fires_tag": "fires as in eager",
           "warnings_only": "warnings only ({which})",
           "which": {"deprecation": "a deprecation notice", "other": "not a deprecation notice",
                     "both": "a deprecation notice and another"},
           "no_fix": "No workaround: {why}", "tried": "Tried:", "worked": "fires as in eager", "failed": "not as in eager",
           "common": "What every program starts and ends with (the probe's model; printing what fired)",
           "prints": "It prints:", "fix": "Workaround: {what}", "no_program": "No program: {why}",
           "fixed": "The program changed so:", "not_run": "not run yet",
           "unrun": ("{n} of these programs have not been run yet: their output is not shown (python -m "
                     "tools.hook_matrix programs runs them).")},
    "zh": {"title": "把不寻常的格子写成程序",
           "intro": ("一格“不寻常”，是指它被标为出人意料，或者它的 fires、calls、error、warnings 与这一族的 eager 格不同："
                     "共 {unusual} 格。其中 {shown} 格有一段从探针代码生成的程序（运行方式的准备、钩子、运行、触发了什么），"
                     "{fixed} 格还有加上变通办法的同一段程序。其中 {processes} 格需要进程组：它们的程序在本机的两个 gloo 进程里"
                     "各运行一次（hooklab.run_workers），打印 0 号进程的结果，1 号进程不同的行也一并打印。"
                     "程序打印的内容，就是它在 CPU 上单独运行（OMP_NUM_THREADS=1）时打印的。"
                     "下面每段只列出钩子、注册的位置和运行部分；`python -m tools.hook_matrix programs --keys <键> --print` "
                     "打印完整的程序，包括模型和运行时调用的辅助函数。"),
           "quiet": ("这 {unusual} 格里有 {quiet} 格和这一族的 eager 格只差警告（其中 {deprecation} 格只差弃用提示）："
                     "钩子触发的次数和阶段、收到的参数、返回值的效果、运行记下的情况都一样，所以它们的程序演示的是一条警告，"
                     "而不是行为不同的钩子；这些格子标为“{tag}”。"),
           "tag": "只差警告",
           "kinds": ("这 {unusual} 格里：{fixed} 格有变通办法，能让钩子像 eager 那样触发；{tried} 格把下面所有适用的"
                     "办法都试过了，没有一个管用；{none} 格没有适用的办法（每格写明原因）；{warnings} 格和 eager 只差警告"
                     "（其中 {deprecation} 格只差一条弃用提示），钩子的行为和 eager 一样；还有 {fires} 格，钩子的触发和 "
                     "eager 一样，不同之处是程序数的调用次数看不出的（收到的参数、返回值的效果或运行记下的情况，每格写明是哪一项）。"),
           "strategies": "变通办法一览",
           "strategies_intro": ("`tools/hook_matrix/fixes.toml` 里的办法，按尝试的顺序排列。一个办法里适用于某一格（按它的列和族）"
                                "的每一处改动，都会改进这一格的程序并运行：改完之后第一个能像这一族的 eager 格那样触发的（同样的"
                                "调用次数、同样的阶段、没有报错），就是这一格的变通办法；每一次尝试都列在程序下面。"),
           "strategy_line": "**{name}**（{changes} 处改动，在 {cells} 格里试过，是其中 {fixed} 格的变通办法）。{en}"
                            "*怎样改程序：*{how}。",
           "warnings_tag": "只差警告", "fires_tag": "触发和 eager 一样",
           "warnings_only": "只差警告（{which}）",
           "which": {"deprecation": "弃用提示", "other": "不是弃用提示", "both": "弃用提示和另一条警告"},
           "no_fix": "没有变通办法：{why}", "tried": "试过：", "worked": "像 eager 那样触发", "failed": "不像 eager",
           "common": "每段程序开头和结尾都一样的部分（探针的模型；打印触发了什么）",
           "prints": "打印：", "fix": "变通办法：{what}", "no_program": "没有程序：{why}",
           "fixed": "程序这样改：", "not_run": "还没有运行",
           "unrun": "其中 {n} 段程序还没有运行过，所以不显示输出（python -m tools.hook_matrix programs 会运行它们）。"},
}


def kinds(programs: dict[str, Any]) -> dict[str, int]:
    """How many of the unusual cells have a workaround, were tried without one, have no strategy that applies, differ
    in warnings only (``deprecation``: only in a deprecation notice), or fire as in eager otherwise."""
    entries = list(programs.values())
    misbehaving = [v for v in entries if v.get("kind") == "misbehaves"]
    return {"unusual": len(entries), "fixed": sum(v.get("fix") is not None for v in entries),
            "tried": sum(v.get("fix") is None and bool(v.get("attempts")) for v in misbehaving),
            "none": sum(v.get("fix") is None and not v.get("attempts") for v in misbehaving),
            "warnings": sum(v.get("kind") == "warnings" for v in entries),
            "deprecation": sum((v.get("warnings") or {}).get("which") == "deprecation" for v in entries),
            "fires": sum(v.get("kind") == "fires-as-eager" for v in entries)}


def strategies_section(programs: dict[str, Any], lang: str) -> list[str]:
    """The strategies of tools/hook_matrix/fixes.toml (Markdown lines): each with what it is, how it changes a
    program, in how many cells it was tried and of how many it is the workaround."""
    from .outcomes import fixes

    t = PAGE[lang]
    lines = [f"### {t['strategies']}", "", t["strategies_intro"], ""]
    for sid, strategy in fixes()["strategy"].items():
        cells = sum(any(a["strategy"] == sid for a in v.get("attempts", [])) for v in programs.values())
        fixed = sum((v.get("fix") or {}).get("strategy") == sid for v in programs.values())
        suffix = "_zh" if lang == "zh" else ""
        lines += ["- " + t["strategy_line"].format(
            name=strategy["name" + suffix], changes=len(strategy.get("change", [])), cells=cells, fixed=fixed,
            en=strategy["zh" if lang == "zh" else "en"], how=strategy["how" + suffix]), ""]
    return lines


def _sections(code: str, lang: str) -> tuple[str, str, str, str]:
    """A program's prelude (imports and helpers), model, own part (hook, install, run) and tail (what fired)."""
    words = WORDS[lang]
    model_at = code.index(f"# {words['model']}")
    hook_at = code.index(f"# {words['hook']}")
    show_at = code.index(f"# {words['show']}")
    return code[:model_at], code[model_at:hook_at], code[hook_at:show_at], code[show_at:]


def programs_section(doc: dict[str, Any], lang: str, programs: dict[str, Any] | None = None) -> list[str]:
    """The page's section of programs (Markdown lines), in ``lang``; ``programs``: docs/programs/matrix.json's
    (read from the file when None; no section without it)."""
    import difflib

    if programs is None:
        if not PROGRAMS.is_file():
            return []
        programs = json.loads(PROGRAMS.read_text(encoding="utf-8"))["programs"]
    t = PAGE[lang]
    entries = programs.items()
    shown = [(k, v) for k, v in entries if v.get("show")]
    unrun = sum(v["show"]["prints"] is None for _, v in shown)
    counts = {"unusual": len(programs), "shown": len(shown), "fixed": sum(bool(v.get("fix")) for _, v in shown),
              "processes": sum("processes:2" in v.get("needs", []) for v in programs.values())}
    lines = [f"## {t['title']}", "", t["intro"].format(**counts), ""]
    quiet = {key: found for key, found in warnings_only(doc["cells"]).items() if key in programs}
    if quiet:
        lines += [t["quiet"].format(quiet=len(quiet), unusual=len(programs), tag=t["tag"],
                                    deprecation=sum(f["which"] == "deprecation" for f in quiet.values())), ""]
    if any("kind" in v for v in programs.values()):
        lines += [t["kinds"].format(**kinds(programs)), ""]
        lines += strategies_section(programs, lang)
    if unrun:
        lines += [t["unrun"].format(n=unrun), ""]
    if shown:
        prelude, common, _, tail = _sections(shown[0][1]["show"]["code"][lang], lang)
        common_tail = tail
        lines += ["<details>", f"<summary>{t['common']}</summary>", "", "```python", prelude.split("\n", 1)[1].rstrip(),
                  "", "", common.rstrip(), "", "", "# …", "", "", tail.rstrip(), "```", "", "</details>", ""]
    else:
        common = common_tail = ""
    models: dict[str, str] = {}
    for key, value in programs.items():
        summary = f"<code>{key}</code>"
        if not value.get("show"):
            why = value.get("no_program", {}).get(lang, "")
            lines += [f"- {summary}: " + t["no_program"].format(why=why).replace("<", "&lt;"), ""]
            continue
        code = value["show"]["code"][lang]
        _, model, own, _ = _sections(code, lang)
        models.setdefault(model, key)
        run_at = own.index(f"# {WORDS[lang]['run'].split('{')[0]}")
        helpers_end = own.index("\ndef run(", run_at)
        # on the page: the hook, where it is registered and the run; the model and the helpers the run calls are in
        # the whole program (--print, the lookup)
        body = (own[:run_at] + own[run_at:].split("\n", 1)[0] + own[helpers_end:]).rstrip()
        tail = _sections(code, lang)[3]
        if tail.strip() != common_tail.strip():  # a process group's: the run made in each process
            body += "\n\n\n" + tail.rstrip()
        printed = value["show"]["prints"]
        first = next((line for line in (printed or "").splitlines() if line.startswith("calls: ")), t["not_run"])
        tag = f" · {t['tag']}" if key in quiet else {"fires-as-eager": " · " + t["fires_tag"]}.get(
            value.get("kind"), "")
        lines += ["<details>", f"<summary>{summary} · {first}{tag}</summary>", "", "```python", code.split("\n", 1)[0],
                  body, "```", ""]
        if printed is not None:
            lines += [t["prints"], "", "```text", printed.rstrip(), "```", ""]
        fix = value.get("fix")
        if fix:
            after = fix["code"][lang].splitlines()
            del after[1]  # the line that names the fix, said above
            diff = difflib.unified_diff(code.splitlines(), after, lineterm="", n=1)
            changed = [line for line in list(diff)[2:]]
            lines += [t["fix"].format(what=fix["what"][lang]), "", t["fixed"], "", "```diff", *changed, "```", "",
                      t["prints"], "", "```text", fix["prints"].rstrip(), "```", ""]
        elif value.get("no_fix"):
            lines += [t["no_fix"].format(why=value["no_fix"][lang]).replace("<", "&lt;"), ""]
        if value.get("attempts"):
            from .outcomes import outcome

            lines += [t["tried"], ""]
            for attempt in value["attempts"]:
                verdict = t["worked"] if attempt["fires_as_eager"] else t["failed"]
                said = (f"- {attempt['what'][lang]}：{outcome(attempt['prints'], lang)}（{verdict}）" if lang == "zh"
                        else f"- {attempt['what'][lang]}: {outcome(attempt['prints'], lang)} ({verdict})")
                lines.append(said
                             .replace("<", "&lt;"))
            lines.append("")
        lines += ["</details>", ""]
    return lines
