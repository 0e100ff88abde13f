"""The denominator of the symptom index: every error and warning text about hooks that the pinned PyTorch and the pinned
libraries can show, read from their installed files, each with its status (shown in a notebook cell, triggered by a
test, excused with a reason, or open).

    .venv/bin/python -m tools.messages.hook_messages              # check: exit 1, saying what changed, when the data is stale
    .venv/bin/python -m tools.messages.hook_messages --write      # re-extract and rewrite docs/hook_messages.json
    .venv/bin/python -m tools.messages.hook_messages --examples   # run the trigger tests and store each one's printed message
    .venv/bin/python -m tools.messages.hook_messages --report     # coverage per source, and what is still open
    .venv/bin/python -m tools.messages.hook_messages --programs   # each triggered message's program and fix (docs/programs/)

Where the texts come from (all read from the files of the running Python's site-packages; nothing is imported):

- **torch (Python)**: ``torch/**.py`` parsed with :mod:`ast` (``torch/testing/_internal`` left out: the test suite's
  helpers). A message is the text of ``raise X("...")``, ``assert ..., "..."``, ``warnings.warn("...")`` (and
  ``warn`` / ``warn_once`` / ``logger.warning``), ``torch._check*(cond, lambda: "...")`` (and FSDP's
  ``_p_assert(cond, "...")``), dynamo's ``unimplemented(gb_type="...", explanation="...")``,
  ``disable_saved_tensors_hooks("...")`` and the message of a ``@deprecated("...")`` decorator (unless
  ``category=None``, which warns nothing). F-strings, ``%``-formatting, ``.format`` and ``+`` keep their variable
  parts as placeholders (``{type(hook)}``); a message built
  in a variable first (of the function, a function around it, or the module) is followed to its one assignment (a
  name assigned twice stays a placeholder: its text depends on the run). It concerns hooks when its text or the name
  of a function or class around it says "hook", when its text speaks of saved tensors (or saved variables: what a
  user of saved-tensor hooks meets), or when it is in one of :data:`HOOK_FILES` (modules that are about hooks as a
  whole: checkpoint, parametrize, the old weight norm, saved-tensor hooks, DDP communication hooks, FSDP2's hook
  state). :mod:`tools.hook_messages_python`.
- **torch (C++)**: the printable strings of ``torch/lib/libtorch_cpu.so`` and ``libtorch_python.so`` (their ``.rodata``)
  that say "hook" or speak of saved tensors (TORCH_CHECK's pieces, TORCH_WARN's, internal assertions); strings that are
  no message (docstrings of the Python bindings, type and symbol names) are listed in ``docs/hook_messages.toml``
  (``[cpp] not_messages``), and a message that TORCH_CHECK builds from several strings is written there whole
  (``[[cpp.joined]]``, its pieces checked). :mod:`tools.hook_messages_cpp`.
- **the libraries** (:data:`LIBRARIES`): their Python sources, read like torch's (text or function says "hook").
- **curated** (``docs/hook_messages.toml``, ``[[curated]]``): errors users meet *because of* a hook although the text
  does not say so (a view modified in place, a size changed by a hook, a recomputation mismatch, ...); each is checked to
  be where it says (in the C++ strings, or in the Python file it names). ``where = "Python"`` (:data:`INTERPRETER`)
  is the interpreter's own words (``RecursionError: maximum recursion depth exceeded``, ``'NoneType' object is not
  subscriptable``): no file holds them, so a run must print them: the row's trigger test (its stored example, which
  the test checks it still prints) or its symptom cell (whose output is checked to show it); a row that neither
  shows is a problem (:func:`unshown_interpreter_texts`).

Parsed files are cached by the digest of their text (``CACHE``), so a re-run reads only what changed.
Texts whose "hook" is another idea (``OTHER_MEANINGS`` of :mod:`tools.hook_messages_families`: Inductor's
code-generation callbacks, device-backend interfaces, ...) are left out, and listed by category in the data and on the
index's page. Identical texts are one message with every place listed, whichever sources have them (the C++ check and
its Python copy: one row, with ``sources``).

The status of each message (:mod:`tools.hook_messages_status`) comes from ``docs/hook_messages.toml`` (``[symptom]``:
the symptom cell that shows it; ``[explained]``: the row of a message a test triggers; ``[excused]``: why it is not
triggered here) and from the tests of ``tests/messages/``, found by reading their source: ``@trigger("<id>")`` shows a
message; ``@attempt(["<id>", ...], outcome="...")`` (``test_excused_*.py``) tries to reach an excused one from Python
and records what happened instead. An excuse without an attempt is a problem; an attempt that reaches its message
fails its test (the message is then triggered, not excused). ``tests/messages/`` re-runs
the extraction and fails, listing the added and removed texts, when the installed packages' messages are not the
committed ones: what ``./course rerun`` shows on another PyTorch.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import tomllib

from .hook_messages_cpp import CPP_LIBRARIES, cpp_contains, cpp_messages, cpp_strings
from .hook_messages_data import (
    CURATED,
    DATA,
    EXAMPLES,
    FAMILIES,
    LIBRARIES,
    SOURCES,
    TORCH_CPP,
    TORCH_PY,
    HookMessageError,
    Message,
    coverage,
    difference,
    dumps,
    excuses,
    left_out_texts,
    load,
    load_examples,
    report,
)
from .hook_messages_families import family_of, other_meaning
from .hook_messages_python import Found, python_messages
from .hook_messages_status import attempts, resolve_cell, shown_piece, statuses, trigger_tests
from .hook_messages_text import PLACEHOLDER, clauses, literal_pieces, message_id, pattern, slug

__all__ = ["CPP_LIBRARIES", "CURATED", "DATA", "EXAMPLES", "FAMILIES", "LIBRARIES", "PLACEHOLDER", "SOURCES",
           "TORCH_CPP", "TORCH_PY", "Found", "INTERPRETER", "HookMessageError", "Message", "attempts", "build", "coverage",
           "cpp_contains", "cpp_messages", "cpp_strings", "curated_messages", "difference", "dumps", "excuses",
           "extract", "family_of", "left_out_texts", "literal_pieces", "load", "load_examples", "load_triage", "main",
           "message_id", "other_meaning", "pattern", "python_messages", "report", "resolve_cell", "shown_piece",
           "slug", "statuses", "trigger_tests", "unshown_interpreter_texts"]

ROOT = Path(__file__).resolve().parents[2]
TRIAGE = ROOT / "docs" / "hook_messages.toml"
DISTRIBUTIONS = {TORCH_PY: "torch", TORCH_CPP: "torch", "accelerate": "accelerate", "diffusers": "diffusers",
                 "peft": "peft", "captum": "captum", "lightning": "pytorch-lightning", "timm": "timm",
                 "torchao": "torchao"}

# torch modules that are about hooks as a whole: every message in them counts, whatever its words
HOOK_FILES = (
    "torch/utils/hooks.py",                                     # RemovableHandle, BackwardHook (full backward hooks)
    "torch/utils/checkpoint.py",                                # activation checkpointing: saved-tensor hooks
    "torch/autograd/graph.py",                                  # saved-tensor, multi-grad, node hooks
    "torch/nn/utils/parametrize.py",                            # parametrizations
    "torch/nn/utils/weight_norm.py",                            # the old weight norm: a forward pre-hook
    "torch/distributed/algorithms/ddp_comm_hooks/",             # DDP communication hooks
    "torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py",
    "torch/distributed/_composable/checkpoint_activation.py",
    "torch/distributed/fsdp/_fully_shard/_fsdp_state.py",       # FSDP2's forward / backward hooks
)


# --- the messages -------------------------------------------------------------------------------------------

def load_triage(path: Path = TRIAGE) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HookMessageError(f"cannot read {path}: {exc}") from None
    for key in ("curated", "cpp", "symptom", "explained", "excused", "reasons"):
        data.setdefault(key, [] if key == "curated" else {})
    return data


def versions() -> dict[str, str]:
    out = {}
    for source, dist in DISTRIBUTIONS.items():  # torch C++ is torch's version
        try:
            out[source] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[source] = "not installed"
    return out


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


INTERPRETER = "Python"  # a curated row's `where` for a built-in exception's own words (checked by a run, not a file)


def unshown_interpreter_texts(curated: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[str]:
    """The problems of the curated rows whose place is the interpreter: each text must be printed by a run, its trigger
    test's stored example or its symptom cell (``records``: the data's rows, with their status)."""
    shown = {" ".join(r["text"].split()) for r in records if r.get("trigger_example") or r.get("status") == "cell"}
    return [f"curated message {e['text']!r}: where = {INTERPRETER!r} (the interpreter's own words) needs a run that "
            "prints it, and none does: trigger it (@trigger, then --examples) or show it in a symptom cell"
            for e in curated if e.get("where") == INTERPRETER and " ".join(str(e.get("text", "")).split()) not in shown]


def curated_messages(site: Path, curated: list[dict[str, Any]]) -> tuple[list[Found], list[str]]:
    """The curated messages, each checked to be where it says; and the problems (a text no longer there)."""
    found, problems = [], []
    libraries = [site / "torch" / "lib" / name for name in CPP_LIBRARIES]
    for i, entry in enumerate(curated):
        missing = {"text", "where", "family", "kind", "why"} - set(entry)
        if missing:
            problems.append(f"[[curated]] entry {i + 1} lacks {sorted(missing)}")
            continue
        text, where = entry["text"], entry["where"]
        check = entry.get("check")  # what to look for, where the printed words are built from pieces
        checks = [check] if isinstance(check, str) else check
        if where == "C++":  # its longest fixed sentence (or what `check` says) is in the libraries
            needles = checks or [max(clauses(text), key=len, default=text)]
            found_in = [cpp_contains(libraries, needle) for needle in needles]
            if not all(found_in):
                problems.append(f"curated message {text!r}: no longer in {', '.join(CPP_LIBRARIES)}")
            location = ", ".join(sorted(set().union(*map(set, found_in))))
        elif where == INTERPRETER:  # no file to read: unshown_interpreter_texts checks that a run prints it
            location = "the Python interpreter"
        else:
            path = site / where
            source_text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            needles = checks or [p for p in literal_pieces(text) if len(p) >= 8]
            if not all(needle in source_text for needle in needles):
                problems.append(f"curated message {text!r}: no longer in {where}")
            location = where
        found.append(Found(CURATED, location, 0, "", entry.get("call", where), entry["kind"], text))
    return found, problems


def extract(site: Path | None = None, triage: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
    """Every message, and a summary (per source: found, left out as another meaning, problems)."""
    site = site or site_packages()
    triage = triage if triage is not None else load_triage()
    found = python_messages(site, ("torch",), TORCH_PY, whole_files=HOOK_FILES)
    cpp, cpp_problems = cpp_messages(site, triage["cpp"])
    found += cpp
    for source, packages in LIBRARIES.items():
        found += python_messages(site, [p for p in packages if (site / p).is_dir()], source)
    curated, problems = curated_messages(site, triage["curated"])
    problems = cpp_problems + problems
    family_override = {e["text"]: e["family"] for e in triage["curated"] if "text" in e and "family" in e}
    left_out: dict[str, dict[str, list[str]]] = defaultdict(dict)
    grouped: dict[str, Message] = {}  # one message per text: the same words in two sources (C++ and Python) are one
    for f in curated + found:  # a curated text that a source also has keeps its curated row
        place = f.file if f.source in (TORCH_CPP, CURATED) else f"{f.file}:{f.line} {f.function}".rstrip()
        reason = other_meaning(f)
        if reason:
            places = left_out[f"{f.source}: {reason}"].setdefault(f.text, [])
            if place not in places:
                places.append(place)
            continue
        key = " ".join(f.text.split())
        if key not in grouped:
            family = family_override.get(f.text) if f.source == CURATED else None
            grouped[key] = Message(message_id(f.source, f.text), f.source, f.kind,
                                   family or family_of(f.source, f.file, f.function, f.text), f.text, f.call,
                                   detail=f.detail, sources=[f.source])
        message = grouped[key]
        if place not in message.places:
            message.places.append(place)
        if f.source not in message.sources:
            message.sources.append(f.source)
        if f.kind == "warning" and message.kind == "error":  # the same words raised in one place, warned in another
            message.kind = "error or warning"
    for entry in triage["curated"]:
        curated_message = grouped.get(" ".join(entry.get("text", "").split()))
        if curated_message is not None and curated_message.source == CURATED and entry.get("call"):
            curated_message.call = entry["call"]
    for override, kind in triage["cpp"].get("kinds", {}).items():
        for message in grouped.values():
            if message.id == override:
                message.kind = kind
    messages = sorted(grouped.values(), key=lambda m: (SOURCES.index(m.source), m.family, m.id))
    ids = Counter(m.id for m in messages)
    if any(n > 1 for n in ids.values()):  # the same first words and digest: cannot happen unless sha1 collides
        problems.append(f"ids used twice: {[i for i, n in ids.items() if n > 1]}")
    listed = {category: [{"text": text, "places": places} for text, places in sorted(texts.items())]
              for category, texts in sorted(left_out.items())}
    return messages, {"left_out": listed, "problems": problems}


# --- the data file ------------------------------------------------------------------------------------------

def build(site: Path | None = None, *, root: Path = ROOT) -> tuple[dict[str, Any], list[str]]:
    triage = load_triage(root / "docs" / "hook_messages.toml")
    messages, summary = extract(site, triage)
    status, problems = statuses(messages, triage, root=root)
    examples = load_examples(root)
    records = []
    for m in messages:
        record = m.as_json()
        record.update(status[m.id])
        if "test" in record and m.id in examples:  # what the trigger test printed (the test checks it)
            record["trigger_example"] = examples[m.id]
            record.setdefault("example", examples[m.id])
        records.append(record)
    problems += unshown_interpreter_texts(triage["curated"], records)
    data = {"about": "Every error and warning text about hooks in the pinned PyTorch and libraries, with its status. "
                     "Written by `python -m tools.messages.hook_messages --write`; do not edit (docs/hook_messages.toml holds "
                     "what is written by hand).",
            "versions": versions(), "left_out": summary["left_out"], "messages": records}
    return data, summary["problems"] + problems


def run_examples(root: Path = ROOT) -> dict[str, str]:
    """Run the trigger tests with the harness told to write what each one printed, and return id -> example."""
    with tempfile.TemporaryDirectory(prefix="hook-messages-") as folder:
        out = Path(folder) / "examples.jsonl"
        env = {**os.environ, "HOOKLAB_MESSAGE_EXAMPLES": str(out)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "tests/messages", "-q", "-p", "no:cacheprovider",
                               "-n0", "-k", "trigger", "--no-header"], cwd=root, env=env, timeout=900)
        if proc.returncode != 0:
            raise HookMessageError("some trigger tests failed: fix them first (their output is above)")
        examples = {}
        for line in out.read_text(encoding="utf-8").splitlines() if out.exists() else []:
            item = json.loads(line)
            examples[item["id"]] = item["example"]
    return dict(sorted(examples.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="re-extract and rewrite docs/hook_messages.json")
    group.add_argument("--examples", action="store_true",
                       help="run the trigger tests, store what each printed (docs/hook_message_examples.json), "
                            "then rewrite docs/hook_messages.json")
    group.add_argument("--report", action="store_true", help="coverage per source and the open messages")
    group.add_argument("--programs", action="store_true",
                       help="cut each triggered message's program and fix out of the trigger tests, run those that "
                            "changed, and write docs/programs/messages.json (tools/messages/programs.py; "
                            "python -m tools.messages.programs --fresh runs them all)")
    args = parser.parse_args(argv)
    if args.programs:
        from . import programs
        return programs.main([])
    try:
        # the committed data first: a damaged file is named at once, not after the extraction
        old = load(DATA) if DATA.is_file() and not args.write else {}
        if args.examples:
            EXAMPLES.write_text(json.dumps(run_examples(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            args.write = True
        data, problems = build()
    except HookMessageError as exc:
        print(exc, file=sys.stderr)
        return 1
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.write:
        DATA.write_text(dumps(data), encoding="utf-8")
        print(f"{DATA.relative_to(ROOT)}: {len(data['messages'])} messages")
        print(report(data))
        return 1 if problems else 0
    if args.report:
        print(report(data))
        for r in data["messages"]:
            if r["status"] == "open":
                print(f"open  {r['id']}  [{r['source']} / {r['family']}]  {r['text'][:110]!r}")
        return 0
    changes = difference(old, data)
    for line in changes:
        print(line)
    if not changes and not problems:
        print(f"{DATA.relative_to(ROOT)} is current: {len(data['messages'])} messages")
    return 1 if changes or problems else 0


if __name__ == "__main__":
    sys.exit(main())
