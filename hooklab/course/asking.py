"""Ask the course: a pasted error or a question in your own words, in Chinese or English, answered offline with the
course's cells, symptoms, message rows and behaviour-matrix cells that explain it.
A message the course triggers (and an unusual matrix cell, a library operation's cells) comes with a program that
shows it (and its fix, where there is one):
``hit.program_text(lang)`` prints it, ``hit.run()`` / ``hit.run(fix=True)`` runs it here (:mod:`hooklab.course.programs`).

>>> from hooklab import course
>>> message = "RuntimeError: cannot register a hook on a tensor that doesn't require gradient"
>>> course.ask(message, lang="en", kinds=("symptom",))[0].notebook
'01_tensor_hooks.ipynb'
>>> len(course.ask("我的前向钩子没有被调用", k=3)), course.ask("我的前向钩子没有被调用")[0].kind in KINDS
(3, True)

Each answer links to its page on the course's website (:mod:`hooklab.course.website`: the address a release stamps
into the package, or ``HOOKLAB_SITE_URL``; without one, the page's path on the site), in a notebook also to the cell
in JupyterLab when the notebook is at hand; from a shell: ``python -m hooklab.course ask "hook not firing after
torch.compile"``.

How it ranks: a pasted message is matched as the text of every message the course indexes (PyTorch's and the
libraries'): the runs of its words and punctuation, in its order, that the paste holds, with placeholders, numbers and
addresses as wildcards (:func:`message_match`); a message the paste holds ranks above every other answer, the one it
holds more of first (siblings with the same words in another order are told apart), and a message too short to
recognise (``KeyError``) takes no paste. The words of a question are ranked by BM25 over each entry's text in both
languages; Chinese is read as pairs of characters (no word segmenter), and a table of the phrases learners use for
the same symptom ("not firing", "没有被调用", "never called" …) maps them onto one term, which counts double in the
question, so the course's wording and the learner's meet; an entry whose title says most of the question counts up
to half as much again; a recipe's question, in its asker's words, counts three times in its text (a learner tells
the case as the asker did, while the answer's prose names mechanisms its sibling recipes share); the doctor (``hooklab.explain_hook``) a little more for a question that says its hook does
not fire or fires twice. A question in a learner's words (no library's name, no pasted error: :func:`learners_words`)
gets the course's own place first when one of the first three answers is a lesson scoring at least half the first.
The index holds the course's sections, symptoms, explained messages, unusual matrix cells,
recipes, library profiles (under the names :func:`hooklab.course.profile` takes), the doctor and the hook atlas.
The course website's search ranks a learner's own words with the same index and the same
scoring (tools/site/ask_index.py, hooklab-ask.js): its first result is ``ask(query, kinds=LEARNER_KINDS)``'s first. The index ships with the package (``assets/ask/index.json``), written by ``python -m
tools.ask --write`` from the notebooks and the data files in ``docs/``.
"""
from __future__ import annotations

import functools
import gzip
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, cast

from . import website
from .lang import LANGS, course_language
from .programs import TIMEOUT as PROGRAM_TIMEOUT

__all__ = ["LEARNER_KINDS", "MAX_QUERY", "Answers", "Hit", "ask", "entry_terms", "folded", "has_words",
           "learners_words", "message_key", "query_terms", "tokens"]

KINDS = ("message", "symptom", "section", "matrix", "recipe", "profile", "tool", "atlas")
# The course's own places (a symptom, a section): the site's search puts the best of them first for a question in the
# learner's own words, ranked as ask(query, kinds=LEARNER_KINDS) ranks them (tools/site/ask_index.py).
LEARNER_KINDS = ("symptom", "section")
# A recipe answers one asker's case in its library's words, and its text holds many terms: at equal words the
# course's own place (the section, the symptom that explains the mechanism) comes first, the recipe right after.
KIND_WEIGHT = {"recipe": 0.95}
# An entry may carry its own ``weight`` on words (the index sets it): a library's own message explained on its page is
# found by a paste of that message (the message tier below does not use it); to a question in a learner's words its
# explanation answers after the course's places, whose words it shares. Such entries stay out of the statistics words
# are weighed by (how rare a word is, an entry's usual length): 234 explanations that say "forward", "hook" and a
# library's name on each line made those words common and moved the course's own places.
# The doctor (hooklab.explain_hook, kind "tool") answers a hook that does not fire or fires twice whatever the cause,
# on the asker's own model: for a question that says so (one of these phrases), it counts this much more than its words
DOCTOR_WEIGHT, DOCTOR_GROUPS = 1.3, frozenset({"~never-fires", "~fires-twice"})
# A phrase of SYNONYMS in a question names the symptom the learner means, in words the course's own places share:
# it counts this many times, more than a word that happens to be in many entries' long texts.
GROUP_WEIGHT = 2
# An entry whose title says what the question says is the place built around it: its score counts up to this much
# more (the share of its title the question holds, see title_share). Not for an entry a pasted message matches: a
# recipe's title quotes its asker's message, and would come before the place that explains it.
TITLE_WEIGHT = 0.5
MESSAGE_BONUS = {"recipe": 95, "matrix": 90}  # a pasted message: the explaining place, then recipes, then the matrix
MESSAGE_TIER = 1000  # a message the paste holds ranks above any answer found by its words
MESSAGE_LENGTH = 1.0  # per word of the message found: a paste that holds a long message is that one, not a short one

