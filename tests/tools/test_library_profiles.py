"""The library profiles (tools/profiles/, hooklab/course/assets/profiles/library_profiles.json): the committed file
is what the profile modules say, every surprise rests on a measured fact, a sample of the profiles measured again
matches the file (all of them, those installed beside the environment included, with ``HOOKLAB_PROFILES=all``: the
weekly run), the probe agrees with a plain-PyTorch truth built by hand, and the pages and the lookup carry them."""
from __future__ import annotations

import copy
import json
import os
import re
from collections import Counter
from datetime import date

import pytest
import torch
from torch import nn

from hooklab import course
from tools.profiles import generate, page, probe, rows
from tools.profiles.libraries import modules

pytestmark = pytest.mark.timeout(120)
SAMPLE = 3  # project-environment profiles measured again per run, rotating with the ISO week
PINNED = re.compile(r"/(blob|tree|raw)/(v?\d[\w.+-]*|[\w.-]*\d+\.\d+[\w.+-]*|[0-9a-f]{7,40})/|pypi\.org/project/[\w.-]+/\d")


def committed() -> dict:
    return generate.load()


def test_at_least_forty_profiles_each_measured_or_read_from_pinned_sources():
    doc, found = committed(), modules()
    assert list(doc["libraries"]) == list(found), "python -m tools.profiles --write (a profile module was added or removed)"
    assert len(found) >= 40
    for slug, record in doc["libraries"].items():
        for link in record["sources"]:
            assert PINNED.search(link), f"{slug}: {link} is not pinned to a release or commit"
        if record["status"] == "source":
            assert record["sources"] and record["why_source"]["en"] and record["why_source"]["zh"], slug
            assert record["measured"] is None, slug
        else:
            measured = record["measured"]
            assert measured and measured["version"] and measured["torch"] == doc["torch"], slug
            assert "probe" in measured or "facts" in measured, slug


def test_the_file_says_what_the_profile_modules_say():
    doc = committed()
    for slug, module in modules().items():
        record = dict(doc["libraries"][slug])
        record.pop("measured")
        assert record == json.loads(json.dumps(module.LIBRARY.to_json())), \
            f"{slug}: its module changed since the file was written: python -m tools.profiles --only {slug} --write"


def _fact(measured: dict, path: str):
    value = measured
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(path)
        value = value[part]
    return value


def test_every_surprise_rests_on_a_measured_fact_or_on_the_source():
    for slug, record in committed()["libraries"].items():
        for surprise in record["surprises"]:
            if record["status"] == "source":
                assert surprise["fact"].startswith("source"), (slug, surprise["fact"])
                continue
            try:
                value = _fact(record["measured"], surprise["fact"])
            except KeyError:
                pytest.fail(f"{slug}: the surprise rests on {surprise['fact']!r}, which the measurement lacks")
            assert value not in (None, [], {}, ""), (slug, surprise["fact"])


def sample(today: date | None = None) -> list[str]:
    """The profiles measured again in this run: every measured one with HOOKLAB_PROFILES=all, else SAMPLE of those in
    the project's environment, the same all week."""
    measured = [s for s, m in modules().items() if m.LIBRARY.status == "measured"]
    if os.environ.get("HOOKLAB_PROFILES") == "all":
        return measured
    local = [s for s in measured if modules()[s].LIBRARY.requirement is None]
    week = ((today or date.today()).toordinal() - 1) // 7  # weeks counted from a Monday: consecutive across years
    start = week * SAMPLE % len(local)
    return sorted({local[(start + k) % len(local)] for k in range(min(SAMPLE, len(local)))})


def test_the_sample_rotates_and_covers_every_project_profile_within_weeks():
    seen = set()
    for week in range(1, 40):
        seen |= set(sample(date.fromisocalendar(2026, week, 1)))
    local = {s for s, m in modules().items() if m.LIBRARY.status == "measured" and m.LIBRARY.requirement is None}
    assert seen == local or os.environ.get("HOOKLAB_PROFILES") == "all"


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("slug", sample())
def test_a_profile_measured_again_matches_the_committed_one(slug):
    module = modules()[slug]
    again = generate.run_one(slug, module.LIBRARY.requirement, timeout=1100)
    was = committed()["libraries"][slug]["measured"]
    changed = generate.differences({"libraries": {slug: {"measured": was}}}, {"libraries": {slug: {"measured": again}}},
                                   [slug])
    assert not changed, "measured otherwise than committed:\n" + "\n".join(changed)


