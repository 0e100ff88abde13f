"""The equivalents of a PyTorch hook in other frameworks: docs/other_frameworks.json and its site page.

    python -m tools.profiles.frameworks --write [--only NAME ...]   # run the examples, write the record
    python -m tools.profiles.frameworks --check [--only NAME ...]   # run them again, compare with the record

The data (what a forward hook, a backward hook and a saved-tensor hook are in JAX / Flax, MLX, TensorFlow / Keras,
libtorch, TorchSharp, ONNX Runtime and llama.cpp, with pinned source links and an example program each where the
framework runs on a CPU) is :data:`tools.profiles.frameworks_data.FRAMEWORKS`. Each example runs in a fresh process:
in the project's environment, or in that environment with the framework's pinned requirements installed beside it
(``uv run --no-sync --frozen --with REQ``, cached by uv; the pinned torch must stay, else the run fails). The record
keeps what each example printed (booleans, shapes, names: nothing that depends on the machine), the versions it ran
with, and a hash of the example, so that an example edited without recording it again is caught by the tests
(tests/tools/test_other_frameworks.py). :func:`page` is the site's page in each language.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .frameworks_data import CONCEPTS, FRAMEWORKS, Framework, example_in

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "other_frameworks.json"
UV = ROOT / ".tools" / "bin" / "uv"
ABOUT = ("What a PyTorch forward hook, backward hook and saved-tensor hook are in other frameworks; each runnable "
         "example's output is recorded by python -m tools.profiles.frameworks --write (tools/profiles/frameworks.py).")
# notebooks that teach each PyTorch hook, linked from the page when the build has them
TEACHES = {"forward": "03_module_forward_hooks", "backward": "01_tensor_hooks", "saved": "06_saved_tensor_hooks"}


def by_name(names: list[str] | None = None) -> list[Framework]:
    """The frameworks called ``names`` (all when None), in the data's order; an unknown name lists the known ones."""
    known = {f.name: f for f in FRAMEWORKS}
    unknown = sorted(set(names or []) - set(known))
    if unknown:
        raise SystemExit(f"unknown framework {', '.join(unknown)}: the frameworks are {', '.join(known)}")
    return [f for f in FRAMEWORKS if names is None or f.name in names]


def example_hash(framework: Framework) -> str:
    return hashlib.sha256(framework.example.encode()).hexdigest()[:16]


def base_version(version: str) -> str:
    """``2.15.0+cu132`` -> ``2.15.0``: the local part names the build's index, not the release."""
    return version.split("+", 1)[0]


def toolchain_missing(framework: Framework) -> str:
    """Why ``framework``'s example cannot run on this machine ('' when it can)."""
    if framework.needs == "c++":
        if not (shutil.which("c++") or shutil.which("g++")):
            return "no C++ compiler (c++ or g++) on PATH"
        if not shutil.which("ninja"):  # as torch.utils.cpp_extension.is_ninja_available looks for it
            return "no ninja on PATH (torch.utils.cpp_extension.load_inline builds with it)"
    if framework.requirements and not (UV.exists() or shutil.which("uv")):
        return "uv is not installed (./course installs it in .tools/)"
    return ""


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.setdefault("UV_PYTHON", sys.executable)
    return env


def command(framework: Framework, out: Path) -> list[str]:
    """How to run ``framework``'s example in its environment; the child writes its record to ``out``."""
    child = ["-m", "tools.profiles.frameworks", "--child", framework.name, "--out", str(out)]
    if not framework.requirements:
        return [sys.executable, *child]
    uv = str(UV) if UV.exists() else shutil.which("uv") or "uv"
    withs = [arg for req in framework.requirements for arg in ("--with", req)]
    return [uv, "run", "--no-sync", "--frozen", "--quiet", *withs, "python", *child]


def record(framework: Framework, *, timeout: float = 900) -> dict[str, Any]:
    """Run ``framework``'s example in a fresh process of its environment: ``{"example_sha256", "versions",
    "output"}``. Fails when the process fails, hangs past ``timeout`` seconds, or runs another torch."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "record.json"
        try:
            done = subprocess.run(command(framework, out), cwd=ROOT, env=_env(), capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"the {framework.name} example did not finish in {timeout:.0f} s") from exc
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the {framework.name} example failed (exit {done.returncode}):\n"
                               f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        result = json.loads(out.read_text(encoding="utf-8"))
    torch_here = base_version(importlib.metadata.version("torch"))
    if result["versions"].get("torch") != torch_here:
        raise RuntimeError(f"the {framework.name} run used torch {result['versions'].get('torch')}, not the "
                           f"project's {torch_here}: its requirements replace torch")
    return {"example_sha256": example_hash(framework), **result}


def child(name: str, out: Path) -> None:
    """In the example's environment: run it, keep what it prints and the versions it ran with."""
    (framework,) = by_name([name])
    versions: dict[str, str | None] = {}
    for package in ("torch", "numpy", *framework.packages):
        try:
            versions[package] = base_version(importlib.metadata.version(package))
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(framework.example, f"<{name} example>", "exec"), {"__name__": "__main__"})  # noqa: S102
    lines = [line.rstrip() for line in printed.getvalue().splitlines()]
    from hooklab.course.programs import run  # once more, as the lookup's hit.run() shows it (docs/programs/)

    out.write_text(json.dumps({"versions": versions, "output": lines, "shown": run(framework.example)}),
                   encoding="utf-8")