# Phrases that mean the same symptom, in the words learners use (both languages): each group becomes one term.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "never-fires": ("not firing", "not fire", "doesn't fire", "does not fire", "didn't fire", "did not fire",
                    "never fire", "never fires", "wasn't called", "was not called",
                    "never called", "not called", "isn't called", "is not called", "not being called",
                    "not triggered", "never triggered", "not run", "never run", "doesn't run", "does not run",
                    "not invoked", "never invoked", "no effect", "ignored", "does nothing", "do nothing", "not working",
                    "doesn't work", "does not work", "不生效", "没生效", "没有生效", "没有用", "没有被调用", "没被调用", "不被调用",
                    "没有调用", "没有触发", "没触发", "不触发", "从不触发", "不执行", "没有执行", "没执行", "不起作用",
                    "没有效果", "没反应", "失效", "不运行", "没有运行"),
    "fires-twice": ("twice", "two times", "called twice", "fires twice", "runs twice", "multiple times",
                    "more than once", "duplicate", "duplicated", "两次", "多次", "重复", "触发两次", "调用两次"),
    "grad-none": ("grad is none", "grad none", "gradient is none", "gradients are none", "no gradient",
                  "none gradient", "grad_input is none", "梯度为空", "梯度是none", "梯度为none", "没有梯度", "梯度是空的",
                  "梯度为 none", "梯度是 none"),
    "memory-leak": ("memory leak", "leak", "leaks", "leaking", "memory grows", "memory keeps growing",
                    "memory increase", "内存泄漏", "内存泄露", "显存泄漏", "显存泄露", "泄漏", "泄露", "内存一直涨",
                    "显存一直涨", "内存增长", "显存增长"),
    "save-memory": ("out of memory", "oom", "save memory", "reduce memory", "reduce gpu memory", "memory of activations",
                    "爆显存", "显存不够", "内存不够", "省显存", "节省显存", "省内存"),
    "non-leaf": ("intermediate tensor", "intermediate tensors", "intermediate variable", "non-leaf", "non leaf",
                 "中间变量", "中间张量", "非叶子"),
    "features": ("intermediate layer", "intermediate layers", "output of a layer", "output of an intermediate",
                 "extract features", "feature extraction", "features", "middle layer", "middle-layer",
                 "intermediate feature", "intermediate output", "中间层", "中间层的输出", "提取特征", "特征", "中间特征",
                 "中间输出"),
    "change-output": ("modify the output", "change the output", "replace the output", "modify output", "change output",
                      "修改输出", "的输出替换", "修改某层的输出", "改输出"),
    "late-binding": ("same layer name", "same name", "last layer", "late binding", "loop variable", "in a for loop",
                     "都记成", "最后一层", "循环里"),
    "scaled": ("huge", "scaled", "gradscaler", "loss scale", "loss scaling", "特别大", "太大", "放大"),
    "cost": ("slow", "slower", "slow down", "slows down", "overhead", "变慢", "拖慢", "开销"),
    "frozen": ("frozen", "freeze", "requires_grad=false", "冻结", "冻住"),
    "clip": ("clip", "clipping", "clip gradients", "gradient clipping", "clip_grad_norm_", "裁剪", "梯度裁剪"),
    "tuple-output": ("tuple", "output[0]", "元组"),
    "zeros": ("all zeros", "all zero", "zeros", "全是零", "全为零", "全零", "都是零"),
    "rng": ("dropout", "rng", "random state", "preserve_rng_state", "随机"),
    "shape": ("shape mismatch", "wrong shape", "size mismatch", "shape", "形状不对", "形状", "维度不对", "维度",
              "尺寸不对"),
    "direct-call": (".forward(", "forward directly", "forward() directly", "called directly", "call directly",
                    "calls directly", "calling directly", "直接调用", "直接调 forward", "绕过 __call__", "bypass __call__"),
    "rerun": ("re-run", "re-ran", "rerun", "reran", "re-running", "rerunning", "run the cell again", "ran the cell again",
              "重新运行", "再运行一次", "重跑", "再跑一次", "重新执行"),
    "hook-order": ("order", "which runs first", "run first", "sequence", "顺序", "先后", "哪个先"),
    "remove-hook": ("remove hook", "remove the hook", "removehandle", "handle.remove", "unregister", "remove",
                    "removed", "移除", "删除钩子", "去掉钩子", "注销"),
    "compile": ("torch.compile", "compile", "compiled", "dynamo", "inductor", "编译"),
    "checkpoint": ("checkpoint", "checkpointing", "gradient checkpointing", "activation checkpointing", "recompute",
                   "recomputation", "检查点", "重算", "重计算"),
    "saved-tensor": ("saved tensor", "saved tensors", "saved_tensors_hooks", "pack hook", "unpack hook",
                     "保存的张量", "保存张量", "打包钩子", "解包钩子"),
    "backward-hook": ("backward hook", "register_full_backward_hook", "register_backward_hook", "反向钩子"),
    "forward-hook": ("forward hook", "register_forward_hook", "前向钩子"),
    "pre-hook": ("pre-hook", "pre hook", "prehook", "forward_pre_hook", "前置钩子"),
    "nan": ("nan", "inf", "non-finite", "nonfinite", "非有限", "无穷"),
    "in-place": ("in-place", "inplace", "in place", "modified by an inplace operation", "原地"),
    "copy": ("deepcopy", "deep copy", "deep copied", "deep-copy", "deep-copied", "copy.deepcopy", "pickle", "pickling",
             "pickled", "serialize", "serialise", "serialization", "torch.save", "save the model", "saving the model",
             "深拷贝", "深度拷贝", "深复制", "副本", "复制", "序列化", "保存模型", "模型保存"),
    "distributed": ("ddp", "distributeddataparallel", "fsdp", "distributed", "all-reduce", "allreduce", "deepspeed",
                    "zero-2", "zero-3", "zero stage", "data parallel", "dataparallel", "model parallel",
                    "tensor parallel", "分布式", "多卡", "切分", "数据并行", "模型并行"),
    "mixed-precision": ("autocast", "amp", "gradscaler", "mixed precision", "fp16", "bf16", "混合精度"),
    "accumulation": ("gradient accumulation", "accumulate", "micro-batch", "micro batch", "no_sync",
                     "梯度累积", "微批次"),
    "hook": ("hook", "hooks", "钩子"),
    # what learners call a thing the course and the recipes name otherwise (issue 65: a learner's own words, tuned on
    # the tuning part of recipes/bank/own_words.json)
    "ema": ("ema", "exponential moving average", "moving average", "滑动平均", "指数移动平均", "移动平均"),
    "upgrade": ("upgrade", "upgraded", "upgrading", "new version", "newer version", "old version", "older version",
                "between releases", "deprecated", "deprecation", "migrate", "migrating", "migration", "升级",
                "新版本", "旧版本", "版本升级", "弃用", "废弃", "迁移"),
    "override": ("override", "overridden", "overriding", "重写", "覆写"),
    "missing-argument": ("missing argument", "argument is missing", "missing positional argument",
                         "required positional argument", "少了一个参数", "少一个参数", "缺少参数", "缺少位置参数",
                         "缺少一个参数"),
    "none": ("nonetype", "is none", "returns none", "returned none", "returns nothing", "returned nothing",
             "got none", "返回空", "返回 none", "是 none", "为 none"),
    "by-name": ("by name", "by its name", "by module name", "by layer name", "named_modules", "get_submodule",
                "按名字", "按名称", "通过名字", "用名字"),
    "vit": ("vit", "vision transformer", "视觉 transformer", "视觉transformer"),
    "fpn": ("fpn", "feature pyramid", "特征金字塔"),
    "roi": ("roi", "region of interest", "pooled region", "region feature", "pooler", "roi pooling", "roi align",
            "感兴趣区域"),
    "cam": ("grad-cam", "gradcam", "grad cam", "cam", "class activation map", "heatmap", "heat map", "热力图",
            "类激活图"),
    "layer-norm": ("layer norm", "layernorm", "layer normalization", "norm layer", "层归一化", "归一化层"),
    "iteration": ("after_train_iter", "each iteration", "every iteration", "per iteration", "training iteration",
                  "after each iteration", "after every iteration", "每次迭代", "每个迭代", "每轮迭代"),
    # tuned on round three's tuning draw (recipes/bank/own_words_3_tuning.json), mostly Chinese learners' words
    "reentrant": ("reentrant", "re-entrant", "use_reentrant", "non-reentrant", "可重入", "重入", "非重入"),
    "wrapper": ("wrapper", "wrapped", "wrapping", "包装器", "包装", "被包装", "包了一层", "外面包"),
    "replace-parameter": ("replace the parameter", "replaced the parameter", "replacing the parameter",
                          "new parameter object", "swap the parameter", "替换了参数", "替换参数", "参数对象",
                          "换掉参数"),
    "grad-input": ("grad_input", "grad input", "gradient inputs", "gradients of the inputs", "输入梯度", "输入的梯度"),
    "tensor-hook": ("tensor hook", "register_hook", "hook on a tensor", "张量钩子", "张量上的钩子", "张量挂钩子"),
    "symbolic-trace": ("symbolic trace", "symbolic tracing", "symbolic_trace", "symbolically traced", "graph module",
                       "graphmodule", "符号追踪", "符号跟踪", "图追踪", "图跟踪"),
    "profiler": ("profiler", "profiling", "timeline", "trace viewer", "性能分析", "时间线", "耗时分析"),
    "no-attribute": ("has no attribute", "no attribute", "attributeerror", "没有这个属性", "没有属性", "没有该属性",
                     "找不到属性"),
    "device-map": ("device map", "device_map", "across devices", "several devices", "split across gpus",
                   "different devices", "分到不同设备", "不同设备", "多个设备", "拆到"),
    "post-accumulate": ("post-accumulate", "post accumulate", "register_post_accumulate_grad_hook",
                        "after gradient accumulation", "after the gradient is accumulated", "累加后钩子", "梯度累加之后",
                        "累加之后"),
    "accumulate-node": ("accumulategrad", "accumulate grad node", "gradient accumulation node", "accumulation node",
                        "累加节点", "梯度累加节点"),
    "unused-parameters": ("unused parameters", "unused parameter", "find_unused_parameters", "get no gradient",
                          "未使用的参数", "没用到的参数", "部分参数没有梯度", "有些参数没有梯度"),
    "aux-loss": ("auxiliary loss", "aux loss", "extra loss", "additional loss", "辅助损失", "额外的损失", "额外损失"),
}
_GROUP_OF = {phrase: group for group, phrases in SYNONYMS.items() for phrase in phrases}
# one pass over a text finds every phrase; an English phrase only as whole words ("amp" not in "example"), a plural
# too ("forward hooks")
_PHRASE = re.compile("|".join(
    re.escape(p) if not p[0].isascii() else rf"(?<![a-z0-9_]){re.escape(p)}(?:s|es)?(?![a-z0-9_])"
    for p in sorted(_GROUP_OF, key=len, reverse=True)))
