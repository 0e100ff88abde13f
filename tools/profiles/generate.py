"""hooklab/course/assets/profiles/library_profiles.json (``course.profile`` reads it): what each library does to a model's hooks, measured by running it.

``python -m tools.profiles [--only SLUG ...] [--write | --check] [--with LIB==X]``

Each measured library runs in a fresh process (:mod:`tools.profiles.measure`): in the project's environment when the
lock has it, else in that environment with the profile's pinned ``requirement`` installed beside it (``uv run
--with``, cached by uv; the pinned torch stays). A source-only profile is copied from its module. ``--check``
measures again and prints what differs from the committed file (exit 1 if anything does); ``--with LIB==X``
measures the profiles of library LIB with version X installed beside the environment and prints what that release
changes against the committed profile (``./course profiles --with LIB==X``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from .libraries import modules

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "hooklab" / "course" / "assets" / "profiles" / "library_profiles.json"
UV = ROOT / ".tools" / "bin" / "uv"
ABOUT = ("What libraries do to a model's hooks, measured by running each one on a CPU (python -m tools.profiles); "
         "a profile with status 'source' is read from the library's source at the pinned links.")
MEASURED = ("version", "torch", "probe", "facts")


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
           "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    env.setdefault("UV_PYTHON", sys.executable)
    return env


def uv() -> str:
    found = str(UV) if UV.exists() else shutil.which("uv")
    if not found:
        raise SystemExit("uv is needed to measure a library that is not in the lock: ./course installs it in .tools/")
    return found


def command(slug: str, requirement: str | None) -> list[str]:
    """How to run :mod:`tools.profiles.measure` for ``slug``: in this environment, or with ``requirement`` beside it."""
    if requirement is None:
        return [sys.executable, "-m", "tools.profiles.measure", slug]
    return [uv(), "run", "--no-sync", "--frozen", "--quiet", "--with", requirement, "python", "-m",
            "tools.profiles.measure", slug]


def run_one(slug: str, requirement: str | None, *, timeout: float = 900) -> dict[str, Any]:
    """The measured part of one profile, from a fresh process; a failure raises with the process's last words."""
    try:
        done = subprocess.run(command(slug, requirement), cwd=ROOT, env=_env(), capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"measuring {slug} did not finish in {timeout:.0f} s (a library that hangs on import or "
                           "on its entry point?)") from exc
    if done.returncode != 0:
        raise RuntimeError(f"measuring {slug} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def profile(module: Any, measured: dict[str, Any] | None) -> dict[str, Any]:
    return {**module.LIBRARY.to_json(), "measured": measured}


def load(path: Path = PROFILES) -> dict[str, Any]:
    if not path.exists():
        raise SystemExit(f"{path.relative_to(ROOT)} is missing: python -m tools.profiles --write")
    return json.loads(path.read_text(encoding="utf-8"))


def build(slugs: list[str] | None = None, *, previous: dict[str, Any] | None = None,
          requirement_for: dict[str, str] | None = None) -> dict[str, Any]:
    """The profiles file with ``slugs`` (all by default) measured again and the others kept from ``previous``."""
    found = modules()
    unknown = set(slugs or ()) - set(found)
    if unknown:
        raise SystemExit(f"no profile for {', '.join(sorted(unknown))}; the profiles are: {', '.join(found)}")
    old = (previous or {}).get("libraries", {})
    libraries = {}
    for slug, module in found.items():
        library = module.LIBRARY
        if library.status == "source":
            libraries[slug] = profile(module, None)
        elif slugs is None or slug in slugs:
            requirement = (requirement_for or {}).get(slug, library.requirement)
            print(f"measuring {slug} ({requirement or 'project environment'})", file=sys.stderr, flush=True)
            libraries[slug] = profile(module, run_one(slug, requirement))
        else:
            libraries[slug] = profile(module, old.get(slug, {}).get("measured"))
    import torch
    return {"about": ABOUT, "torch": torch.__version__.split("+")[0], "libraries": libraries}


def differences(old: dict[str, Any], new: dict[str, Any], slugs: list[str]) -> list[str]:
    """What a fresh measurement of ``slugs`` changes in the measured part, one line per field."""
    lines = []
    for slug in slugs:
        was = (old.get("libraries", {}).get(slug) or {}).get("measured") or {}
        now = (new.get("libraries", {}).get(slug) or {}).get("measured") or {}
        lines += [f"{slug}: {line}" for line in _diff(was, now, "")]
    return lines


def _diff(was: Any, now: Any, where: str) -> list[str]:
    if isinstance(was, dict) and isinstance(now, dict):
        return [line for key in sorted(set(was) | set(now)) if key != "version"
                for line in _diff(was.get(key), now.get(key), f"{where}.{key}" if where else key)]
    return [] if was == now else [f"{where}: {json.dumps(was, ensure_ascii=False)} -> "
                                  f"{json.dumps(now, ensure_ascii=False)}"]


def write(doc: dict[str, Any], path: Path = PROFILES) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def _key(name: str) -> str:
    """A name as compared: any case, ``-`` / ``_`` / spaces alike (as ``hooklab.course.profile`` compares them)."""
    return re.sub(r"[-_\s]+", "", name.strip().casefold())


def known_slugs(given: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--only``'s names as the profiles' slugs: a slug, or the library's name, in any case and with ``-`` / ``_``
    alike (``ACCELERATE``, ``torch-geometric``); an unknown or empty one is a usage error that lists the slugs."""
    found = modules()
    by_key: dict[str, str] = {}
    for slug, module in found.items():
        for name in (slug, module.LIBRARY.name, (module.LIBRARY.requirement or "").split("==")[0]):
            if name:
                by_key.setdefault(_key(name), slug)
    slugs, unknown = [], []
    for name in given:
        slug = by_key.get(_key(name)) if name.strip() else None
        (slugs if slug else unknown).append(slug or name)
    if unknown:
        parser.error(f"--only: no profile for {', '.join(map(repr, unknown))}; the profiles are: {', '.join(found)}")
    return list(dict.fromkeys(slugs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profiles", description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="SLUG", help="measure only these profiles")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {PROFILES.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help="measure again and compare with the committed file")
    parser.add_argument("--with", dest="release", metavar="LIB==X",
                        help="measure library LIB's profiles with release X installed beside the environment")
    args = parser.parse_args(argv)
    slugs, requirement_for = (known_slugs(args.only, parser) if args.only is not None else None), None
    committed = load() if PROFILES.exists() else {}
    if args.release is not None:
        lib, sep, release = args.release.partition("==")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", lib.strip()) or not re.fullmatch(
                r"[0-9][A-Za-z0-9.+!-]*", release.strip()):
            raise SystemExit(f"--with {args.release!r} is not LIB==X (for example transformers==5.30.0)")
        lib = lib.strip()
        matches = [slug for slug, m in modules().items()
                   if lib.lower() in (m.LIBRARY.name.lower(), (m.LIBRARY.requirement or "").split("==")[0].lower())
                   and m.LIBRARY.status == "measured"]
        if not matches:
            raise SystemExit(f"no measured profile of {lib!r}: python -m tools.profiles --help lists them")
        slugs, requirement_for = matches, {slug: args.release for slug in matches}
    doc = build(slugs, previous=committed, requirement_for=requirement_for)
    if args.write and not args.release:
        write(doc)
        print(f"wrote {PROFILES.relative_to(ROOT)}: {len(doc['libraries'])} profiles")
        return 0
    changed = differences(committed, doc, slugs or list(doc["libraries"]))
    if args.release:
        print(f"{args.release} against the committed profiles: " + ("no change" if not changed else
                                                                   f"{len(changed)} changes"))
    print("\n".join(changed) if changed else "the profiles match the committed file")
    return 1 if changed and args.check else 0