# ------------------------------------------------------------------------------------------------ the probe's truth
class _Library:
    """A library written here, whose hooks are known by construction: a prepended forward pre-hook, a forward hook,
    a hook on the weight's gradient and a forward replaced on the instance; ``remove`` takes them all off."""

    TARGET = "0"
    handles: list = []

    @staticmethod
    def build():
        return nn.Sequential(nn.Linear(3, 2))

    @staticmethod
    def inputs():
        return (torch.ones(2, 3),)

    @classmethod
    def apply(cls, model):
        layer = model[0]
        cls.handles = [layer.register_forward_pre_hook(lambda m, a: None, prepend=True),
                       layer.register_forward_hook(lambda m, a, o: None),
                       layer.weight.register_hook(lambda g: g)]
        original = layer.forward
        layer.forward = lambda *a: original(*a)
        return model

    @classmethod
    def remove(cls, model):
        for handle in cls.handles:
            handle.remove()
        del model[0].forward


def test_the_probe_reports_what_a_library_built_by_hand_put_on_the_model():
    result = probe.measure(_Library, probes={"compile"})
    kinds = sorted(r["kind"] for r in result["installs"])
    assert kinds == ["forward", "forward replaced", "forward_pre", "tensor"]
    forward = result["order"]["forward"]
    library = [x for x in forward if not x.startswith("yours")]
    # prepend=True puts the library's pre-hook before the user's earlier one; the replaced forward runs between the
    # pre-hooks and the forward hooks; the library's forward hook was registered between the user's two
    assert forward.index(library[0]) < forward.index("yours, before: forward_pre")
    assert forward.index("yours, after: forward_pre") < forward.index(library[1]) < forward.index("yours, before: forward")
    assert forward.index("yours, before: forward") < forward.index(library[2]) < forward.index("yours, after: forward")
    assert any("tensor" in x for x in result["order"]["backward"])
    # the truth in plain PyTorch: a deepcopy keeps the module's hook dicts and the forward set on the instance, and
    # drops the parameter's hooks (Parameter.__deepcopy__ builds a new Parameter from the data)
    twin = copy.deepcopy(_Library.apply(_Library.build()))[0]
    kept = (len(twin._forward_pre_hooks) + len(twin._forward_hooks) + len(twin.weight._backward_hooks or {})
            + ("forward" in vars(twin)))
    assert result["survives"]["deepcopy"] == f"{kept} of 4 kept" and kept == 3
    assert result["survives"]["state_dict_keys"] == "same"
    assert result["survives"]["checkpoint"] != "same"  # the forward hooks run again when backward recomputes
    assert result["removed"] == "nothing left"
    assert "forward-hook@compile" in result["inherits"] and "param-hook@eager" in result["inherits"]


def test_the_probe_finds_nothing_on_a_library_that_does_nothing_and_puts_every_hook_back():
    class Nothing(_Library):
        apply = staticmethod(lambda model: model)
    model = Nothing.build()
    before = {k: dict(v) for k, v in vars(model[0]).items() if k.endswith("hooks") and isinstance(v, dict)}
    result = probe.measure(Nothing, probes={"compile", "remove"})
    assert result["installs"] == [] and result["forward_replaced"] == []
    assert result["order"]["forward"] == ["yours, before: forward_pre", "yours, after: forward_pre",
                                          "yours, before: forward", "yours, after: forward"]
    log: list[str] = []
    with pytest.raises(ZeroDivisionError), probe.logging_hooks(model, log, where="0"):
        model[0].register_forward_hook(lambda m, a, o: None)
        1 / 0
    assert all(not probe.hook_name(fn).startswith("_logging") for fn in model[0]._forward_hooks.values())
    assert {k: dict(v) for k, v in vars(model[0]).items() if k.endswith("hooks") and isinstance(v, dict)
            and k != "_forward_hooks"} == {k: v for k, v in before.items() if k != "_forward_hooks"}