_STOP = frozenset("a an the is are was were be to of in on at for and or my i it its this that with from by as do "
                  "does did how why what when can i'm im me you your we our not no".split())
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[a-z0-9_][a-z0-9_.]*[a-z0-9_]|[a-z0-9]")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}|%[sdrf]|<[^<>]*>")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`")
_NUMBER = re.compile(r"\b\d+(\.\d+)?\b|\[[\d, ]*\]|\([\d, ]*\)")


def _stem(word: str) -> str:
    """A light English stemmer: "called" / "calls" / "calling" -> "call", "fires" / "firing" -> "fir" ("loss", "class" stay)."""
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith(("ss", "us", "is")):
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) >= 4 else word  # fire, fires, firing, fired: fir


def entry_terms(text: str, title: str) -> str:
    """What the index keeps of an entry: its terms, the title's counted three times (see :func:`tokens`)."""
    return " ".join(tokens(text) + 3 * tokens(title))


_FULL_WIDTH = re.compile(r"[\u3000\uff01-\uff5e]+")  # the ideographic space and the full-width forms of ASCII


def folded(text: str) -> str:
    """``text`` as the lookup compares it: what a Chinese input method types in full-width mode (``ｂａｃｋｗａｒｄ``,
    ``（）``, the ideographic space) folded to ASCII by NFKC, then in lower case. Only those: NFKC would also fold
    the course's mathematics into words (``Wᵀ`` into ``wt``, ``n²`` into ``n2``).

    >>> folded("ｂａｃｋｗａｒｄ ＨＯＯＫ（钩子）　Wᵀ")
    'backward hook(钩子) wᵀ'
    """
    return _FULL_WIDTH.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text).lower()


def tokens(text: str) -> list[str]:
    """The terms of a text (:func:`folded` first): English words (lightly stemmed; a dotted or snake_case name also
    by its parts), pairs of Chinese characters, and one ``~group`` term for each phrase of :data:`SYNONYMS` found.

    >>> tokens("Hook not called")
    ['hook', 'call', '~never-fires', '~hook']
    >>> tokens("钩子没有被调用")[:3]
    ['钩子', '子没', '没有']
    >>> tokens("ｈｏｏｋ ｎｏｔ ｃａｌｌｅｄ") == tokens("hook not called")
    True
    """
    lower = folded(text)
    out: list[str] = []
    for word in _WORD.findall(lower):
        if word in _STOP:
            continue
        out.append(_stem(word))
        parts = [p for p in re.split(r"[._]", word) if len(p) > 1 and p not in _STOP]
        if len(parts) > 1:
            out.extend(_stem(p) for p in parts)
    for run in _CJK_RUN.findall(lower):
        out.extend(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    groups = {_GROUP_OF.get(p) or _GROUP_OF.get(p[:-1]) or _GROUP_OF[p[:-2]] for p in _PHRASE.findall(lower)}
    out.extend(f"~{group}" for group in SYNONYMS if group in groups)
    return out


def message_key(text: str) -> str:
    """A message as words only: placeholders, quoted names, numbers and shapes left out, so that PyTorch's text and
    the one a learner's run printed (with the learner's names and sizes) compare equal.

    >>> message_key("Expected 3 elements but got 'conv1' of size [2, 3]")
    'expected elements but got of size'
    """
    text = _PLACEHOLDER.sub(" ", text)
    text = _QUOTED.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    return " ".join(re.findall(r"[a-z]+", text.lower()))


@dataclass(frozen=True)
class Hit:
    """One answer: what it is (``kind``), its title in both languages, where it is, and how well it matched."""

    kind: str
    title_zh: str
    title_en: str
    notebook: str | None
    cell: str | None
    page: str | None
    score: float
    anchors: tuple[str, str] | None = None  # a section's anchor on the Chinese and the English site
    # a message's or a matrix cell's program (docs/programs/): {"show": {...}, "fix": {...} | None, ...}
    program: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # a library profile's programs, one per surprising fact: [{"id": "<slug>:<fact>", "show": ..., "fix": ...}, ...]
    programs: tuple[dict[str, Any], ...] = field(default=(), compare=False, repr=False)
    # the same row taught in other places too (a symptom in its lesson and in notebook 08's table): (notebook, cell,
    # page) of each, shown under this answer instead of taking a place of their own
    also: tuple[tuple[str | None, str | None, str | None], ...] = field(default=(), compare=False)

    def _chosen(self, which: int | str) -> dict[str, Any] | None:
        """This answer's program: its own, or of a profile's programs the ``which``-th (or the one of that id)."""
        if isinstance(which, bool) or not isinstance(which, (int, str)):
            raise TypeError(f"{self.title('en')}: which is a program's number (a whole number from 0) or its fact's "
                            f"name, got {type(which).__name__}" + self._listed())
        if self.program is None and not self.programs:
            return None  # no program to pick from: _program says so
        if self.program is not None:
            if which != 0:  # its one program is number 0; a number or a name that picks another is not this hit's
                raise LookupError(f"{self.title('en')}: this {self.kind} has one program, which=0; got which={which!r}")
            return self.program
        if isinstance(which, str):
            found = [p for p in self.programs if p.get("id") in (which, f"{self.programs[0]['id'].split(':')[0]}:{which}")]
            if not found:
                raise LookupError(f"{self.title('en')}: no program {which!r}" + self._listed())
            return found[0]
        if not 0 <= which < len(self.programs):
            raise LookupError(f"{self.title('en')}: it has {len(self.programs)} program(s), numbered from 0"
                              + self._listed())
        return self.programs[which]

    def _listed(self) -> str:
        """``; its programs: 0 <id>, 1 <id> ...`` for a hit with several programs ('' for the others)."""
        if not self.programs or self.program is not None:
            return ""
        return "; its programs: " + ", ".join(f"{i} {p.get('id')}" for i, p in enumerate(self.programs))

    def _program(self, fix: bool, which: int | str = 0) -> dict[str, Any]:
        part = "fix" if fix else "show"
        chosen = self._chosen(which)
        found = (chosen or {}).get(part)
        if not found:
            if chosen and fix:
                why = chosen.get("no_fix") or chosen.get("no_program")
                why = why.get("en") if isinstance(why, dict) else why
                raise LookupError(f"{self.title('en')}: its program has no fix" + (f" ({why})" if why else ""))
            raise LookupError(f"{self.title('en')}: this {self.kind} has no program (messages the course triggers "
                              "and matrix cells have one: ask(..., kinds=\"message\"))")
        return found

    def program_text(self, lang: str = "en", *, fix: bool = False, which: int | str = 0) -> str:
        """The program that shows this answer's message (``fix``: the same program corrected), with its comment in
        ``lang`` (``"zh"`` or ``"en"``), and what it prints as comments below it. A library profile has one program
        per surprising fact: ``which`` picks one (its number, or its fact's name). LookupError when it has none;
        ValueError for another ``lang`` (``"both"`` too: a program's comments are in one language)."""
        lang = _checked_program_lang(lang)
        program = self._program(fix, which)
        code = program["code"].get(lang) or program["code"]["en"]
        printed = program.get("prints") if program.get("prints") is not None else program.get("prints_start")
        said = {"zh": "# 打印：", "en": "# prints:"}[lang]
        lines = [code.rstrip()]
        if printed:
            lines += ["", said, *(f"#   {line}".rstrip() for line in printed.splitlines())]
        return "\n".join(lines) + "\n"

    def run(self, fix: bool = False, which: int | str = 0, *, timeout: float | None = PROGRAM_TIMEOUT) -> str:
        """Run this answer's program here (``fix``: the corrected one), in a fresh namespace, and print what it
        shows: its exception as ``Type: message``, each warning as ``Category: message``, then what it printed
        (:func:`hooklab.course.programs.run`); a program whose library is not installed here says what to install,
        at the releases it ran with. Returns the same text. A library profile has one program per
        surprising fact: ``which`` picks one, by its number (a whole number from 0) or its fact's name. LookupError
        when it has none, or none by that number or name; TypeError for a ``which`` of another type. ``timeout``:
        the program's time bound in seconds (None: none), as :func:`hooklab.course.programs.run` applies it."""
        from .programs import run

        program = self._program(fix, which)
        # what it ran with beside torch, where the file stores it (docs/programs/profiles.json, frameworks.json): the
        # install line of a program whose library is missing here
        requires = program.get("requires") or (self._chosen(which) or {}).get("requires") or ()
        shown = run(program["code"]["en"], timeout=timeout, requires=requires)
        print(shown)
        return shown

    def places(self) -> set[tuple[str | None, str | None]]:
        """(notebook, cell) of this answer and of each place that holds the same row (:attr:`also`)."""
        return {(self.notebook, self.cell), *((notebook, cell) for notebook, cell, _ in self.also)}

    def title(self, lang: str) -> str:
        if lang == "zh":
            return self.title_zh or self.title_en
        if lang == "en":
            return self.title_en or self.title_zh
        return " / ".join(dict.fromkeys(t for t in (self.title_zh, self.title_en) if t))

    @property
    def lab_link(self) -> str | None:
        """The cell in JupyterLab, relative to the notebooks' folder (a recipe is in ``../recipes/``)."""
        if not self.notebook:
            return None
        return f"{self.notebook}#cell-id={self.cell}" if self.cell else self.notebook

    def site_link(self, lang: str) -> str | None:
        """The page on the course website, relative to its root (``zh/…`` or ``en/…``; ``both``: the Chinese
        site), with a section's anchor."""
        if not self.page:
            return None
        site = "en" if lang == "en" else "zh"
        anchor = f"#{self.anchors[site == 'en']}" if self.anchors and "#" not in self.page else ""
        return f"{site}/{self.page}{anchor}"

    def url(self, lang: str) -> str | None:
        """Where a reader opens it: the site's page at the site's address (:func:`website.site_url`), else the
        page's path on the site; the repository's file where no page exists and the repository is known."""
        link = self.site_link(lang)
        if link:
            return website.page_url(link)
        repository = website.repository_url()
        if repository and self.notebook:
            folder = "" if self.notebook.startswith("../") else "notebooks/"
            return f"{repository}/blob/main/{folder}{self.notebook.removeprefix('../')}"
        return None


_PROGRAM_LINE = {"zh": "可运行的程序：ask(...)[{i}].program_text('zh')，运行：ask(...)[{i}].run()",
                 "en": "a program shows it: ask(...)[{i}].program_text(), ask(...)[{i}].run()",
                 "both": "program / 程序: ask(...)[{i}].program_text(), ask(...)[{i}].run()"}
_PROGRAMS_LINE = {"zh": "{n} 个可运行的程序，各演示一个意外的事实：ask(...)[{i}].run(which=k)，k 从 0 数起",
                  "en": "{n} programs, one per surprising fact: ask(...)[{i}].run(which=k), k from 0",
                  "both": "{n} programs / 个程序: ask(...)[{i}].run(which=k)"}
_FIX_LINE = {"zh": "修正：ask(...)[{i}].run(fix=True)", "en": "its fix: ask(...)[{i}].run(fix=True)",
             "both": "fix / 修正: ask(...)[{i}].run(fix=True)"}
_ALSO = {"zh": "同一条也在", "en": "the same row also in", "both": "also in / 也在"}
_ON_THE_SITE = {"zh": "（以上是课程网站上的页面路径；设置 HOOKLAB_SITE_URL 可给出完整地址）",
                "en": "(paths of pages on the course's website; HOOKLAB_SITE_URL sets its address)"}


class Answers(list[Hit]):
    """The hits of one question, best first; shown as links to the course's website in a notebook (and to the cell
    in JupyterLab when the notebook is at hand), as lines in a terminal."""

    def __init__(self, hits: list[Hit], query: str, lang: str) -> None:
        super().__init__(hits)
        self.query, self.lang = query, lang

    def _footer(self) -> list[str]:
        """Where the site's address is not known, a line saying that the paths are the website's."""
        if website.site_url() or not any(hit.page for hit in self):
            return []
        return [_ON_THE_SITE[lang] for lang in (("zh", "en") if self.lang == "both" else (self.lang,))]

    def __repr__(self) -> str:
        if not self:
            return _nothing(self.lang)
        lines = []
        for rank, hit in enumerate(self, start=1):
            lines.append(f"{rank}. [{hit.kind}] {hit.title(self.lang)}  ->  {hit.url(self.lang) or ''}")
            if hit.program and hit.program.get("show"):
                has_fix = bool(hit.program.get("fix"))
                lines.append(f"   {_PROGRAM_LINE[self.lang].format(i=rank - 1)}"
                             + (f" · {_FIX_LINE[self.lang].format(i=rank - 1)}" if has_fix else ""))
            elif hit.programs:
                lines.append(f"   {_PROGRAMS_LINE[self.lang].format(i=rank - 1, n=len(hit.programs))}")
            for notebook, _, page in hit.also:
                lines.append(f"   {_ALSO[self.lang]}: {page or notebook}")
        return "\n".join(lines + self._footer())

    def _repr_markdown_(self) -> str:
        if not self:
            return _nothing(self.lang)
        rows = []
        for hit in self:
            url = hit.url(self.lang)
            links = [f"[{url}]({url})" if url and "://" in url else f"`{url}`"] if url else []
            if hit.lab_link and Path(hit.lab_link.split("#")[0]).is_file():  # in the course's notebooks folder
                links.append(f"lab: [{hit.lab_link}]({hit.lab_link})")
            links += [f"{_ALSO[self.lang]} `{page or notebook}`" for notebook, _, page in hit.also]
            rows.append(f"1. **{hit.kind}** {hit.title(self.lang)} — {' · '.join(links)}")
        return "\n".join(rows + [f"\n{line}" for line in self._footer()])


def _nothing(lang: str) -> str:
    zh = "没有找到。换个说法试试，或者把完整的报错信息贴进来。"
    en = "Nothing found: try other words, or paste the whole error message."
    return {"zh": zh, "en": en}.get(lang, f"{zh}\n{en}")


_NUMBERED = re.compile(r"^\d\d · \d+\. ")  # a section's title: its notebook's and its own number first


def title_terms(entry: dict[str, Any]) -> list[frozenset[str]]:
    """The terms of an entry's title, one set per language (a section's numbers left out)."""
    return [frozenset(tokens(_NUMBERED.sub("", entry[lang] or ""))) for lang in ("en", "zh")]


@functools.cache
def _programs() -> dict[str, Any]:
    """The entries' programs, entry id -> ``{"program": ...}`` / ``{"programs": [...]}`` (``assets/ask/programs.json.gz``)."""
    path = resources.files("hooklab.course") / "assets" / "ask" / "programs.json.gz"
    try:
        return json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
    except FileNotFoundError:  # an index written before programs existed
        return {}


@functools.cache
def _index() -> tuple[list[dict[str, Any]], list[Counter[str]], dict[str, float], float, list[list[frozenset[str]]]]:
    path = resources.files("hooklab.course") / "assets" / "ask" / "index.json"
    entries = json.loads(path.read_text(encoding="utf-8"))["entries"]
    if any(e.get("program") is True or e.get("programs") for e in entries):  # shipped apart (tools/ask/index.py)
        programs = _programs()
        for e in entries:
            stored = programs.get(e["id"], {})
            if e.get("program") is True:
                e["program"] = stored.get("program")
            if e.get("programs"):
                e["programs"] = stored.get("programs", [])
    counts = [Counter(e["terms"].split()) for e in entries]
    frequency: Counter[str] = Counter()
    counted = [c for c, e in zip(counts, entries) if "weight" not in e]  # the statistics words are weighed by
    for count in counted:
        frequency.update(count.keys())
    n = len(counted)
    for count in counts:  # a word only such entries hold is as rare as a word can be
        frequency.update({term: 0 for term in count.keys() - frequency.keys()})
    idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in frequency.items()}
    average = sum(sum(c.values()) for c in counted) / max(n, 1)
    # the titles' terms as tools/ask/index.py wrote them (title_terms of every title, at the first answer, took seconds)
    titles = [[frozenset(words.split()) for words in e["title_terms"]] for e in entries]
    return entries, counts, idf, average, titles


def title_share(query: Counter[str], titles: list[frozenset[str]], idf: dict[str, float]) -> float:
    """How much of an entry's title the question says (0..1): the share of the title's terms, each weighed by how
    rare it is, that the question holds, in the title's language that says most ("The hook never fires" for "my
    forward hook is never called": most of it; a long row about FSDP2 that also never fires: a little)."""
    best = 0.0
    for title in titles:
        total = sum(idf.get(t, 0.0) for t in title)
        if total:
            best = max(best, sum(idf.get(t, 0.0) for t in title if t in query) / total)
    return best


def query_terms(query: str) -> Counter[str]:
    """The terms of a question and how much each counts: a ``~group`` term (a phrase of :data:`SYNONYMS`: the
    symptom in the learner's words) :data:`GROUP_WEIGHT` times, every other term once.

    >>> dict(query_terms("hook not called"))
    {'hook': 1, 'call': 1, '~never-fires': 2, '~hook': 2}
    """
    return Counter(t for term in tokens(query) for t in [term] * (GROUP_WEIGHT if term[0] == "~" else 1))


def _bm25(query: Counter[str], count: Counter[str], idf: dict[str, float], average: float) -> float:
    length = sum(count.values())
    score = 0.0
    for term, times in query.items():
        f = count.get(term, 0)
        if f:
            score += times * idf[term] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / average))
    return score


_MATCH_TOKEN = re.compile(r"[a-z0-9_]+|[^\sa-z0-9_]")
# what differs between the message's text and a run's: placeholders, numbers, addresses (the rest is compared as is)
_WILDCARD = re.compile(r"\{[^{}]*\}|%[sdrf]|<[^<>\n]*>|\b0x[0-9a-f]+\b|\b\d+(?:\.\d+)?\b")
_CLASS_PREFIX = re.compile(r"^\s*(?:(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Warning)\s*:\s*)+")
MESSAGE_WORDS = 3  # a message of fewer words (KeyError), or with a placeholder and fewer tokens than this ("{} is
MESSAGE_TOKENS = 4  # not supported"), says too little to be recognised in a paste
MESSAGE_SHARE = 0.8  # the share of a message's words that a paste must hold, in its order, to be that message


@functools.cache
def message_pattern(message: str) -> tuple[tuple[str, ...], ...]:
    """A message's text as its literal runs of tokens (words and punctuation, lower case), split where a run of the
    program puts its own values (a placeholder ``{name}`` / ``%s`` / ``<...>``, a number, an address).

    >>> message_pattern("Expected {n} hooks, got %d.")
    (('expected',), ('hooks', ',', 'got'), ('.',))
    """
    message = _CLASS_PREFIX.sub("", message)  # "RuntimeError: …" as the asker quoted it: the class is no word of it
    parts = (_MATCH_TOKEN.findall(part) for part in _WILDCARD.split(folded(message)))
    return tuple(tuple(part) for part in parts if part)


def _pasted(query: str) -> tuple[str, frozenset[str]]:
    """A pasted text's tokens as one string (each between spaces, for exact runs) and the set of its tokens."""
    found = _MATCH_TOKEN.findall(folded(query))
    return f" {' '.join(found)} ", frozenset(found)


def message_match(pasted: tuple[str, frozenset[str]], message: str) -> tuple[float, int]:
    """How much of ``message`` the pasted text holds as exact runs in the message's order: (the share of the
    message's words in such runs, their number). A run is two tokens or more, or a whole literal part of the
    message, found after the run before it; a message of fewer than :data:`MESSAGE_WORDS` words, or with a
    placeholder and fewer than :data:`MESSAGE_TOKENS` tokens, matches nothing.

    >>> pasted = _pasted("RuntimeError: register_comm_hook or register_builtin_comm_hook can only be called once.")
    >>> message_match(pasted, "register_comm_hook or register_builtin_comm_hook can only be called once.")
    (1.0, 8)
    >>> message_match(pasted, "register_builtin_comm_hook or register_comm_hook can only be called once.")[0] < 0.8
    True
    """
    text, present = pasted
    segments = message_pattern(message)
    words = [t for segment in segments for t in segment if t[0].isalnum() or t[0] == "_"]
    if (len(words) < MESSAGE_WORDS or len(present.intersection(words)) < MESSAGE_SHARE * len(set(words))
            or (sum(map(len, segments)) < MESSAGE_TOKENS and _WILDCARD.search(message.lower()))):
        return 0.0, 0
    at, matched = 0, 0
    for segment in segments:
        i = 0
        while i < len(segment):
            j, found = i, -1
            while j < len(segment):  # the longest run segment[i:j + 1] found after the previous run
                where = text.find(f" {' '.join(segment[i:j + 1])} ", at)
                if where < 0:
                    break
                found, j = where, j + 1
            if j - i >= 2 or (j - i == 1 and len(segment) == 1):
                matched += sum(1 for t in segment[i:j] if t[0].isalnum() or t[0] == "_")
                at = found + len(" ".join(segment[i:j]))
                i = j
            else:
                i += 1
    return matched / len(words), matched


MAX_QUERY = 20_000  # characters: a whole traceback ranks in seconds; its last lines say what matters


def _checked_query(query: object) -> str:
    if isinstance(query, (bytes, bytearray)):
        raise TypeError("course.ask takes text, got bytes: decode it first, e.g. course.ask(data.decode('utf-8'))")
    if not isinstance(query, str):
        raise TypeError(f"course.ask takes a question or a pasted message as a str, got {type(query).__name__}; "
                        "e.g. course.ask('hook not called')")
    if not query.strip():
        raise ValueError("course.ask needs a question or a pasted message, e.g. course.ask('hook not called')")
    if len(query) > MAX_QUERY:
        raise ValueError(f"course.ask reads at most {MAX_QUERY:,} characters, got {len(query):,}: paste the last lines "
                         "of the traceback (the error's own line and the few above it), not the whole log")
    return query


def _checked_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"course.ask: k is how many answers, a whole number of at least 1, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"course.ask: k is how many answers, a whole number of at least 1, got {int(k)}")
    return int(k)


def _checked_lang(lang: object) -> str:
    if lang is None:
        return course_language()
    if not isinstance(lang, str) or lang not in LANGS:
        shown = repr(lang[:20]) if isinstance(lang, str) else type(lang).__name__
        raise ValueError(f"course.ask: lang is one of {', '.join(map(repr, LANGS))} (or None: the course's "
                         f"setting), got {shown}")
    return lang


def _checked_program_lang(lang: object) -> str:
    if not isinstance(lang, str) or lang not in ("zh", "en"):
        shown = repr(lang[:20]) if isinstance(lang, str) else type(lang).__name__
        raise ValueError(f"program_text: lang is 'zh' or 'en', the language of the program's comments (for both, "
                         f"call it once with each), got {shown}")
    return lang


def _checked_kinds(kinds: object) -> tuple[str, ...] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):  # kinds="message": one kind
        kinds = (kinds,)
    try:
        chosen: tuple[Any, ...] = tuple(cast(Iterable[Any], kinds))
    except TypeError:
        raise TypeError(f"course.ask: kinds is a tuple of kinds ({', '.join(KINDS)}), got "
                        f"{type(kinds).__name__}") from None
    if not chosen:
        raise ValueError(f"course.ask: kinds=() chooses nothing: choose at least one of {', '.join(KINDS)}")
    unknown = sorted(repr(k[:20]) if isinstance(k, str) else type(k).__name__ for k in chosen if k not in KINDS)
    if unknown:
        raise ValueError(f"course.ask: unknown kinds {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    return chosen


def has_words(terms: Counter[str]) -> bool:
    """Whether a question holds a word to rank by: a term of two characters or more (a lone letter, as regular
    expressions' ``(?P<x>`` leaves, is not one)."""
    return any(len(term) > 1 for term in terms)


# A question in a learner's words that the course itself teaches: recipes for the same mechanism in many libraries
# gather around it, and their long texts can push the lesson (the symptom row, the section) just past the first three.
# When the best course place scores within this share of the first answer, it takes the third place.
LESSON_SHARE = 0.9


# A question that names no library and pastes no error is a learner's: of the first answers, the course's own place
# (the lesson) comes first when it scores at least this share of the first (issue 81; chosen on the tuning part of
# tools/ask/learner_panel.json: it reorders the first three only, so what they hold is unchanged).
LESSON_FIRST_SHARE = 0.5
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning)\b|Traceback \(most recent call last\)")
# parts of a library's name that name nothing on their own ("pytorch-lightning": "lightning" does, "pytorch" not)
_GENERIC_NAME_PARTS = frozenset({"pytorch", "torch", "transformer", "lens", "core"})


@functools.cache
def _library_names() -> re.Pattern[str]:
    """The names of the libraries the course profiles (their distributions' names, as the index's profiles are
    titled; PyTorch's own tools, titled by their module or class, are not libraries), as a user writes them:
    ``pytorch-lightning``, ``pytorch_lightning``, ``pytorch lightning``, ``lightning``."""
    names: set[str] = set()
    for e in _index()[0]:
        if e["kind"] != "profile":
            continue
        name = e["en"].split(":")[0]
        if e["id"].startswith("profile:frameworks-"):  # "The equivalent of a hook in JAX / Flax"
            name = e["id"].removeprefix("profile:frameworks-")
        elif " " in name or "." in name or name != name.lower():
            continue  # torch.nn.utils.prune, FSDP2 (fully_shard), DistributedDataParallel: PyTorch's own
        names |= {name, name.replace("-", "_"), name.replace("-", " "), name.replace("-", "")}
        names |= {part for part in name.split("-") if len(part) >= 5 and part not in _GENERIC_NAME_PARTS}
    return re.compile(r"(?<![\w-])(?:" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")(?![\w-])")


def learners_words(query: str) -> bool:
    """Whether ``query`` is in a learner's words: it names no library the course profiles and holds no exception's
    name or traceback (a practitioner's paste).

    >>> learners_words("my forward hook never fires"), learners_words("forward hook with pytorch_lightning")
    (True, False)
    """
    return not _EXCEPTION.search(query) and not _library_names().search(query.lower())


def _lesson_first(scored: list[tuple[float, dict[str, Any]]], k: int, query: str) -> None:
    """For a question in a learner's words, move the best course place among the first ``k`` to the top, in place,
    when it scores at least :data:`LESSON_FIRST_SHARE` of the first answer (never above a pasted message's match)."""
    if not scored or scored[0][0] >= MESSAGE_TIER or scored[0][1]["kind"] in LEARNER_KINDS:
        return
    best = next((i for i, (_, e) in enumerate(scored[:k]) if e["kind"] in LEARNER_KINDS), None)
    if best is not None and scored[best][0] >= LESSON_FIRST_SHARE * scored[0][0] and learners_words(query):
        scored.insert(0, scored.pop(best))


def _keep_the_lesson_in_view(scored: list[tuple[float, dict[str, Any]]], k: int) -> None:
    """Move the best course place (a symptom row or section) into third place, in place, when the first three hold
    none and it scores at least :data:`LESSON_SHARE` of the first answer (never above a pasted message's match)."""
    if k < 3 or len(scored) < 4 or scored[0][0] >= MESSAGE_TIER:
        return
    if any(e["kind"] in LEARNER_KINDS for _, e in scored[:3]):
        return
    best = next((i for i, (_, e) in enumerate(scored) if e["kind"] in LEARNER_KINDS), None)
    if best is not None and scored[best][0] >= LESSON_SHARE * scored[0][0]:
        scored.insert(2, scored.pop(best))


def ask(query: str, *, k: int = 5, lang: str | None = None, kinds: tuple[str, ...] | str | None = None) -> Answers:
    """The ``k`` best places in the course for a pasted error message or a question in your own words.

    ``lang``: ``"zh"``, ``"en"`` or ``"both"`` for the titles (default: :func:`course_language`); ``kinds``: only
    these kinds of entry (``"message"``, ``"symptom"``, ``"section"``, ``"matrix"``, ``"recipe"``, ``"profile"``,
    ``"tool"`` (the doctor), ``"atlas"``; one kind may be given as a str). The query is at most
    :data:`MAX_QUERY` characters (paste the last lines of a traceback).

    >>> ask("hook", k=0)
    Traceback (most recent call last):
    ValueError: course.ask: k is how many answers, a whole number of at least 1, got 0
    """
    query = _checked_query(query)
    k, lang, kinds = _checked_k(k), _checked_lang(lang), _checked_kinds(kinds)
    entries, counts, idf, average, titles = _index()
    terms = query_terms(query)
    if not has_words(terms):  # punctuation, regular expressions' metacharacters: nothing to rank by
        return Answers([], query, lang)
    pasted = _pasted(query)
    scored = []
    for entry, count, title in zip(entries, counts, titles, strict=True):
        if kinds is not None and entry["kind"] not in kinds:
            continue
        score = _bm25(terms, count, idf, average) * KIND_WEIGHT.get(entry["kind"], 1.0) * entry.get("weight", 1.0)
        if entry["kind"] == "tool" and not DOCTOR_GROUPS.isdisjoint(terms):
            score *= DOCTOR_WEIGHT
        share, length = message_match(pasted, entry["message"]) if entry.get("message") else (0.0, 0)
        if share >= MESSAGE_SHARE:  # a pasted message that is this one comes first, above every other answer (the
            # words of a long traceback add up to any score): of two messages it holds, the one it holds more of; at
            # equal length the place that explains it, then the recipes that meet it, then a matrix cell; the words
            # only break ties (a recipe's long text would otherwise beat the explaining row)
            score = (MESSAGE_TIER + MESSAGE_BONUS.get(entry["kind"], 100) * share + MESSAGE_LENGTH * min(length, 60)
                     + 0.1 * score)
        else:
            score *= 1 + TITLE_WEIGHT * title_share(terms, title, idf)
        if score > 0:
            scored.append((score, entry))
    scored.sort(key=lambda pair: (-pair[0], pair[1]["id"]))
    _keep_the_lesson_in_view(scored, k)
    _lesson_first(scored, k, query)
    chosen: list[tuple[float, dict[str, Any], list[tuple[str | None, str | None, str | None]]]] = []
    seen: set[tuple[str | None, str | None, str | None]] = set()
    rows: dict[tuple[str, str], list[tuple[str | None, str | None, str | None]]] = {}
    for score, e in scored:  # one hit per place: matrix cells taught by one cell would otherwise fill the list
        place = (e.get("notebook"), e.get("cell"), None if e.get("cell") else e.get("page"))
        if place in seen:
            continue
        seen.add(place)
        if (e["kind"], e["en"]) in rows:  # the same row in another place: shown under the first, not again
            rows[e["kind"], e["en"]].append((e.get("notebook"), e.get("cell"), e.get("page")))
            continue
        if len(chosen) == k:
            continue  # a later twin of a chosen row still joins it
        chosen.append((score, e, rows.setdefault((e["kind"], e["en"]), [])))
    return Answers([hit(e, score, also) for score, e, also in chosen], query, lang)


def hit(entry: dict[str, Any], score: float = 0.0,
        also: Iterable[tuple[str | None, str | None, str | None]] = ()) -> Hit:
    """The answer :func:`ask` gives for an entry of the index (its links: :meth:`Hit.site_link`, :meth:`Hit.url`)."""
    e = entry
    return Hit(e["kind"], e["zh"], e["en"], e.get("notebook"), e.get("cell"), e.get("page"), round(score, 3),
               (e["anchor"]["zh"], e["anchor"]["en"]) if e.get("anchor") else None, e.get("program"),
               tuple(e.get("programs") or ()), tuple(also))
