"""Smoke test of benchmarks/bench_memory.py: the quick mode runs both models and prints every row, target, plan
and budget verdict in its form (never judging the timings), and leaves no file behind."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision",
                    reason="the benchmark runs torchvision's ResNet-18, and torchvision is not installed")

ROOT = Path(__file__).resolve().parents[2]
SPREAD = r"[0-9.]+ \[[0-9.]+-[0-9.]+\]"
BUDGET = re.compile(
    rf"^budget 1/(2|4|10) \(([0-9.]+) MiB\): (?:plan ([kCsobi]+) (met|NOT met) \(([0-9.]+) MiB\), {SPREAD}x time; "
    rf"(?:x [\w@./]+, per round: {SPREAD}: (?:slower|faster|tie \(within the spread\))"
    rf"(?:; x [\w@./]+, per round: {SPREAD}: (?:slower|faster|tie \(within the spread\)))?|"
    r"no alternative meets it); alternatives that meet it, fastest first: .+|no plan; alternatives that meet it: .+)$")
NOTE = re.compile(r"^plan 1/(2|4|10): (?:([kCsobi]+); a second planner's measurement: ([kCsobi]+|none) "
                  r"\((the same|another plan: by the first measurement it adds [0-9.]+ ms where the first adds "
                  r"[0-9.]+ ms)\)|cannot be met: .+)$")
# per model: the cut model's blocks (the head is not planned) and its Sequential's length (checkpoint_sequential's
# segment counts run from 2 to it)
MODELS = {"resnet18 stem + layer1.0 + layer2.0 (--quick)": (3, 4), "GPT-2 from a config (2 layers": (3, 4)}


@pytest.mark.timeout(330)  # about 20 s of CPU (two cut models, the planner twice each, aot_eager traced 4 times each)
def test_quick_mode_prints_every_row_and_verdict_and_leaks_no_files(tmp_path):
    # SaveOnDisk's folders go to the temp dir: a private one, so that no other process's folders are counted
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-W", "error", "-m", "benchmarks.bench_memory", "--quick", "--compile"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("torch ") and "load average" in lines[0]
    starts = [i for i, line in enumerate(lines) if line.startswith("== ")]
    assert len(starts) == 2, result.stdout
    for start, end, (title, (blocks, length)) in zip(starts, [*starts[1:], len(lines)], MODELS.items(), strict=True):
        section = lines[start:end]
        assert title in section[0]
        header = next(i for i, line in enumerate(section) if line.startswith("variant"))
        assert section[header].split() == ["variant", "saved", "MiB", "x", "less", "peak", "MiB", "time", "x",
                                           "(cpu)", "wall", "x", "grad", "err"]
        assert "interleaved rounds" in section[header - 1] and "load average" in section[header - 1]
        rows = {}
        for line in section[header + 2:]:
            if not line.strip():
                break
            name, *cells = line.split()
            rows[name] = cells
        cannot = {f"plan_1/{m.group(1)}" for line in section if (m := NOTE.match(line)) and m.group(2) is None}
        expected = ["baseline", "ledger", "disk", "bf16", "int8", "checkpoint", "overlap",
                    *[f"seq_{n}" for n in range(2, length + 1)],
                    *[f"plan_1/{n}" for n in (2, 4, 10) if f"plan_1/{n}" not in cannot],
                    *[f"aot_eager@{b}" for b in ("1.00", "0.50", "0.25", "0.10")]]
        assert list(rows) == expected, section
        assert all(len(cells) == 7 for cells in rows.values())  # saved, x less, peak, time spread (2), wall, error
        assert rows["baseline"][1] == "1.00" and rows["baseline"][3:5] == ["1.00", "[1.00-1.00]"]
        assert rows["overlap"][0] == rows["baseline"][0]  # on the CPU the overlapped offload moves nothing
        assert all(rows[f"aot_eager@{b}"][2] == "-" for b in ("1.00", "0.50", "0.25", "0.10"))  # no peak: compiled
        compiled = [float(rows[f"aot_eager@{b}"][0]) for b in ("1.00", "0.50", "0.25", "0.10")]
        assert compiled == sorted(compiled, reverse=True), section  # a lower budget never keeps more
        for name in ("checkpoint", "bf16"):
            assert any(line.startswith(f"target {name}:") for line in section)
        assert any(line.startswith("target overlap: >= 10x less at <= 1.5x time: not measured (no GPU")
                   for line in section)
        notes = [m for line in section if (m := NOTE.match(line))]
        assert [m.group(1) for m in notes] == ["2", "4", "10"], section
        verdicts = [m for line in section if (m := BUDGET.match(line))]
        assert [m.group(1) for m in verdicts] == ["2", "4", "10"], section
        for m, note in zip(verdicts, notes, strict=True):
            if m.group(3) is None:
                continue
            assert m.group(3) == note.group(2) and len(m.group(3)) == blocks  # one code per block, as noted
            assert m.group(4) == "met" and float(m.group(5)) <= float(m.group(2)) + 0.005, m.group(0)
    assert lines[-1].startswith("GPU save_on_cpu")
    if "skipped" in lines[-1]:  # the course runs tests with CUDA hidden; the GPU part must then say it skipped
        assert "no GPU" in lines[-1]
    assert list(tmp_path.glob("hooklab-saved-*")) == []  # the disk variants removed their private directories


# The argument checks run in this process (main(argv), as argparse exits): a subprocess per check cost an import of
# torch and torchvision each, about 5 s of CPU.
@pytest.mark.parametrize("argv, message", [(["--rounds", "0"], "--rounds must be a positive integer"),
                                           (["--device", "tpu"], "--device must be cpu or cuda")])
def test_bad_arguments_are_rejected(argv, message, capsys):
    from benchmarks import bench_memory
    with pytest.raises(SystemExit) as exited:
        bench_memory.main(["--quick", *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_device_cuda_is_refused_clearly_without_a_gpu(capsys, monkeypatch):
    import torch

    from benchmarks import bench_memory
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as with CUDA_VISIBLE_DEVICES="" (./course test)
    with pytest.raises(SystemExit) as exited:
        bench_memory.main(["--quick", "--device", "cuda"])
    assert exited.value.code == 2 and "no GPU is visible here" in capsys.readouterr().err


def test_the_graph_walk_counts_what_memory_meter_counts_on_an_eager_step():
    """Compiled variants are measured by walking the autograd graph; on an eager step it agrees with MemoryMeter."""
    import torch

    import hooklab
    from benchmarks import bench_memory
    setup = bench_memory.resnet_setup(quick=True, device="cpu")
    model = setup.model
    ignore = [*model.parameters(), *model.buffers(), setup.x, setup.target]
    with hooklab.MemoryMeter(ignore=ignore) as meter:
        loss = setup.loss(model(setup.x))
        held = meter.mark() - loss.numel() * loss.element_size()
    walked = bench_memory.graph_saved_bytes(loss, {t.untyped_storage().data_ptr() for t in ignore})
    assert walked == held > 0
    del loss
    assert isinstance(torch.get_num_threads(), int)
