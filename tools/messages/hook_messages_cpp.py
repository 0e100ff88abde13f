"""Reading the messages of the C++ libraries: the printable strings of their ``.rodata`` that say "hook" and look
like a sentence, with the corrections and joined messages of the triage's ``[cpp]`` table."""
from __future__ import annotations

import functools
import mmap
import re
import struct
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .hook_messages_data import TORCH_CPP
from .hook_messages_python import HOOK, SAVED, Found

CPP_LIBRARIES = ("libtorch_cpu.so", "libtorch_python.so")
PRINTABLE = re.compile(rb"[\x20-\x7e\t\n]")
INTERNAL_ASSERT = re.compile(r"^(.*) INTERNAL ASSERT FAILED at \"(.*?)\":(\d+), please report a bug to PyTorch\.")


def _runs_with_hook(data: Any) -> Iterator[bytes]:
    """The printable runs of a binary that contain "hook" in any case, or speak of saved tensors or variables."""
    def printable(byte: int) -> bool:
        return 0x20 <= byte <= 0x7e or byte in (9, 10)

    seen = set()
    for pattern in (b"hook", b"Hook", b"HOOK", b"saved tensor", b"Saved tensor", b"saved_tensor", b"SavedTensor",
                    b"saved variable", b"saved_variable", b"SavedVariable"):
        i = data.find(pattern)
        while i != -1:
            start = i
            while start > 0 and printable(data[start - 1]):
                start -= 1
            end = i + len(pattern)
            while end < len(data) and printable(data[end]):
                end += 1
            if start not in seen:
                seen.add(start)
                yield bytes(data[start:end])
            i = data.find(pattern, end)


def looks_like_message(text: str) -> bool:
    """A C++ string that could be a message (a sentence), not a symbol, type or identifier.

    >>> [looks_like_message(s) for s in ("cannot register a hook on a variable", "N5torch8autograd6PyNodeE",
    ...                                  "post_acc_grad_hook", "void torch::autograd::f(const at::Tensor&)")]
    [True, False, False, False]
    """
    s = text.strip()
    if len(s.split()) < 3 or not re.search(r"[a-z]", s):
        return False
    if s.startswith(("_Z", "N5", "N3", ">>>", "#", "/")):
        return False
    return not ("::" in s and "(" in s and ("const" in s or "&" in s))


@functools.lru_cache(maxsize=4)
def constant_data(library: Path) -> bytes:
    """The bytes of a shared library where its string constants are: its ``.rodata`` sections when it is an ELF
    file (18 MB of libtorch_cpu's 450), else the whole file."""
    with open(library, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:5] != b"\x7fELF\x02" or data[5] != 1:  # not a 64-bit little-endian ELF file: read it all
            return bytes(data)
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names_at = sections[shstrndx][4]

        def name(offset: int) -> bytes:
            start = names_at + offset
            return bytes(data[start:data.find(b"\x00", start)])
        parts = [bytes(data[off:off + size]) for name_off, _, _, _, off, size in sections
                 if name(name_off) == b".rodata" or name(name_off).startswith(b".rodata.")]
        return b"\x00".join(parts) if parts else bytes(data)


def cpp_strings(library: Path) -> list[str]:
    """The strings of a shared library that say "hook" and look like a message (one entry per printable run,
    surrounding white space stripped)."""
    runs = {run.decode("ascii").strip() for run in _runs_with_hook(constant_data(library))}
    return sorted(r for r in runs if (HOOK.search(r) or SAVED.search(r)) and looks_like_message(r))


def cpp_contains(libraries: Iterable[Path], text: str) -> list[str]:
    """The names of the libraries whose string constants contain ``text``."""
    needle = text.encode()
    return [library.name for library in libraries if constant_data(library).find(needle) != -1]


def cpp_messages(site: Path, cpp: dict[str, Any]) -> tuple[list[Found], list[str]]:
    """The C++ messages: the strings that say "hook", less those ``cpp`` (the triage's ``[cpp]`` table) calls no
    message (``not_messages``: prefixes), with its ``corrected`` starts (a string read with a neighbour's bytes in
    front of it) and its ``joined`` messages (one message that TORCH_CHECK builds from several strings: the pieces
    give way to the message as printed, ``{}`` where the variable parts go). Also the problems: a piece, correction
    or prefix that no longer matches anything."""
    found, problems = [], []
    not_messages = cpp.get("not_messages", [])
    corrected = cpp.get("corrected", {})
    joined = cpp.get("joined", [])
    pieces = {piece for entry in joined for piece in entry.get("pieces", [])}
    strings: dict[str, list[str]] = defaultdict(list)
    for name in CPP_LIBRARIES:
        for text in cpp_strings(site / "torch" / "lib" / name):
            strings[text].append(name)
    used_prefixes, used_corrections = set(), set()
    for text in sorted(strings):
        prefix = next((p for p in not_messages if text.startswith(p)), None)
        if prefix is not None:
            used_prefixes.add(prefix)
            continue
        if text in corrected:
            used_corrections.add(text)
            if corrected[text] not in text:
                problems.append(f"[cpp.corrected]: {corrected[text]!r} is not part of {text!r}")
            text_shown = corrected[text]
        else:
            text_shown = text
        if text_shown in pieces:
            continue
        call = "TORCH_INTERNAL_ASSERT" if INTERNAL_ASSERT.match(text_shown.split("\n")[0]) else "C++ string"
        for name in strings[text]:
            found.append(Found(TORCH_CPP, name, 0, "", call, "error", text_shown))
    libraries = [site / "torch" / "lib" / name for name in CPP_LIBRARIES]
    for entry in joined:
        if not entry.get("pieces") or not entry.get("text"):
            problems.append(f"[[cpp.joined]] entry without pieces or text: {entry}")
            continue
        for piece in entry["pieces"]:
            if not cpp_contains(libraries, piece):
                problems.append(f"[[cpp.joined]] {entry['text'][:60]!r}: the piece {piece!r} is in no library")
        for name in cpp_contains(libraries, entry["pieces"][0]):
            found.append(Found(TORCH_CPP, name, 0, "", entry.get("call", "TORCH_CHECK"), entry.get("kind", "error"),
                               entry["text"]))
    problems += [f"[cpp] not_messages: {p!r} matches no string (remove it)" for p in not_messages
                 if p not in used_prefixes]
    problems += [f"[cpp.corrected]: {t!r} matches no string (remove it)" for t in corrected
                 if t not in used_corrections]
    return found, problems