def test_the_probe_refuses_an_unknown_part():
    with pytest.raises(ValueError, match="unknown probe parts"):
        probe.measure(_Library, probes={"compiled"})


# ------------------------------------------------------------------------------------------------ command, pages, lookup
def test_the_command_refuses_a_release_it_cannot_read(capsys):
    with pytest.raises(SystemExit, match="is not LIB==X"):
        generate.main(["--with", "accelerate>=1"])
    with pytest.raises(SystemExit, match="no measured profile"):
        generate.main(["--with", "no-such-library==1.0"])


class Measuring(Exception):
    """Raised in place of a measurement: the command's arguments passed its check."""


@pytest.fixture
def nothing_measured(monkeypatch):
    def build(slugs=None, **kwargs):
        raise Measuring(slugs, kwargs.get("requirement_for"))
    monkeypatch.setattr(generate, "build", build)


@pytest.mark.usefixtures("nothing_measured")
def test_an_empty_release_is_a_usage_error_before_anything_is_measured():
    """Review round 6: `--with ''` passed the check, and the command ended on "uv is needed to measure a library
    that is not in the lock"."""
    for bad in ("", "==", "accelerate==", "==1.0", "accel erate==1.0", "accelerate==1.0 extra"):
        with pytest.raises(SystemExit, match="is not LIB==X"):
            generate.main(["--with", bad])


@pytest.mark.usefixtures("nothing_measured")
def test_only_takes_a_library_in_any_case_as_course_profile_does(capsys):
    """Review round 6: `--only ACCELERATE` was refused, while course.profile("ACCELERATE") gives the profile."""
    from hooklab import course

    assert course.profile("ACCELERATE")
    for given in (["ACCELERATE"], ["Accelerate", "accelerate"], ["torch-geometric"], ["Torch_Geometric"]):
        with pytest.raises(Measuring) as measuring:
            generate.main(["--only", *given])
        slug = "accelerate" if "accelerate" in given[0].lower() else "torch_geometric"
        assert measuring.value.args[0] == [slug]
    for bad in (["nosuch"], [""], ["  "]):
        with pytest.raises(SystemExit) as usage:
            generate.main(["--only", *bad])
        assert usage.value.code == 2
        err = capsys.readouterr().err
        assert "--only: no profile for" in err and "accelerate" in err and "usage:" in err


