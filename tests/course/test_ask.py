"""course.ask: a pasted message finds the row that explains it, a learner's words in either language find the place
that shows the symptom, and bad input is refused."""
from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from hooklab.course import asking as ask_module, website
from hooklab.course.asking import ask, message_key, tokens

KINDS = tomllib.loads((Path(__file__).parents[2] / "docs" / "silent_symptoms.toml").read_text(encoding="utf-8"))

pytestmark = pytest.mark.course


def _entries():
    return ask_module._index()[0]


def _learner_copy(message: str) -> str:
    """The message as a learner's run prints it: the placeholders filled with the learner's own names."""
    return "RuntimeError: " + re.sub(r"\{[^{}]*\}", "decoder_block_7", message)


def test_every_indexed_message_pasted_as_a_run_prints_it_finds_a_cell_that_explains_it_in_the_first_three():
    rows = [e for e in _entries() if e["message"] and e["kind"] in ("message", "symptom")]
    assert len(rows) > 200
    places: dict[str, set[tuple[str, str]]] = {}  # one message can be shown by several cells: any of them is right
    for row in rows:
        places.setdefault(message_key(row["message"]), set()).add((row["notebook"], row["cell"]))
    missed = []
    for row in rows:
        hits = ask(_learner_copy(row["message"]), k=3, lang="en")
        if not any((h.notebook, h.cell) in places[message_key(row["message"])] for h in hits):
            missed.append(row["id"])
    assert missed == []


def _section_of(notebook: str, cell: str) -> str | None:
    """The heading cell of the numbered section that holds ``cell`` (course.ask links a section to its heading)."""
    from hooklab.course.notebook import read_notebook

    heading = None
    for c in read_notebook(Path(__file__).parents[2] / "notebooks" / notebook)["cells"]:
        text = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] == "markdown" and "lang-zh" in c["metadata"].get("tags", []) and re.match(r"## \d+\.", text):
            heading = c.get("id")
        if c.get("id") == cell:
            return heading
    return None


# A learner's words (as typed, not the course's wording) -> the symptom whose cell answers them: that cell, the section
# that holds it, the symptom page's list of that kind of symptom (which links to it), or a recipe whose metadata links
# one of those places (a running cell of the learner's case that leads to the lesson), in the first three answers.
LEARNER_WORDS = [
    # notebook 03's section 6 shows the same with a running cell (lin.forward(x) vs lin(x))
    ("my forward hook is never called when I call model.forward(x)", "hook-never-fires-forward-called-directly",
     "section:03.6"),
    ("我直接调用 model.forward(x)，前向钩子没有被调用", "hook-never-fires-forward-called-directly", "section:03.6"),
    ("hook added after torch.compile is ignored", "hook-registered-after-torch-compile-ignored"),
    ("torch.compile 之后注册的钩子不触发", "hook-registered-after-torch-compile-ignored"),
    ("the same hook runs twice because I re-ran the cell", "hooks-stack-when-cell-reruns"),
    ("重新运行单元格后钩子触发了两次", "hooks-stack-when-cell-reruns"),
    ("backward hook on LSTM never fires", "full-backward-hook-on-lstm-never-fires"),
    ("LSTM 上的反向钩子从不触发", "full-backward-hook-on-lstm-never-fires"),
    ("deepcopy of my model copies the hooks too", "deepcopy-copies-hooks"),
    ("深拷贝模型之后钩子也被复制了", "deepcopy-copies-hooks"),
]


@pytest.mark.parametrize(("words", "symptom", "also"), [(*case, None)[:3] for case in LEARNER_WORDS])
def test_a_learners_own_words_find_the_cell_that_shows_the_symptom(words, symptom, also):
    row = next((e for e in _entries() if e["id"] == f"symptom:{symptom}"), None)
    assert row is not None, f"no symptom {symptom!r} in the index: the table above is stale"
    lists = {f"symptoms.html#kind-{kind['id']}" for kind in KINDS["kind"] if symptom in kind["rows"]}
    places = {(row["notebook"], row["cell"]), (row["notebook"], _section_of(row["notebook"], row["cell"]))}
    places |= {(e["notebook"], e["cell"]) for e in _entries() if e["id"] == also}
    hits = ask(words, k=3, lang="both")
    leads = {recipe for recipe, linked in _recipe_links().items() if linked & places}
    assert any((h.notebook, h.cell) in places | leads or h.page in lists for h in hits), repr(hits)


