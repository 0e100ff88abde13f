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

Run as a script on a built site to print the tables (both engines: the site's Pagefind search, or Sphinx's own on
a site built before it)::

    .venv/bin/python tests/tools/search_cases.py build/site [CHROMIUM] [--json] > search-tables.md
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


def best_page(folder: Path, term: str, lang: str) -> str | None:
    """The page built around ``term``: the one with it in its highest heading (title, section, subsection), else
    the one that says it most often."""
    def key(page: str) -> tuple[int, int]:
        a = article(folder / f"{page}.html")
        level = min((lvl for lvl, text in a.headings if holds(text, term, lang)), default=9)
        count = len(re.findall(re.escape(term), a.text, re.I))
        return level, -count
    found = relevant(folder, [term], lang)
    return min(found, key=key) if found else None


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


def measure(page, base: str, site: Path) -> dict:
    """Every case on the site served at ``base`` from folder ``site`` (with zh/ and en/)."""
    out: dict = {"terms": [], "together": [], "topic": [], "pasted": [], "matrix": []}
    for lang, terms in (("zh", ZH_TERMS), ("en", EN_TERMS)):
        folder = site / lang
        for term in terms:
            answer = ask(page, base, folder, lang, term)
            listed, main = in_order(answer), list(dict.fromkeys(page_of(h) for h in answer["main"]))
            want, best = relevant(folder, [term], lang), best_page(folder, term, lang)
            out["terms"].append({"lang": lang, "query": term, "relevant": sorted(want), "listed": listed,
                                 "main": main, "best": best, "best rank": rank(listed, lambda p: p == best)})
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
    for case in PASTED:
        for lang in ("zh", "en"):
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
            result = measure(page, f"http://127.0.0.1:{server.server_address[1]}/", site)
            browser.close()
    finally:
        server.shutdown()
    print(f"engine: {engine(site / 'zh')}\n")
    print(tables(result))
    if "--json" in argv:
        import json
        print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