PROGRAMS = ROOT / "docs" / "programs" / "frameworks.json"
PROGRAMS_ABOUT = ("Each runnable example of docs/other_frameworks.json as a program (the equivalent of a hook in that "
                  "framework), with what hooklab.course.programs.run showed when its environment ran it; written by "
                  "python -m tools.profiles.frameworks --write (tools/profiles/frameworks.py). Its needs: the modules "
                  "it imports besides torch and numpy, or c++ (a compiler and ninja for load_inline); its requires: "
                  "the requirements it ran with beside torch, what hit.run() says to install where they are missing.")
HEAD = {"en": "# {title}: the equivalent of a hook, run with {version} (docs/other_frameworks.json)",
        "zh": "# {title} 里与钩子相当的东西，运行时的版本：{version}（docs/other_frameworks.json）"}
NO_FIX = {"en": "the equivalent of a hook in another framework, not a fault: there is nothing to fix",
          "zh": "另一个框架里与钩子相当的做法，不是错误，没有需要修正的地方"}


def _needs(framework: Framework) -> list[str]:
    """What a program of ``framework`` needs besides the course's environment: ``c++`` or the modules it imports."""
    if framework.needs == "c++":
        return ["c++"]
    tree = ast.parse(framework.example)
    top = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    top |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0}
    return sorted(top - set(sys.stdlib_module_names) - {"torch", "numpy", "hooklab", ""})


def _requires(framework: Framework, recorded: dict[str, Any] | None) -> list[str]:
    """The requirements ``framework``'s example ran with beside torch: its overlay's pins, else (in the course's
    environment) its packages at the versions recorded; none for a C++ build."""
    if framework.requirements:
        return list(framework.requirements)
    versions = (recorded or {}).get("versions") or {}
    return [f"{package}=={versions[package]}" for package in framework.packages if versions.get(package)]


def programs(doc: dict[str, Any]) -> dict[str, Any]:
    """docs/programs/frameworks.json from the record: each runnable framework's example under ``frameworks-<name>``,
    its code headed in each language, what it showed (``prints``, None where not recorded yet), its needs and the
    requirements it ran with (``requires``)."""
    recorded = {f["name"]: f.get("recorded") for f in doc["frameworks"]}
    found: dict[str, Any] = {}
    for framework in FRAMEWORKS:
        if not framework.runnable:
            continue
        shown = (recorded.get(framework.name) or {}).get("shown")
        code = {lang: HEAD[lang].format(title=framework.title, version=framework.version) + "\n"
                + example_in(framework.example, lang).lstrip("\n") for lang in ("en", "zh")}
        found[f"frameworks-{framework.name}"] = {"show": {"code": code, "prints": shown}, "fix": None,
                                                 "needs": _needs(framework),
                                                 "requires": _requires(framework, recorded.get(framework.name)),
                                                 "no_fix": NO_FIX}
    return {"about": PROGRAMS_ABOUT, "programs": found}


def load(path: Path = RECORD) -> dict[str, Any]:
    if not path.exists():
        raise SystemExit(f"{path.relative_to(ROOT)} is missing: python -m tools.profiles.frameworks --write")
    return json.loads(path.read_text(encoding="utf-8"))


def build(names: list[str] | None, previous: dict[str, Any] | None, *, timeout: float = 900) -> dict[str, Any]:
    """The record: every framework's data, with the runnable ones of ``names`` (all when None) run now and the
    others' output kept from ``previous``."""
    kept = {f["name"]: f.get("recorded") for f in (previous or {}).get("frameworks", [])}
    chosen = {f.name for f in by_name(names)}
    frameworks = []
    for framework in FRAMEWORKS:
        recorded = None
        if framework.runnable:
            missing = toolchain_missing(framework) if framework.name in chosen else ""
            if framework.name in chosen and not missing:
                print(f"running the {framework.name} example ...", file=sys.stderr)
                recorded = record(framework, timeout=timeout)
            else:
                if missing:
                    print(f"not running the {framework.name} example: {missing}; its record is kept", file=sys.stderr)
                recorded = kept.get(framework.name)
        frameworks.append({**framework.to_json(), "recorded": recorded})
    return {"about": ABOUT, "concepts": list(CONCEPTS), "frameworks": frameworks}