@functools.cache
def _recipe_links() -> dict[tuple[str, str], set[tuple[str | None, str | None]]]:
    """Each recipe's place -> the course places its metadata links (tools.recipes.own_words.right_places)."""
    from tools.recipes import own_words

    recipes, links = own_words.answered_ids(), own_words.right_places()
    return {recipes[rid]["place"]: linked - {recipes[rid]["place"]} for rid, linked in links.items()}


def test_chinese_and_english_phrasings_of_one_symptom_meet_on_one_term():
    assert "~never-fires" in tokens("钩子没有被调用") and "~never-fires" in tokens("the hook is not called")
    assert "~grad-none" in tokens("梯度为空") and "~grad-none" in tokens("grad is None")
    assert "~mixed-precision" not in tokens("an example")  # a phrase counts only as whole words


def test_a_word_and_a_phrase_are_one_term_in_every_form():
    assert len(set(tokens("fire fires firing fired"))) == 1  # the light stemmer: "fir"
    assert tokens("forward hooks") == tokens("forward hook")  # a plural phrase is its group too
    assert "~save-memory" in tokens("显存不够") and "~save-memory" in tokens("cuda out of memory")
    assert "~memory-leak" not in tokens("显存不够")  # running short of memory is not a leak


def test_a_learners_phrase_counts_double_and_a_title_that_says_the_question_weighs_more():
    """The phrase of SYNONYMS names the symptom: "my forward hook is never called" lands on the kind of symptom "The
    hook never fires" (its title says most of the question) before a long FSDP2 row that also never runs hooks."""
    assert ask_module.query_terms("hook not called")["~never-fires"] == ask_module.GROUP_WEIGHT == 2
    entries, _, idf, _, titles = ask_module._index()
    kind = next(i for i, e in enumerate(entries) if e["id"] == "symptom-kind:never-fires")
    asked = ask_module.query_terms("my forward hook is never called")
    assert ask_module.title_share(asked, titles[kind], idf) > 0.5
    assert ask_module.title_share(ask_module.query_terms("gradient accumulation"), titles[kind], idf) == 0
    first = ask("my forward hook is never called", k=1, kinds=ask_module.LEARNER_KINDS, lang="en")[0]
    assert first.page == "symptoms.html#kind-never-fires", first


def test_a_message_key_drops_what_differs_between_runs():
    assert message_key("size [2, 3] of 'fc1'") == message_key("size [8, 16] of 'layer4.conv'")


@pytest.mark.parametrize("bad", ["", "   "])
def test_an_empty_question_is_refused(bad):
    with pytest.raises(ValueError, match="course.ask needs"):
        ask(bad)


@pytest.mark.parametrize("bad", [None, 42, ["hook"]])
def test_a_question_that_is_not_text_is_refused(bad):
    with pytest.raises(TypeError, match="as a str, got"):
        ask(bad)


def test_bytes_are_refused_with_how_to_decode_them():
    with pytest.raises(TypeError, match=r"decode it first"):
        ask(b"hook not called")


def test_a_whole_log_is_refused_with_what_to_paste_instead():
    with pytest.raises(ValueError, match="at most 20,000 characters.*last lines of the traceback"):
        ask("hook " * 5000)
    assert ask("hook " * 3999, k=1, lang="en")  # just under the cap: answered


@pytest.mark.parametrize(("k", "error"), [(0, ValueError), (-1, ValueError), (2.5, TypeError), ("3", TypeError),
                                          (True, TypeError), (None, TypeError)])
