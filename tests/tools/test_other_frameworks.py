"""The equivalents of a hook in other frameworks (docs/other_frameworks.json, tools/profiles/frameworks.py) stay true.

- Every run: the record is what the data describes (every framework, every runnable example recorded from its
  current code); the ONNX Runtime example (and the libtorch one, where a C++ compiler and ninja are on PATH) runs
  again in a fresh process and prints what was recorded; the page renders in both languages with every framework's
  anchor and API names, the Chinese page in Chinese.
- Every example: set ``HOOKLAB_PROFILES=all`` (the weekly run does) and the examples that need another framework
  (JAX / Flax, MLX, TensorFlow) run again beside the project's environment, installed by uv at their pins.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from patience import hang_guard
from tools.profiles import frameworks
from tools.profiles.frameworks_data import CONCEPTS, FRAMEWORKS, LEVELS, example_in

ROOT = Path(__file__).resolve().parents[2]
CJK = re.compile(r"[\u4e00-\u9fff]")
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PROJECT_ENV = [f for f in FRAMEWORKS if f.runnable and not f.requirements]
OVERLAY = [f for f in FRAMEWORKS if f.runnable and f.requirements]


@pytest.fixture(scope="module")
def doc():
    return json.loads(frameworks.RECORD.read_text(encoding="utf-8"))


def test_the_record_is_what_the_data_describes(doc):
    recorded = {f["name"]: f for f in doc["frameworks"]}
    assert list(recorded) == [f.name for f in FRAMEWORKS], "python -m tools.profiles.frameworks --write"
    for framework in FRAMEWORKS:
        entry = recorded[framework.name]
        assert {k: v for k, v in entry.items() if k != "recorded"} == framework.to_json(), \
            f"{framework.name}: the data changed since the record was written (python -m tools.profiles.frameworks --write)"
        if not framework.runnable:
            assert entry["recorded"] is None
            continue
        got = entry["recorded"]
        assert got and got["output"], f"{framework.name}: its example has no recorded output"
        assert got["example_sha256"] == frameworks.example_hash(framework), \
            f"{framework.name}: the example changed since its output was recorded " \
            f"(python -m tools.profiles.frameworks --write --only {framework.name})"


def test_each_runnable_example_is_a_program_of_the_lookup(doc):
    """docs/programs/frameworks.json is the record's examples as programs (what the lookup's hit.run() runs and the
    program tests compare), each with what the runner showed in its environment, and the lookup carries them."""
    from hooklab.course import asking

    written = json.loads(frameworks.PROGRAMS.read_text(encoding="utf-8"))
    assert written == frameworks.programs(doc), "python -m tools.profiles.frameworks --write"
    runnable = [f for f in FRAMEWORKS if f.runnable]
    assert sorted(written["programs"]) == sorted(f"frameworks-{f.name}" for f in runnable)
    for f in runnable:
        program = written["programs"][f"frameworks-{f.name}"]
        assert program["show"]["prints"], f"{f.name}: no output recorded as the runner shows it"
        assert program["needs"], f"{f.name}: say what it needs besides the course"
    hit = next(h for h in asking.ask("JAX flax equivalent of a forward hook", k=5, kinds="profile")
               if h.page and "other_frameworks" in h.page)
    assert "intercept_methods" in hit.program_text("en")
    assert hit.program_text("zh").startswith("# JAX / Flax 里与钩子相当的东西")


def test_a_framework_program_whose_library_is_missing_says_what_to_install(monkeypatch, capsys):
    """Run where flax is not installed (a finder first on ``sys.meta_path`` fails its import as a missing one does,
    whether or not this machine has it), the JAX / Flax answer's program shows the error, then the pinned
    requirements it ran with; an example that runs in the course's environment names its packages at the versions
    recorded."""
    from hooklab.course import asking

    class Absent:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "flax":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    for name in [n for n in sys.modules if n.split(".")[0] == "flax"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Absent(), *sys.meta_path])
    hit = next(h for h in asking.ask("JAX flax equivalent of a forward hook", k=5, kinds="profile")
               if h.page and "other_frameworks" in h.page)
    jax = next(f for f in FRAMEWORKS if f.name == "jax")
    assert hit.run().splitlines() == ["ModuleNotFoundError: No module named 'flax'",
                                      "To run it, install what it needs (the releases it ran with): pip install "
                                      + shlex.join(jax.requirements)]
    assert "pip install 'jax[cpu]==" in capsys.readouterr().out
    written = json.loads(frameworks.PROGRAMS.read_text(encoding="utf-8"))["programs"]
    onnx = next(f for f in doc_frameworks() if f["name"] == "onnxruntime")
    assert written["frameworks-onnxruntime"]["requires"] == [f"{p}=={onnx['recorded']['versions'][p]}"
                                                             for p in ("onnxruntime", "onnx")]
    assert written["frameworks-libtorch"]["requires"] == []  # a C++ build: its needs say so


def doc_frameworks():
    return json.loads(frameworks.RECORD.read_text(encoding="utf-8"))["frameworks"]


def test_each_example_speaks_the_pages_language_in_its_comments_and_nothing_else_differs():
    """The Chinese page and program show each example with Chinese comments (Python's # and the C++'s //) and the
    same code; a comment added in English only is caught here."""
    from tools.profiles.frameworks_data import _COMMENT

    def code(text):
        return _COMMENT.sub(lambda m: m.group("mark"), text)
    for f in [f for f in FRAMEWORKS if f.runnable]:
        zh = example_in(f.example, "zh")
        assert code(zh) == code(f.example), f.name
        comments = [m.group("text") for m in _COMMENT.finditer(zh)]
        assert comments and all(re.search(r"[\u4e00-\u9fff]", c) for c in comments), (f.name, comments)
        assert example_in(f.example, "en") == f.example
    page = frameworks.page(frameworks.ROOT, "zh", [])
    assert "包住每一次模块方法调用的拦截器" in page and "an interceptor around every module method call" not in page
    with pytest.raises(KeyError, match="no Chinese"):
        example_in("x = 1  # a comment nobody translated\n", "zh")


def test_every_framework_is_described_completely_and_pinned():
    for f in FRAMEWORKS:
        assert re.fullmatch(r"project env|overlay: \S+==\S+( \S+==\S+)*|source only: .+", f.runs), f.runs
        assert f.runnable != f.runs.startswith("source only:"), f"{f.name}: an example exactly when it runs"
        for c in CONCEPTS:
            concept = f.concept(c)
            assert concept.level in LEVELS and concept.en and CJK.search(concept.zh), (f.name, c)
            assert bool(concept.api) == (concept.level != "no"), f"{f.name} {c}: an API exactly when one exists"
        assert f.links and all(re.match(r"https://github\.com/[^/]+/[^/]+/blob/([0-9a-f]{40}|[^/]*\d[^/]*)/\S+$", url)
                               for _, url in f.links), f"{f.name}: every link pinned to a tag or a commit"


def test_the_runner_catches_a_changed_output(doc):
    """``differences`` is what ``--check`` reports: one changed output line of one framework is named, and nothing
    else is."""
    changed = json.loads(json.dumps(doc))
    target = next(f for f in changed["frameworks"] if f["name"] == "onnxruntime")
    target["recorded"]["output"][-1] += " (changed)"
    found = frameworks.differences(doc, changed)
    assert len(found) == 1 and found[0].startswith("onnxruntime.output:")
    assert frameworks.differences(doc, doc) == []


def _check_again(framework, doc, seconds: float) -> None:
    missing = frameworks.toolchain_missing(framework)
    if missing:
        pytest.skip(f"{framework.name}: {missing}")
    fresh = frameworks.record(framework, timeout=hang_guard(seconds))
    recorded = next(f["recorded"] for f in doc["frameworks"] if f["name"] == framework.name)
    assert fresh == recorded, f"{framework.name} prints something else now:\n" + "\n".join(
        frameworks.differences({"frameworks": [{"name": framework.name, "recorded": recorded}]},
                               {"frameworks": [{"name": framework.name, "recorded": fresh}]}))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("framework", PROJECT_ENV, ids=lambda f: f.name)
def test_the_project_env_examples_print_what_was_recorded(framework, doc):
    _check_again(framework, doc, 240)


@pytest.mark.timeout(2400)
@pytest.mark.skipif(os.environ.get("HOOKLAB_PROFILES") != "all",
                    reason="the JAX, MLX and TensorFlow examples install those frameworks beside the environment "
                           "(minutes, a network): HOOKLAB_PROFILES=all runs them (the weekly run)")
@pytest.mark.parametrize("framework", OVERLAY, ids=lambda f: f.name)
def test_the_overlay_examples_print_what_was_recorded(framework, doc):
    _check_again(framework, doc, 600)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_shows_every_framework_in_each_language(lang):
    text = frameworks.page(ROOT, lang, NOTEBOOKS)
    assert text.startswith("(other-frameworks)=\n# ")
    for f in FRAMEWORKS:
        assert f"({frameworks.anchor(f.name)})=\n## {f.title}\n" in text, f.name
        assert f"<{frameworks.anchor(f.name)}>`" in text, f"{f.name}: the table links to its section"
        for c in CONCEPTS:
            for name in f.concept(c).api:
                assert f"`{name}`" in text, (f.name, c, name)
            assert (f.concept(c).zh if lang == "zh" else f.concept(c).en) in text
        for label, url in f.links:
            assert f"[{label}]({url})" in text
        if f.runnable:
            assert example_in(f.example, lang).strip() in text, f"{f.name}: its example, commented in {lang}"
    for nb in frameworks.TEACHES.values():
        assert f"({nb}.ipynb)" in text, "links to the notebook that teaches each PyTorch hook"
    assert "ipynb" not in frameworks.page(ROOT, lang, []), "no link to a notebook this build does not have"


@pytest.mark.timeout(60)
def test_the_page_shows_the_recorded_output(doc):
    text = frameworks.page(ROOT, "en", [])
    for f in doc["frameworks"]:
        for line in (f["recorded"] or {}).get("output", []):
            assert line in text, (f["name"], line)


@pytest.mark.timeout(60)
def test_the_chinese_page_is_written_in_chinese_and_the_english_one_in_english():
    zh, en = frameworks.page(ROOT, "zh", NOTEBOOKS), frameworks.page(ROOT, "en", NOTEBOOKS)

    def prose(text: str) -> list[str]:
        """The page's lines outside code blocks, tables and link lists."""
        out, fenced = [], False
        for line in text.splitlines():
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and line and not line.startswith(("|", "- [", "(")):
                out.append(line)
        return out

    zh_prose = [line for line in prose(zh) if not line.startswith("#")]
    assert all(CJK.search(line) for line in zh_prose), [line for line in zh_prose if not CJK.search(line)]
    assert not any(CJK.search(line) for line in prose(en)), [line for line in prose(en) if CJK.search(line)]
    for f in FRAMEWORKS:
        for english in (f.summary_en, f.missing_en, *(f.concept(c).en for c in CONCEPTS)):
            assert english not in zh, f"{f.name}: English prose copied into the Chinese page"
