"""docs/hook_messages.json is what tools/messages/hook_messages.py reads from the installed packages, every message has one
status that holds, and the extraction finds what it claims to on sources written here.

The first test re-runs the extraction: on another PyTorch (``./course rerun --torch X``) it fails with the texts
added and removed, per source. The trigger tests of this folder check that each triggered message still prints as
stored."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.messages import hook_messages as hm

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built():
    return hm.build()


def test_the_data_is_what_the_installed_packages_say(built):
    data, problems = built
    committed = hm.load()
    changes = hm.difference(committed, data)
    if changes:
        summary = "; ".join(line for line in changes if not line.startswith(" "))[:300]
        pytest.fail(f"docs/hook_messages.json is not what the installed packages and the triage say ({summary}); "
                    "run python -m tools.messages.hook_messages --write and look at the diff:\n" + "\n".join(changes[:80]))
    assert not problems, "\n".join(problems)


def test_every_message_has_one_status_and_it_is_complete(built):
    data, _ = built
    reasons = hm.load_triage()["reasons"]
    for m in data["messages"]:
        assert m["status"] in ("cell", "test", "excused"), f"{m['id']} is {m['status']}: trigger it, or excuse it"
        if m["status"] == "cell":
            assert m["symptom"] and m["notebook"].endswith(".ipynb") and m["cell_id"] and m["example"]
        if m["status"] == "test":
            assert m["test"].startswith("tests/messages/test_") and m["zh"] and m["en"] and m["cell_id"]
            assert m["trigger_example"] == m["example"], m["id"]
        if m["status"] == "excused":
            assert m["reason"] in reasons and m["why"], m["id"]
    ids = [m["id"] for m in data["messages"]]
    assert len(ids) == len(set(ids))


def test_the_coverage_is_counted_from_the_records(built):
    data, _ = built
    rows = {r["source"]: r for r in hm.coverage(data["messages"])}
    assert set(rows) == {*hm.SOURCES, "all"}
    for source, row in rows.items():
        mine = [m for m in data["messages"] if source == "all" or m["source"] == source]
        assert row["messages"] == len(mine)
        assert row["cell"] + row["test"] + row["excused"] + row["open"] == len(mine)
    assert rows["all"]["test"] == sum(1 for m in data["messages"] if m["status"] == "test")


def test_every_trigger_test_shows_a_message_of_the_data():
    known = {m["id"] for m in hm.load()["messages"]}
    tests = hm.trigger_tests()
    assert tests, "no trigger test found"
    assert set(tests) <= known, sorted(set(tests) - known)


# --- the extraction, on sources written here ----------------------------------------------------------------

FAKE = '''
import warnings
MODULE_TIP = "see the docs"

def register_thing_hook(hook, mode):
    if not callable(hook):
        raise TypeError(f"hook must be callable, got {type(hook).__name__}")
    if mode not in ("a", "b"):
        raise ValueError("mode must be %s or %s, got %r" % ("a", "b", mode))
    warnings.warn("hooks are {} here".format(mode))

def unrelated(x):
    raise RuntimeError("nothing about the subject")

def closes_over():
    message = "the text of an outer function about hook use"
    def inner():
        raise RuntimeError(message)
    return inner

def branches(flag):
    extra = ""
    if flag:
        extra = "more. "
    raise RuntimeError(f"prefix. {extra}hook suffix")

def tip():
    raise RuntimeError(f"a hook failed. {MODULE_TIP}")

class ThingHook:
    def __call__(self):
        assert False, "called without its module"
'''


def test_python_extraction_keeps_variable_parts_and_follows_names(tmp_path):
    (tmp_path / "fakepkg").mkdir()
    (tmp_path / "fakepkg" / "__init__.py").write_text(FAKE, encoding="utf-8")
    found = {f.text: f for f in hm.python_messages(tmp_path, ["fakepkg"], "fake")}
    assert set(found) == {
        "hook must be callable, got {type(hook).__name__}",   # the function's name says hook: all its messages
        "mode must be {'a'} or {'b'}, got {mode}",
        "hooks are {mode} here",
        "the text of an outer function about hook use",     # a name followed into the function around
        "prefix. {extra}hook suffix",                        # assigned in a branch: its text depends on the run
        "a hook failed. see the docs",                       # a module-level constant
        "called without its module",                         # a class whose name says Hook
    }
    assert found["hooks are {mode} here"].kind == "warning" and found["called without its module"].call == "assert"
    assert found["hook must be callable, got {type(hook).__name__}"].function == "register_thing_hook"


def test_cpp_strings_are_the_messages_among_the_binary_strings(tmp_path):
    library = tmp_path / "libfake.so"
    library.write_bytes(b"\x00\x01".join([
        b"cannot register a hook on a variable that doesn't require gradient",
        b"N5torch8autograd12FunctionPreHookE", b"post_acc_grad_hook", b"unrelated message about nothing",
        b"void torch::autograd::f(const at::Tensor&) hook", b"x" * 10,
        b"Register a pre-hook, called before each collective is issued"]) + b"\x00")
    assert hm.cpp_strings(library) == [
        "Register a pre-hook, called before each collective is issued",
        "cannot register a hook on a variable that doesn't require gradient"]
    assert hm.cpp_contains([library], "unrelated message") == ["libfake.so"]


def test_other_meanings_of_hook_are_left_out():
    inductor = hm.Found(hm.TORCH_PY, "torch/_inductor/select_algorithm.py", 1, "PartialRender.finalize_hook",
                        "raise AssertionError", "error", "Hook key {k} can only be called once")
    module = hm.Found(hm.TORCH_PY, "torch/nn/modules/module.py", 1, "Module.state_dict", "raise RuntimeError",
                      "error", "state_dict post-hook must return None")
    assert "Inductor" in hm.other_meaning(inductor) and hm.other_meaning(module) is None


@pytest.mark.parametrize("text, output, shown", [
    ("got {n}, but expected {m}", "Error: got 3, but expected 2 values", "Error: got 3, but expected 2 values"),
    ("size mismatch for {key}: copying a param with shape {a} from checkpoint, the shape is {b}.",
     "x\nsize mismatch for head.weight: copying a param with shape torch.Size([2]) from check...\ny",
     "size mismatch for head.weight: copying a param with shape torch.Size([2]) from check..."),  # cut short
    ("Expected to mark a variable ready only once. This error is caused by {reasons}",
     "find_unused_parameters=True  RuntimeError: Expected to mark a variable ready only once",
     "find_unused_parameters=True  RuntimeError: Expected to mark a variable ready only once"),
    ("hook '{name}' has changed the size of value", "RuntimeError: something else entirely", None),
    ("short {x} text", "short", None),  # fewer fixed characters than MIN_SHOWN are never enough
])
def test_a_cell_shows_a_message_whole_cut_short_or_by_a_sentence(text, output, shown):
    assert hm.shown_piece(text, output) == shown


def test_the_pattern_of_a_message_matches_its_printed_forms():
    rx = hm.pattern("forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {result}.")
    assert rx.search("forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got ((1,),).")
    assert not rx.search("forward pre-hook must return None or a tuple")
    assert hm.pattern("hook returned '%s'").search("expected tuple, but hook returned 'Tensor'")
    tail = hm.pattern("Tensor on device {a} is not on the expected device {b}!")
    assert tail.search("x Tensor on device meta is not on the expected device cpu!\nnext").group(0).endswith("cpu!")


def test_a_status_that_points_nowhere_is_reported(tmp_path):
    data = hm.load()
    messages = [hm.Message(m["id"], m["source"], m["kind"], m["family"], m["text"], m["call"], m["places"])
                for m in data["messages"]]
    triage = json.loads(json.dumps(hm.load_triage()))
    some = next(m for m in data["messages"] if m["status"] == "excused")
    triage["symptom"]["no-such-message-000000"] = "non-leaf-grad-is-none"
    triage["symptom"][some["id"]] = "no-such-symptom"
    _, problems = hm.statuses(messages, triage, root=ROOT)
    assert any("no-such-message-000000" in p and "is no message" in p for p in problems)
    assert any(some["id"] in p and "in both" in p for p in problems)
    assert any("no-such-symptom" in p for p in problems)



def test_a_curated_text_of_the_interpreter_stands_only_where_a_run_prints_it(built):
    """where = "Python" names no file: its row stands when its trigger test stored what it printed, or its symptom
    cell shows it; a text that no run prints is refused, as a C++ or file row whose text is gone."""
    data, _ = built
    curated = hm.load_triage()["curated"]
    interpreter = [e for e in curated if e["where"] == hm.INTERPRETER]
    assert len(interpreter) >= 10
    assert hm.unshown_interpreter_texts(curated, data["messages"]) == []
    invented = {"text": "maximum recursion depth exceeded by a hook", "where": hm.INTERPRETER}
    problems = hm.unshown_interpreter_texts([*curated, invented], data["messages"])
    assert len(problems) == 1 and "maximum recursion depth exceeded by a hook" in problems[0]
    unshown = [{**r, "trigger_example": None} if r["text"] == "pop from empty list" else r for r in data["messages"]]
    assert hm.unshown_interpreter_texts(curated, unshown) == [
        "curated message 'pop from empty list': where = 'Python' (the interpreter's own words) needs a run that "
        "prints it, and none does: trigger it (@trigger, then --examples) or show it in a symptom cell"]

def test_a_changed_release_is_reported_as_texts_added_and_removed():
    old = hm.load()
    new = json.loads(json.dumps(old))
    gone = new["messages"].pop(0)
    new["messages"].append({**gone, "text": "a message of the next release about hooks", "id": "new-000000"})
    new["versions"]["torch"] = "9.9.9"
    lines = hm.difference(old, new)
    source = gone["source"]
    assert lines[0] == f"{source} ({old['versions'].get(source, '?')} -> {new['versions'].get(source, '?')}): " \
                       "1 message(s) added, 1 removed"
    assert "  + 'a message of the next release about hooks'" in lines and f"  - {gone['text'][:160]!r}" in lines
    assert hm.difference(old, old) == []


# --- deprecation and saved-tensor texts, merged texts, left-out texts, attempts -----------------------------

DEPRECATED = '''
from typing_extensions import deprecated

@deprecated("`old_norm` is deprecated in favor of `new_norm`.", category=FutureWarning)
def old_norm_hook(module):
    return module

@deprecated("kept quiet", category=None)
def quiet_hook(module):
    return module

def unrelated(ctx):
    raise RuntimeError("saved tensors were freed after backward")
'''


def test_deprecated_decorators_and_saved_tensor_texts_are_read(tmp_path):
    (tmp_path / "fakepkg").mkdir()
    (tmp_path / "fakepkg" / "__init__.py").write_text(DEPRECATED, encoding="utf-8")
    found = {f.text: f for f in hm.python_messages(tmp_path, ["fakepkg"], "fake", cache=None)}
    assert set(found) == {"`old_norm` is deprecated in favor of `new_norm`.",  # category=None warns nothing
                          "saved tensors were freed after backward"}        # says "saved tensors", not "hook"
    assert found["`old_norm` is deprecated in favor of `new_norm`."].call == "@deprecated"
    assert found["`old_norm` is deprecated in favor of `new_norm`."].kind == "warning"


def test_the_same_words_in_two_sources_are_one_row_and_it_is_the_explained_one(built):
    data, _ = built
    texts: dict[str, list[str]] = {}
    for m in data["messages"]:
        texts.setdefault(" ".join(m["text"].split()), []).append(m["id"])
    assert not [ids for ids in texts.values() if len(ids) > 1]
    (row,) = [m for m in data["messages"] if m["text"] == "Tensor post accumulate grad hooks should return None."]
    assert row["status"] == "test" and row["en"] and set(row["sources"]) == {hm.TORCH_PY, hm.TORCH_CPP}
    assert any(p.startswith("torch/_dynamo/") for p in row["places"]) and "libtorch_python.so" in row["places"]


def test_left_out_texts_are_listed_by_category(built):
    data, _ = built
    left = hm.left_out_texts(data)
    fx = next(texts for category, texts in left.items() if category.startswith("torch: FX graph-editing"))
    assert "Replace hook must be a callable." in fx
    for entries in data["left_out"].values():
        assert all(e["text"] and e["places"] for e in entries)


def test_an_excuse_needs_an_attempt_read_from_its_decorator(tmp_path, monkeypatch):
    from tools.messages import hook_messages_status
    folder = tmp_path / "tests" / "messages"
    folder.mkdir(parents=True)
    (folder / "test_excused_x.py").write_text(
        'IDS = ["b-000000"]\n\n'
        '@attempt(["a-000000", "c-000000"], outcome="ran without it")\ndef tried():\n    pass\n\n'
        '@attempt(IDS, outcome="")\ndef tried_too():\n    pass\n', encoding="utf-8")
    tried = hook_messages_status.attempts(folder)
    assert tried["a-000000"] == {"attempt": "tests/messages/test_excused_x.py::tried", "outcome": "ran without it"}
    assert tried["b-000000"]["outcome"] == ""
    data = hm.load()
    messages = [hm.Message(m["id"], m["source"], m["kind"], m["family"], m["text"], m["call"], m["places"])
                for m in data["messages"]]
    excused = next(m["id"] for m in data["messages"] if m["status"] == "excused")
    monkeypatch.setattr(hook_messages_status, "attempts", lambda folder: {})
    _, problems = hm.statuses(messages, hm.load_triage(), root=ROOT)
    assert any(excused in p and "without an attempt" in p for p in problems)


def test_an_attempt_that_reaches_its_message_or_shows_another_outcome_fails():
    import message_triggers as mt
    excused = next(m for m in hm.load()["messages"] if m["status"] == "excused" and "{" not in m["text"])

    def reaches():
        raise RuntimeError(excused["text"])
    with pytest.raises(AssertionError, match="reached"):
        mt.check_attempt(mt.Attempt((excused["id"],), reaches, __name__, "RuntimeError"))
    with pytest.raises(AssertionError, match="recorded outcome"):
        mt.check_attempt(mt.Attempt((excused["id"],), lambda: "something else", __name__, "what was recorded"))
    mt.check_attempt(mt.Attempt((excused["id"],), lambda: "what was recorded", __name__, "what was recorded"))


def test_every_excused_row_carries_its_attempt_and_outcome(built):
    data, _ = built
    for m in data["messages"]:
        if m["status"] == "excused":
            assert m["attempt"].startswith("tests/messages/test_excused_") and m["outcome"], m["id"]


def test_a_damaged_data_file_is_named_with_how_to_restore_it(tmp_path, monkeypatch, capsys):
    damaged = tmp_path / "hook_messages.json"
    damaged.write_text(hm.DATA.read_text(encoding="utf-8")[:300], encoding="utf-8")
    with pytest.raises(hm.HookMessageError, match=r"cannot read .*hook_messages\.json.*git checkout.*--write"):
        hm.load(damaged)
    monkeypatch.setattr(hm, "DATA", damaged)
    assert hm.main([]) == 1
    err = capsys.readouterr().err
    assert "hook_messages.json" in err and "git checkout" in err and "Traceback" not in err