def test_k_must_be_a_whole_number_of_at_least_one(k, error):
    with pytest.raises(error, match="whole number of at least 1"):
        ask("hook not called", k=k)


@pytest.mark.parametrize("lang", ["fr", "EN", "", 1])
def test_only_the_courses_languages_are_accepted(lang):
    with pytest.raises(ValueError, match="lang is one of 'zh', 'en', 'both'"):
        ask("hook not called", lang=lang)


def test_unknown_kinds_are_refused_with_the_kinds_that_exist():
    with pytest.raises(ValueError, match="unknown kinds.*message"):
        ask("hook", kinds=("messages",))
    with pytest.raises(TypeError, match="kinds is a tuple"):
        ask("hook", kinds=5)


def test_no_kind_at_all_is_refused_and_one_kind_may_be_a_str():
    with pytest.raises(ValueError, match="choose at least one of message, symptom"):
        ask("hook", kinds=())
    one = ask("hook not called", kinds="message", k=3, lang="en")
    assert one and {hit.kind for hit in one} == {"message"}
    assert list(one) == list(ask("hook not called", kinds=("message",), k=3, lang="en"))


@pytest.mark.parametrize("query", [".*+?[](){}|^$\\ (?P<x>", "((((((((((", "x y z", "?!"])
def test_punctuation_and_lone_letters_are_no_words_and_find_nothing(query):
    answers = ask(query, lang="en")
    assert list(answers) == [] and "Nothing found" in repr(answers)