def test_differences_name_each_changed_field_and_ignore_the_version():
    old = {"libraries": {"x": {"measured": {"version": "1", "probe": {"survives": {"deepcopy": "1 of 1 kept"}}}}}}
    new = {"libraries": {"x": {"measured": {"version": "2", "probe": {"survives": {"deepcopy": "0 of 1 kept"}}}}}}
    assert generate.differences(old, new, ["x"]) == ['x: probe.survives.deepcopy: "1 of 1 kept" -> "0 of 1 kept"']
    assert generate.differences(old, old, ["x"]) == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_profile_has_a_page_in_both_languages_with_its_api_names(lang):
    doc = committed()
    pages = page.pages()
    assert set(pages) == {"profiles", *(f"profiles-{s}" for s in doc["libraries"])}
    listing = pages["profiles"](None, lang, [])
    for slug, record in doc["libraries"].items():
        assert f"(profiles-{slug}.md)" in listing
        text = pages[f"profiles-{slug}"](None, lang, [])
        assert text.startswith(f"(profiles-{slug})=\n# ")
        assert all(f"`{name}`" in text for name in record["names"]), slug
        prose = re.sub(r"`[^`]*`|\|[^\n]*\||<[^>]+>", "", text)
        chinese = len(re.findall(r"[\u4e00-\u9fff]", prose))
        assert (chinese > 20) == (lang == "zh"), (slug, lang, chinese)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_profile_page_has_a_table_of_each_observed_operation_with_its_unusual_cells_and_their_fixes(lang):
    """The library matrix's rows on the library's page: every operation observed has a heading; every unusual
    cell of it is a row (its family, when, how and the proven fix), and no usual cell is."""
    matrix = json.loads(page.LIBRARY_MATRIX.read_text(encoding="utf-8"))
    text = page.pages()["profiles-torch_ao_quantization"](None, lang, [])
    section = text.split(f"## {page.TEXT[lang]['operations']}")[1].split("\n## ")[0]
    operations = {key.split("|")[0].split(":", 1)[1] for key in matrix["cells"]
                  if key.startswith("torch_ao_quantization:")}
    assert operations and all(f"### `{name}`" in section for name in operations)
    rows = section.split("### `fuse_modules`")[1].split("### ")[0]
    for key in (k for k in matrix["cells"] if k.startswith("torch_ao_quantization:fuse_modules|")):
        _, family, when = key.split("|")
        row = f"| `{family}` | {page.TEXT[lang][when]} |"
        assert (row in rows) == (key in matrix["unusual"]["cells"]), key
    fixed = "在操作之后注册钩子" if lang == "zh" else "register the hook after the operation"
    assert f"| {page.TEXT[lang]['before']} | " in rows and fixed in rows
    assert page.operations_section("no_such_library", lang, matrix) == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_profile_page_opens_with_the_summary_of_its_operations_rows(lang):
    """What a reader sees first (issue 79, item 5): before the page's other sections, each operation that changes a
    hook, the worst first, with the counts its rows give (counted here from the matrix again), then the operations
    that change nothing."""
    matrix = json.loads(page.LIBRARY_MATRIX.read_text(encoding="utf-8"))
    text = page.pages()["profiles-peft"](None, lang, [])
    heading = f"## {page.TEXT[lang]['in_short']}"
    assert text.split("\n## ")[1].startswith(page.TEXT[lang]["in_short"])  # the page's first section
    section = text.split(heading)[1].split("\n## ")[0]
    odd = matrix["unusual"]
    unusual = Counter(key.split("|")[0] for key in odd["cells"] if key.startswith("peft:"))
    observed = {key.split("|")[0] for key in matrix["cells"] if key.startswith("peft:")}
    rows = [line for line in section.splitlines() if line.startswith("- `")]
    assert [re.match(r"- `([^`]+)`", row).group(1) for row in rows][:1] == \
        [unusual.most_common(1)[0][0].split(":", 1)[1]]  # the worst first
    assert len(rows) == len(unusual)
    for row in rows:
        operation = "peft:" + re.match(r"- `([^`]+)`", row).group(1)
        before = sum(1 for k in odd["cells"] if k.startswith(operation + "|") and k.endswith("|before"))
        fixed = sum(1 for k in odd["fixes"] if k.startswith(operation + "|"))
        numbers = [int(n) for n in re.findall(r"\d+", row.split("`")[2])]
        assert numbers[:2] in ([before, 15], [15, before]) and fixed in numbers, (row, before, fixed)
    for operation in observed - set(unusual):
        assert f"`{operation.split(':', 1)[1]}`" in section.split("\n\n")[-1]
    assert page.in_short("no_such_library", lang, matrix) == []


