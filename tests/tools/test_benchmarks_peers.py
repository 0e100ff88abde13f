"""benchmarks/bench_peers.py is not run here (it needs nnsight and TransformerLens, kept out of uv.lock). What is
checked: they stay out of the lock, and the script refuses, with the commands that make its side environment, when
the peers are missing or the environment's torch / transformers are not the project's."""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from benchmarks import bench_peers

ROOT = Path(__file__).resolve().parents[2]


def test_the_peers_are_not_in_the_lock_and_the_lock_pins_are_read():
    names = set(re.findall(r'^name = "([^"]+)"', (ROOT / "uv.lock").read_text(encoding="utf-8"), re.M))
    assert not names & {"nnsight", "transformer-lens"}
    locked = bench_peers.locked_versions("torch", "transformers")
    assert set(locked) == {"torch", "transformers"}
    assert importlib.metadata.version("torch").split("+")[0] == locked["torch"]  # the project's own environment


def test_without_the_peers_it_refuses_with_the_commands_that_make_the_side_environment(monkeypatch):
    real = importlib.metadata.version

    def version(name: str) -> str:
        if name in bench_peers.PEERS:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(SystemExit) as exited:
        bench_peers.check_environment()
    message = str(exited.value.code)
    assert "kept out of uv.lock" in message and "nnsight is not installed" in message
    assert "uv pip install --python build/peers/bin/python -c build/peers-constraints.txt" in message
    assert "nnsight==0.8.1 transformer-lens==4.3.0" in message


def test_an_environment_with_another_torch_is_refused(monkeypatch):
    real = importlib.metadata.version

    def version(name: str) -> str:
        return {"nnsight": "0.8.1", "transformer-lens": "4.3.0", "torch": "2.13.0"}.get(name) or real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(SystemExit) as exited:
        bench_peers.check_environment()
    assert "compares the tools on the project's torch" in str(exited.value.code)
    assert "this environment has torch 2.13.0" in str(exited.value.code)