def _full_width(text: str) -> str:
    """``text`` as a Chinese input method types it in full-width mode: each ASCII character's full-width form, the
    space the ideographic one."""
    return "".join("\u3000" if c == " " else chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


@pytest.mark.parametrize("typed", ["backward hook", "forward hook not called 钩子", "register_full_backward_hook",
                                   "RuntimeError: cannot register a hook on a tensor that doesn't require gradient"])
def test_full_width_latin_finds_what_ascii_finds(typed):
    """Full-width Latin is folded (NFKC) as the index's text is: the same answers, a pasted message matched too."""
    wide = _full_width(typed)
    assert wide != typed and wide.isascii() is False
    answers = [(h.kind, h.title_en) for h in ask(typed, k=3, lang="en")]
    assert answers and [(h.kind, h.title_en) for h in ask(wide, k=3, lang="en")] == answers
    assert tokens(wide) == tokens(typed) and ask_module.entry_terms(wide, "") == ask_module.entry_terms(typed, "")


def test_folding_keeps_the_courses_mathematics():
    """Only the full-width forms and the ideographic space are folded: NFKC on the whole text would make ``Wᵀ`` the
    word ``wt`` and ``n²`` the word ``n2`` in the index."""
    assert ask_module.folded("ＧＰＵ　显存（ｆｐ１６）Wᵀx n²") == "gpu 显存(fp16)wᵀx n²"


def test_nothing_found_says_what_to_try():
    answers = ask("zzzz qqqq", lang="en")
    assert list(answers) == [] and "paste the whole error message" in repr(answers)


def test_the_answers_show_as_links_in_a_notebook_and_as_lines_in_a_shell(monkeypatch):
    monkeypatch.delenv("HOOKLAB_SITE_URL", raising=False)
    monkeypatch.setattr(website, "_project_urls", lambda: {})
    answers = ask("post accumulate grad hook on a non-leaf tensor", k=2, lang="en")
    assert answers and repr(answers).startswith("1. [") and "`en/" in answers._repr_markdown_()
    monkeypatch.chdir(Path(__file__).parents[2] / "notebooks")  # the course's lab: the cell itself is at hand
    assert "#cell-id=" in answers._repr_markdown_()


class _Metadata:
    def __init__(self, urls):
        self.urls = urls

    def get_all(self, name):
        return self.urls if name == "Project-URL" else None


@pytest.fixture
def project_urls(monkeypatch):
    """Set the installed package's [project.urls] as a release stamps them (tools/launch/package_page.py)."""
    monkeypatch.delenv("HOOKLAB_SITE_URL", raising=False)

    def stamp(urls):
        monkeypatch.setattr(website.metadata, "metadata", lambda name: _Metadata(urls))
        website._project_urls.cache_clear()

    yield stamp
    website._project_urls.cache_clear()


def test_a_released_package_links_to_the_published_site(project_urls):
    project_urls(["Homepage, https://some-org.github.io/hooklab/", "Documentation, https://some-org.github.io/hooklab/",
                  "Repository, https://github.com/Some-Org/hooklab"])
    shown = repr(ask("my forward hook is never called", k=3, lang="zh"))
    links = re.findall(r"->  (\S+)", shown)
    assert len(links) == 3 and all(link.startswith("https://some-org.github.io/hooklab/zh/") for link in links), shown
    assert ".ipynb" not in shown and "HOOKLAB_SITE_URL" not in shown


def test_a_copy_built_from_a_checkout_gives_the_sites_paths_and_says_so(project_urls):
    project_urls(["Homepage, https://OWNER.github.io/REPO/"])  # the placeholder of a local build: no address
    shown = repr(ask("my forward hook is never called", k=3, lang="en"))
    links = re.findall(r"->  (\S+)", shown)
    assert len(links) == 3 and all(link.startswith("en/") and ".html" in link for link in links), shown
    assert ".ipynb" not in shown and shown.endswith("(paths of pages on the course's website; HOOKLAB_SITE_URL sets "
                                                    "its address)")


def test_the_environment_sets_the_sites_address(project_urls, monkeypatch):
    project_urls([])
    monkeypatch.setenv("HOOKLAB_SITE_URL", "http://localhost:8000")
    hit = ask("my forward hook is never called", k=1, lang="en")[0]
    assert hit.url("en").startswith("http://localhost:8000/en/")
    monkeypatch.setenv("HOOKLAB_SITE_URL", "not a url")
    with pytest.raises(ValueError, match="HOOKLAB_SITE_URL should be the course website's address"):
        repr(ask("my forward hook is never called", k=1, lang="en"))


def test_a_section_links_to_its_heading_on_each_languages_site():
    hits = [h for h in ask("when hooks do not fire forward called directly", k=10, lang="en") if h.kind == "section"]
    assert hits and hits[0].anchors
    assert hits[0].site_link("en").split("#")[1] == hits[0].anchors[1]
    assert hits[0].site_link("zh").split("#")[1] == hits[0].anchors[0]


@pytest.mark.parametrize("setting", ["zh", "en"])
def test_the_answers_are_in_the_learners_language(setting, monkeypatch):
    monkeypatch.setenv("HOOKLAB_LANG", setting)
    shown = repr(ask("my forward hook is never called", k=5))
    chinese = re.search(r"[\u4e00-\u9fff]", shown) is not None
    assert chinese == (setting == "zh"), shown


@pytest.mark.parametrize(("argv", "says"), [(["ask", ""], "ask needs a question"), (["ask", " "], "ask needs a question"),
                                            (["ask", "-k", "0", "hook"], "-k takes a whole number"),
                                            (["ask", "hook " * 5000], "last lines of the traceback")])
def test_the_command_line_refuses_bad_input_with_a_usage_error(argv, says, capsys):
    from hooklab.course.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "usage:" in err and "Traceback" not in err


def test_the_command_line_form(tmp_path):
    run = subprocess.run([sys.executable, "-m", "hooklab.course", "ask", "hook", "not", "called", "--lang", "en",
                          "-k", "2"], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("1. [") and "\n2. [" in run.stdout


def test_hooklab_ask_is_course_ask_and_import_hooklab_stays_without_the_course():
    import hooklab
    from hooklab import course

    assert hooklab.ask is course.ask and "ask" in dir(hooklab) and "ask" not in hooklab.__all__
    code = ("import sys, hooklab; assert 'hooklab.course' not in sys.modules; hooklab.ask; "
            "assert 'hooklab.course' in sys.modules; print('ok')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert run.stdout.strip() == "ok", run.stderr
    with pytest.raises(AttributeError, match="no attribute 'asks'"):
        hooklab.asks  # noqa: B018


def _row(text: str) -> dict:
    return next(e for e in _entries() if e["kind"] == "message" and e["message"] == text)


@pytest.mark.parametrize("text", ["register_comm_hook or register_builtin_comm_hook can only be called once.",
                                  "register_builtin_comm_hook or register_comm_hook can only be called once."])
def test_sibling_messages_with_the_same_words_in_another_order_are_told_apart(text):
    row = _row(text)
    first = ask(f"RuntimeError: {text}", k=1, lang="en")[0]
    assert first.title_en == row["en"], first  # the row of this order, not its sibling's (one cell explains both)
    sibling = " or ".join(reversed(text.split(" can only")[0].split(" or "))) + " can only be called once."
    assert ask_module.message_match(ask_module._pasted(text), sibling)[0] < ask_module.MESSAGE_SHARE


def test_a_message_is_matched_by_its_text_not_by_a_word_it_shares():
    """The row "Can't pickle local object" once reduced to the word "can" and took every paste holding it."""
    pickle = _row("Can't pickle local object '{name}'")
    hits = ask("RuntimeError: register_comm_hook or register_builtin_comm_hook can only be called once.", k=5,
               lang="en")
    assert all((h.notebook, h.cell) != (pickle["notebook"], pickle["cell"]) for h in hits)
    assert ask("AttributeError: Can't pickle local object 'make_hook.<locals>.hook'", k=1, lang="en")[0].cell == (
        pickle["cell"])


@pytest.mark.parametrize("paste", ["KeyError: 'model.layers.0.mlp'", "AssertionError: expected 3 hooks, found 0",
                                   "TypeError: this hook is not supported",
                                   "torch.utils.checkpoint.CheckpointError: my own words here"])
def test_a_message_that_is_only_an_exception_class_takes_no_paste(paste):
    for message in ("KeyError", "AssertionError", "CheckpointError", "TypeError", "{name} is not supported"):
        assert ask_module.message_match(ask_module._pasted(paste), message) == (0.0, 0)
    assert all(hit.score < ask_module.MESSAGE_TIER for hit in ask(paste, k=3, lang="en"))


def test_a_paste_holding_more_of_a_longer_message_ranks_it_first():
    pasted = ask_module._pasted("RuntimeError: Only Tensors created explicitly by the user (graph leaves) support the "
                                "deepcopy protocol at the moment")
    long = "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at the moment"
    short = "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol"
    assert ask_module.message_match(pasted, long) == (1.0, 16) and ask_module.message_match(pasted, short) == (1.0, 13)


# issue 63 item 4: "my hook does not fire / fires twice / sees the wrong thing", in either language, leads to the doctor
DOCTOR_WORDS = [("my forward hook is never called", "never-fires"), ("backward hook not called", "never-fires"),
                ("我的钩子没有被调用", "never-fires"), ("钩子不触发", "never-fires"),
                ("my hook fires twice", "fires-twice"), ("钩子触发了两次", "fires-twice"),
                ("my hook sees the wrong module", "sees-wrong"), ("钩子看到的模块不对", "sees-wrong")]


@pytest.mark.parametrize(("words", "case"), DOCTOR_WORDS)
def test_a_hook_that_misbehaves_leads_to_the_doctor_with_how_to_call_it(words, case):
    hits = ask(words, k=3, lang="en")
    doctor = [h for h in hits if h.kind == "tool"]
    assert doctor and doctor[0].page == "api.html#hooklab.explain_hook", repr(hits)
    assert 'hooklab.explain_hook(model, "layer", run=lambda: ...)' in doctor[0].title_en
    entry = next(e for e in _entries() if e["id"] == f"tool:explain-hook-{case}")
    assert doctor[0].title_en == entry["en"]


def test_a_specific_symptom_still_comes_before_the_doctor():
    first = ask("full backward hook on LSTM never fires", k=1, lang="en")[0]
    assert first.kind != "tool", first


@pytest.mark.parametrize(("words", "zoo", "place"), [("where to hook the attention output of llama", "transformers",
                                                      "attention"),
                                                     ("resnet50 where to hook the residual branch", "torchvision",
                                                      None)])
def test_the_atlas_is_found_with_the_call_that_reads_it(words, zoo, place):
    hits = [h for h in ask(words, k=3, lang="en") if h.kind == "atlas"]
    assert hits and hits[0].page == f"atlas-{zoo}.html", hits
    assert f"course.atlas('{zoo}')[model]" in hits[0].title_en
    if place:
        assert f".where(block, '{place}')" in hits[0].title_en


@pytest.mark.parametrize(("typed", "slug"), [("fully_shard hooks", "fsdp2"), ("AveragedModel hooks", "swa_utils"),
                                             ("bnb hooks", "bitsandbytes"), ("pyg hooks", "torch_geometric"),
                                             ("pytorch_lightning hooks", "lightning"),
                                             ("torch.ao.quantization observers", "torch_ao_quantization")])
def test_a_library_is_found_under_the_names_course_profile_takes(typed, slug):
    hits = ask(typed, k=5, lang="en")
    assert any(h.kind == "profile" and h.page == f"profiles-{slug}.html" for h in hits), repr(hits)


def test_the_lesson_takes_third_place_only_when_it_scores_close_to_the_first():
    from hooklab.course import asking

    def entries(*pairs):
        return [(score, {"kind": kind, "id": f"{kind}:{n}"}) for n, (score, kind) in enumerate(pairs)]

    close = entries((10.0, "recipe"), (9.8, "recipe"), (9.6, "recipe"), (9.5, "matrix"), (9.2, "symptom"))
    asking._keep_the_lesson_in_view(close, 3)
    assert [e["kind"] for _, e in close] == ["recipe", "recipe", "symptom", "recipe", "matrix"]
    far = entries((10.0, "recipe"), (9.8, "recipe"), (9.6, "recipe"), (8.0, "section"))
    asking._keep_the_lesson_in_view(far, 3)
    assert far[2][1]["kind"] == "recipe", "a course place well below the first answer keeps its rank"
    pasted = entries((asking.MESSAGE_TIER + 95, "recipe"), (30.0, "recipe"), (29.0, "recipe"), (29.0, "symptom"))
    asking._keep_the_lesson_in_view(pasted, 3)
    assert pasted[2][1]["kind"] == "recipe", "a pasted message's ranking is left as it is"
    present = entries((10.0, "recipe"), (9.9, "section"), (9.6, "recipe"), (9.5, "symptom"))
    asking._keep_the_lesson_in_view(present, 3)
    assert [e["kind"] for _, e in present] == ["recipe", "section", "recipe", "symptom"]


def test_a_row_taught_in_two_places_takes_one_place_with_the_other_listed_under_it():
    """A symptom row of a lesson is also a row of notebook 08's table: both in the first three would leave a learner
    two copies of one answer and one answer fewer. The first keeps its place, the second is listed under it."""
    twins = {}
    for entry in ask_module._index()[0]:
        if entry["kind"] == "symptom":
            twins.setdefault(entry["en"], []).append((entry["notebook"], entry["cell"]))
    title, places = next((t, p) for t, p in sorted(twins.items()) if len(set(p)) > 1)
    hits = ask(title, k=3, lang="en")
    shown = [(h.kind, h.title_en) for h in hits]
    assert len(shown) == len(set(shown)), shown
    first = next(h for h in hits if h.title_en == title)
    assert set(places) <= first.places() and first.also, (first, places)
    assert "the same row also in" in repr(hits) and "同一条也在" in repr(ask(title, k=3, lang="zh"))