def test_the_shipped_rows_are_made_from_the_library_matrix():
    """hooklab/course/assets/profiles/library_rows.json, which course.profile prints first, is what the committed
    matrix gives now (python -m tools.profiles.rows --write after a change of docs/library_matrix.json)."""
    matrix = json.loads(page.LIBRARY_MATRIX.read_text(encoding="utf-8"))
    assert rows.ROWS.read_text(encoding="utf-8") == rows.text(matrix), "python -m tools.profiles.rows --write"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_printed_profile_opens_with_the_summary_of_its_rows(lang):
    """course.profile(...) printed (issue 79, item 5): after the library's title and summary, its operations that
    change a hook, the worst first, with the families counted here from the matrix's cells again; the rest are named
    by how to reach them, and the operations that change nothing are listed."""
    matrix = json.loads(page.LIBRARY_MATRIX.read_text(encoding="utf-8"))
    odd = matrix["unusual"]
    for slug in ("peft", "accelerate", "captum"):
        record = course.profile(slug, lang=lang)
        lines = str(record).splitlines()
        assert lines[1] == record["words"][lang]["summary"]
        unusual = Counter(key.split("|")[0] for key in odd["cells"] if key.startswith(f"{slug}:"))
        observed = {key.split("|")[0] for key in matrix["cells"] if key.startswith(f"{slug}:")}
        counts = [int(n) for n in re.findall(r"\d+", lines[2])][:2]
        assert counts == ([len(observed), len(unusual)] if lang == "zh" else [len(unusual), len(observed)]), lines[2]
        shown = [line for line in lines[3:3 + len(unusual)] if line.startswith("  ") and not line.startswith("  …")]
        assert len(shown) == min(len(unusual), 5)
        worst = max(unusual.values())
        assert unusual[f"{slug}:" + re.split("[:：]", shown[0].strip(), maxsplit=1)[0]] == worst
        for line in shown:
            operation = f"{slug}:" + re.split("[:：]", line.strip(), maxsplit=1)[0]
            before = sum(1 for k in odd["cells"] if k.startswith(operation + "|") and k.endswith("|before"))
            after = sum(1 for k in odd["cells"] if k.startswith(operation + "|") and k.endswith("|after"))
            fixed = sum(1 for k in odd["fixes"] if k.startswith(operation + "|"))
            assert [int(n) for n in re.findall(r"\d+", line.split("：" if lang == "zh" else ": ", 1)[1])][:3] == \
                [before, after, fixed], (line, before, after, fixed)
        assert (f'course.profile({slug!r})["library_matrix"]' in str(record)) == (len(unusual) > 5)
        same = sorted(op.split(":", 1)[1] for op in observed - set(unusual))
        assert not same or any(line.endswith(", ".join(same)) for line in lines), same
    unobserved = next(s for s in course.profiles() if not any(k.startswith(f"{s}:") for k in matrix["cells"]))
    assert "library_matrix" not in course.profile(unobserved)  # no row: the profile as it was
    assert not re.search(r"\d+ of \d+ observed|观察过的 \d+ 个", str(course.profile(unobserved, lang=lang)))


def test_the_lookup_finds_a_library_by_its_name_and_reads_its_profile():
    found = course.ask("what does accelerate do to my hooks", lang="en")
    assert any(hit.kind == "profile" and hit.page == "profiles-accelerate.html" for hit in found[:5])
    record = course.profile("Accelerate")
    assert record["slug"] == "accelerate" and "accelerate" in str(record)
    with pytest.raises(LookupError, match="did you mean 'accelerate'"):
        course.profile("acelerate")


def test_the_probe_sees_a_module_swapped_and_a_users_hook_taken_off():
    class Swapper(_Library):
        """Clears the hooked Linear's hooks (as pyvene does) and replaces it by a new module (as quanto does): the
        truth, by construction, is one swap and the user's four hooks taken off."""

        @staticmethod
        def apply(model):
            for hooks in (model[0]._forward_pre_hooks, model[0]._forward_hooks, model[0]._backward_pre_hooks,
                          model[0]._backward_hooks):
                hooks.clear()
            model[0] = nn.Sequential(nn.Linear(3, 2))
            return model

        TARGET = "0"
    result = probe.measure(Swapper, probes={"compile", "remove", "deepcopy"})
    assert result["modules_replaced"] == ["0: torch Linear -> torch Sequential"]
    assert set(result["your_hooks"].values()) == {"taken off"}
    plain = probe.measure(_Library, probes={"compile", "remove"})
    assert plain["modules_replaced"] == [] and set(plain["your_hooks"].values()) == {"kept"}


def test_the_probe_follows_a_users_hook_onto_the_module_that_now_holds_it():
    class Wrapping(_Library):
        """Puts a new module where the hooked one was and keeps the old one inside it (as PEFT's LoRA layers keep
        base_layer): the user's hooks are on the old object, now at ``0.0``."""

        @staticmethod
        def apply(model):
            model[0] = nn.Sequential(model[0])
            return model
    result = probe.measure(Wrapping, probes={"compile", "remove", "deepcopy"})
    assert result["your_hooks"] == dict.fromkeys(("forward_pre", "forward", "backward_pre", "backward"), "moved to 0.0")
    assert result["modules_replaced"] == ["0: torch Linear -> torch Sequential"]
