"""Measure one library's profile in this process and print it as JSON: ``python -m tools.profiles.measure SLUG``.

The generator (:mod:`tools.profiles.generate`) runs this in a fresh process per library, in the project's environment
or, for a library pinned by ``requirement``, in that environment with the library installed beside it; a fresh
process keeps one library's global hooks, imports and compile caches away from the next one's.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import warnings
from typing import Any

import torch

from . import probe
from .libraries import modules


def version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def measure(slug: str) -> dict[str, Any]:
    """The measured part of ``slug``'s profile: the library's version, the torch it ran on, the probe's result and the
    profile's own facts."""
    found = modules()
    if slug not in found:
        raise SystemExit(f"no profile {slug!r}; the profiles are: {', '.join(found)}")
    setup = found[slug]
    library = setup.LIBRARY
    if library.status != "measured":
        raise SystemExit(f"{slug} is read from its source, not measured (why: {library.why_source['en']})")
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        distribution = (library.requirement or library.name).split("==")[0].split("[")[0]
        out: dict[str, Any] = {"version": version(distribution), "torch": torch.__version__.split("+")[0]}
        if hasattr(setup, "build"):
            out["probe"] = probe.measure(setup)
        if hasattr(setup, "facts"):
            torch.manual_seed(0)
            out["facts"] = setup.facts()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profiles.measure", description=__doc__.split("\n")[0])
    parser.add_argument("slug")
    args = parser.parse_args(argv)
    json.dump(measure(args.slug), sys.stdout, ensure_ascii=False, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