def differences(old: dict[str, Any], new: dict[str, Any], names: list[str] | None = None) -> list[str]:
    """What differs between two records, for the frameworks ``names`` (all when None), one line each."""
    before = {f["name"]: f for f in old.get("frameworks", [])}
    found = []
    for fresh in new["frameworks"]:
        if names is not None and fresh["name"] not in names:
            continue
        was = before.get(fresh["name"])
        if was is None:
            found.append(f"{fresh['name']}: not in the record")
            continue
        for key in sorted(set(fresh) | set(was)):
            if key == "recorded" and fresh.get(key) and was.get(key):
                for part in ("example_sha256", "versions", "output", "shown"):
                    if fresh[key].get(part) != was[key].get(part):
                        found.append(f"{fresh['name']}.{part}: recorded {was[key].get(part)!r}, now "
                                     f"{fresh[key].get(part)!r}")
            elif fresh.get(key) != was.get(key):
                found.append(f"{fresh['name']}.{key} differs from the record")
    return found


# ---------------------------------------------------------------------------------------------------------- the page

TEXT: dict[str, dict[str, Any]] = {
    "en": {"title": "Hooks in other frameworks",
           "intro": ("What a PyTorch forward hook (see or replace a module's input and output), backward hook (see "
                     "or replace a gradient) and saved-tensor hook (pack and unpack what autograd keeps for the "
                     "backward pass) become in other frameworks. Where a framework installs on a CPU, its example "
                     "below was run and its output is shown as recorded; otherwise the facts are read from the "
                     "source at the pinned links."),
           "legend": ("✓ an API does the hook's job; ≈ an API does part of it (seeing but not replacing, or "
                      "choosing what is kept but not transforming it); ✗ nothing does it: the section says what "
                      "people do instead."),
           "table": "At a glance", "framework": "Framework", "runs": "How it was checked",
           "concepts": {"forward": "Forward hook", "backward": "Backward hook", "saved": "Saved-tensor hook"},
           "levels": {"yes": "✓", "partial": "≈", "no": "✗"}, "none": "no equivalent",
           "version": "Version", "how": "How it was checked", "example": "Example",
           "output": "Its output, as recorded:", "not_recorded": "Not recorded yet: python -m tools.profiles.frameworks --write",
           "sources": "Source, at the pinned version", "missing": "What has no equivalent",
           "pytorch": " (PyTorch: {link})", "notebook": "notebook {nn}", "colon": ": ",
           "runs_ran": {"project env": "run in the course's environment", "overlay": "run beside the course's environment: {reqs}"},
           "source_only": "read from the source only: {why}",
           "maintainers": "For maintainers",
           "kept": ("The data is tools/profiles/frameworks_data.py; `python -m tools.profiles.frameworks --write` "
                    "runs every example (those that need another framework in a uv overlay beside the course's "
                    "environment, with the course's torch kept) and records their output in "
                    "docs/other_frameworks.json, from which this page shows it. `./course test` runs the ONNX "
                    "Runtime and libtorch examples again every time; the weekly run (`HOOKLAB_PROFILES=all`) runs "
                    "them all.")},
    "zh": {"title": "其他框架里的钩子",
           "intro": ("PyTorch 的前向钩子（查看或替换模块的输入和输出）、反向钩子（查看或替换梯度）和保存张量钩子"
                     "（对 autograd 为反向传播保存的东西做 pack 和 unpack），在其他框架里各对应什么。能在 CPU 上安装的框架，"
                     "下面的示例都实际运行过，给出的是记录下来的输出；装不上的，依据固定版本链接处的源码。"),
           "legend": ("✓ 有 API 能完成这个钩子的工作；≈ 有 API 能完成一部分（只能看、不能改，或者只能选择保留什么、"
                      "不能改写它）；✗ 没有对应物：各节会说明大家实际怎么做。"),
           "table": "一览", "framework": "框架", "runs": "依据",
           "concepts": {"forward": "前向钩子", "backward": "反向钩子", "saved": "保存张量钩子"},
           "levels": {"yes": "✓", "partial": "≈", "no": "✗"}, "none": "没有对应物",
           "version": "版本", "how": "依据", "example": "示例",
           "output": "记录下来的输出：", "not_recorded": "尚未记录：请运行 python -m tools.profiles.frameworks --write",
           "sources": "源码（固定版本）", "missing": "没有对应物的部分",
           "pytorch": "（PyTorch：{link}）", "notebook": "第 {nn} 课", "colon": "：",
           "runs_ran": {"project env": "在课程环境中运行", "overlay": "在课程环境旁叠加安装后运行：{reqs}"},
           "source_only": "只读源码：{why}",
           "maintainers": "维护者参考",
           "kept": ("数据在 tools/profiles/frameworks_data.py；`python -m tools.profiles.frameworks --write` "
                    "运行所有示例（需要其他框架的，用 uv 在课程环境旁叠加安装，课程的 torch 保持不变），把输出记录到 "
                    "docs/other_frameworks.json，本页从那里读取。`./course test` 每次都重新运行 ONNX Runtime 和 "
                    "libtorch 的示例；每周的运行（`HOOKLAB_PROFILES=all`）运行全部示例。")},
}


def anchor(name: str) -> str:
    """The MyST target of a framework's section: ``frameworks-<name>``."""
    return f"frameworks-{name}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _codes(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _how(framework: Framework, lang: str) -> str:
    t = TEXT[lang]
    if framework.runs.startswith("source only:"):
        why = framework.runs_zh.split("：", 1)[-1] if lang == "zh" else framework.runs.split(":", 1)[1].strip()
        return t["source_only"].format(why=why)
    if framework.requirements:
        return t["runs_ran"]["overlay"].format(reqs=_codes(framework.requirements))
    return t["runs_ran"]["project env"]


def _fence(text: str, info: str) -> list[str]:
    ticks = "````" if "```" in text else "```"
    return [f"{ticks}{info}", text.rstrip("\n"), ticks]


def page(root: Path, lang: str, names: list[str]) -> str:
    """The site's page in ``lang`` ("en" or "zh"), from ``root``/docs/other_frameworks.json; ``names``: the notebook
    pages of this build (the page links to the notebooks that teach each PyTorch hook when they are built)."""
    t = TEXT[lang]
    doc = load(root / "docs" / "other_frameworks.json")
    recorded = {f["name"]: f.get("recorded") for f in doc["frameworks"]}
    lines = ["(other-frameworks)=", f"# {t['title']}", "", t["intro"], "", t["legend"], "", f"## {t['table']}", "",
             f"| {t['framework']} | " + " | ".join(t["concepts"][c] for c in CONCEPTS) + f" | {t['runs']} |",
             "|---|" + "---|" * len(CONCEPTS) + "---|"]
    for f in FRAMEWORKS:
        row = []
        for c in CONCEPTS:
            concept = f.concept(c)
            row.append(f"{t['levels'][concept.level]} " + (_codes(concept.api[:2]) if concept.api else t["none"]))
        lines.append(f"| {{ref}}`{f.title} <{anchor(f.name)}>` | " + " | ".join(_cell(x) for x in row)
                     + f" | {_cell(_how(f, lang))} |")
    for f in FRAMEWORKS:
        summary = f.summary_zh if lang == "zh" else f.summary_en
        lines += ["", f"({anchor(f.name)})=", f"## {f.title}", "", summary, "",
                  f"- **{t['version']}**{t['colon']}{f.version}", f"- **{t['how']}**{t['colon']}{_how(f, lang)}", ""]
        for c in CONCEPTS:
            concept = f.concept(c)
            api = _codes(concept.api) if concept.api else t["none"]
            nb = TEACHES[c]
            link = f"[{t['notebook'].format(nn=int(nb[:2]))}]({nb}.ipynb)" if nb in names else ""
            pytorch = t["pytorch"].format(link=link) if link else ""
            lines += [f"**{t['concepts'][c]}**{pytorch}{t['colon']}{t['levels'][concept.level]} {api}", "",
                      concept.zh if lang == "zh" else concept.en, ""]
        if f.runnable:
            lines += [f"**{t['example']}**", "", *_fence(example_in(f.example, lang), "python"), ""]
            got = recorded.get(f.name)
            if got and got.get("output"):
                lines += [t["output"], "", *_fence("\n".join(got["output"]), "text"), ""]
            else:
                lines += [t["not_recorded"], ""]
        lines += [f"**{t['sources']}**", ""] + [f"- [{label}]({url})" for label, url in f.links]
        lines += ["", f"**{t['missing']}**{t['colon']}" + (f.missing_zh if lang == "zh" else f.missing_en)]
    lines += ["", f"## {t['maintainers']}", "", t["kept"], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profiles.frameworks", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="run the examples and write docs/other_frameworks.json")
    mode.add_argument("--check", action="store_true", help="run them again and compare with the record (exit 1)")
    mode.add_argument("--child", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--only", action="append", metavar="NAME", help="only this framework (repeatable)")
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=900, help="seconds one example may take (default 900)")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.out)
        return 0
    previous = load() if RECORD.exists() else None
    doc = build(args.only, previous, timeout=args.timeout)
    if args.write:
        RECORD.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        PROGRAMS.write_text(json.dumps(programs(doc), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {RECORD.relative_to(ROOT)} and {PROGRAMS.relative_to(ROOT)}", file=sys.stderr)
        return 0
    found = differences(previous or {}, doc, args.only)
    for line in found:
        print(line)
    print(f"{len(found)} differences from {RECORD.relative_to(ROOT)}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
