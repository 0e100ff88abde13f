"""Smoke test of benchmarks/bench_memory.py: the quick mode runs the four models and prints every row, decision,
budget verdict and the README's table in their form (never judging the timings), and leaves no file behind."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision", reason="the benchmark runs torchvision's ResNet-50, and torchvision is not installed")
pytest.importorskip("timm", reason="the benchmark runs timm's ViT, and timm is not installed")
pytest.importorskip("diffusers", reason="the benchmark runs a diffusers UNet, and diffusers is not installed")

ROOT = Path(__file__).resolve().parents[2]
SPREAD = r"[0-9.]+ \[[0-9.]+-[0-9.]+\]"
VERDICT = r"(?:slower|faster|tie \(within the (?:A/A )?spread\))"
NAME = r"(?:seq_\d+|plan_[kCsobi]+|aot_eager@[0-9.]+|baseline|disk|bf16|int8|checkpoint)"
DECIDE = re.compile(rf"^decide 1/(2|4|10) \([0-9.]+ MiB\): ({NAME}) = .+: .+; measuring [0-9.]+ s CPU \([0-9.]+ s wall, "
                    r"bound [0-9]+ s\), [0-9]+ rounds, [0-9]+ candidates timed$")
BUDGET = re.compile(
    rf"^budget 1/(2|4|10) \(([0-9.]+) MiB\): decided ({NAME}) (met|NOT met) \(([0-9.]+) MiB\), {SPREAD}x time; "
    rf"(?:x {NAME}, per round: {SPREAD}: {VERDICT}|no other variant meets it); the time model's own pick "
    rf"(?:-|{NAME}: {SPREAD} \({VERDICT}\)); measuring [0-9]+ s; variants that meet it, fastest first: .+$")
ORDER = ("vit", "resnet50", "unet", "gpt2")
# per model: the blocks the planner plans for, and the Sequential's length (checkpoint_sequential's counts: 2 to it)
MODELS = {"ViT 2 blocks": 4, "resnet50 stem + layer1.0 (--quick)": 3, "diffusers UNet2DModel": None,
          "GPT-2 from a config (2 layers": 4}


@pytest.mark.timeout(600)  # about a minute of CPU: four tiny models, three decisions each, aot_eager compiles
def test_quick_mode_prints_every_row_decision_and_verdict_and_leaks_no_files(tmp_path):
    # SaveOnDisk's folders go to the temp dir: a private one, so that no other process's folders are counted
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-W", "error", "-m", "benchmarks.bench_memory", "--quick"],
                            capture_output=True, text=True, timeout=580, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("torch ") and "load average" in lines[0] and "compile backends: aot_eager" in lines[0]
    starts = [i for i, line in enumerate(lines) if line.startswith("== ")]
    table = next(i for i, line in enumerate(lines) if line.startswith("| model |"))  # the whole table, at the end
    assert len(starts) == 4, result.stdout
    for start, end, (title, length), name in zip(starts, [*starts[1:], table], MODELS.items(), ORDER, strict=True):
        section = lines[start:end]
        done = next(i for i, line in enumerate(section) if line.startswith(f"{name}'s rows of the table: "))
        assert [row.split(" | ")[:2] for row in section[done + 1:done + 4]] == [
            [f"| {name}", budget] for budget in ("1/2", "1/4", "1/10")]
        assert title in section[0]
        assert section[1].startswith("planner: ") and "MiB held after forward without a plan" in section[1]
        decisions = [m for line in section if (m := DECIDE.match(line))]
        assert [m.group(1) for m in decisions] == ["2", "4", "10"], section
        header = next(i for i, line in enumerate(section) if line.startswith("variant"))
        assert section[header].split() == ["variant", "held", "MiB", "x", "less", "peak", "MiB", "time", "x",
                                           "(cpu)", "wall", "x", "grad", "err"]
        assert "interleaved rounds" in section[header - 1] and "load average" in section[header - 1]
        rows = {}
        for line in section[header + 2:]:
            if not line.strip():
                break
            name, *cells = line.split()
            rows[name] = cells
        assert [n for n in rows if n != "baseline_again"][:5] == ["baseline", "disk", "bf16", "int8", "checkpoint"]
        assert "baseline_again" in rows and rows["baseline_again"][0] == rows["baseline"][0]  # the same steps
        assert any(re.match(r"^the run's own spread \(A/A: .+\): [0-9.]+%; ", line) for line in section), section
        assert all(len(cells) == 7 for cells in rows.values())  # held, x less, peak, time spread (2), wall, error
        assert rows["baseline"][1] == "1.00" and rows["baseline"][3:5] == ["1.00", "[1.00-1.00]"]
        held = {name: float(cells[0]) for name, cells in rows.items()}
        assert all(rows[n][2] == "-" for n in rows if n.startswith("aot_eager@"))  # no peak: compiled
        if length is None:
            assert not any(n.startswith("seq_") for n in rows)
            assert any("checkpoint_sequential: not offered: the model is a UNet2DModel" in line for line in section)
        else:
            by_count = next(line for line in section if line.startswith("checkpoint_sequential, MiB held"))
            assert [int(c.split(":")[0]) for c in by_count.split(": ", 1)[1].split(", ")] == list(range(2, length + 1))
        for name in ("decide", "budget"):
            assert any(line.startswith(name) for line in section)
        verdicts = [m for line in section if (m := BUDGET.match(line))]
        assert [m.group(1) for m in verdicts] == ["2", "4", "10"], section
        for m, d in zip(verdicts, decisions, strict=True):
            assert m.group(3) == d.group(2)  # the benchmark times what the decision chose
            assert m.group(4) == "met" and float(m.group(5)) <= float(m.group(2)) + 0.005, m.group(0)
            assert m.group(3) in rows and held[m.group(3)] == float(m.group(5))
        assert any(line.startswith("target overlap: >= 10x less at <= 1.5x time: not measured (no GPU")
                   for line in section)
    assert lines[table + 1].startswith("|---|")
    assert [line.split(" | ")[:2] for line in lines[table + 2:table + 14]] == [
        [f"| {model}", budget] for model in ORDER for budget in ("1/2", "1/4", "1/10")]
    assert lines[-2].startswith("GPU save_on_cpu")
    if "skipped" in lines[-2]:  # the course runs tests with CUDA hidden; the GPU part must then say it skipped
        assert "no GPU" in lines[-2]
    assert re.match(r"^benchmark: [0-9]+ s wall, [0-9]+ s CPU; load average", lines[-1])
    assert list(tmp_path.glob("hooklab-saved-*")) == []  # the disk variants removed their private directories


def test_a_verdict_needs_every_round_and_more_than_the_runs_own_spread():
    from benchmarks.bench_memory import Variant, compare
    chosen, other = Variant("a", lambda: None), Variant("b", lambda: None)
    other.times = [1.0, 1.0, 1.0, 1.0, 1.0]
    for times, spread, verdict in [([1.03, 1.01, 1.05, 1.02, 1.04], 0.02, "slower"),       # every round, 3 % > 2 %
                                   ([1.03, 1.01, 1.05, 1.02, 1.04], 0.04, "tie (within the A/A spread)"),
                                   ([1.03, 0.99, 1.05, 1.02, 1.04], 0.0, "tie (within the spread)"),
                                   ([0.90, 0.95, 0.92, 0.91, 0.93], 0.02, "faster")]:
        chosen.times = times
        per_round, said = compare(chosen, other, spread)
        assert said == verdict and per_round.low == min(times) and per_round.high == max(times)


def test_the_whole_step_offloaded_is_timed_as_the_disk_variant_only_where_it_is_the_same_offload():
    import torch
    from torch import nn

    import hooklab
    from benchmarks.bench_memory import MIN_BYTES, variant_name
    from hooklab.planner import Candidate
    model = nn.Sequential(nn.Linear(4, 4))

    def name(device: str, min_bytes: int) -> str:
        option = hooklab.OffloadStep(model, [], torch.device("cpu"), min_bytes)
        option.device = torch.device(device)  # as made on a machine with that device (OffloadStep refuses "cuda" here)
        return variant_name(Candidate("offload the whole step", "plan", option))
    assert name("cpu", MIN_BYTES) == "disk"  # SaveOnDisk(min_bytes=MIN_BYTES, keep=[model, *keep]), as "disk" is
    assert name("cpu", MIN_BYTES * 2) == "offload_step" and name("cuda", MIN_BYTES) == "offload_step"


# The argument checks run in this process (main(argv), as argparse exits): a subprocess per check cost an import of
# torch and torchvision each, about 5 s of CPU.
@pytest.mark.parametrize("argv, message", [(["--rounds", "0"], "--rounds must be a positive integer"),
                                           (["--decide-rounds", "1"], "--decide-rounds must be at least 2"),
                                           (["--device", "tpu"], "--device must be cpu or cuda"),
                                           (["--model", "vit,bert"], "--model: unknown bert")])
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


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                    reason="needs a GPU: HOOKLAB_TEST_GPU=1 ./course test tests -m gpu on a machine with one")
@pytest.mark.timeout(900)
def test_the_gpu_rows_run_where_a_gpu_is(tmp_path):
    """The GPU rows (ResNet-152 is the full run; --quick cuts it): every row, decision and the overlap target's
    line, on the GPU's wall clock."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "benchmarks.bench_memory", "--quick", "--device", "cuda",
                             "--model", "resnet152"], capture_output=True, text=True, timeout=880, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "GPU" in lines[0]
    assert any(line.startswith("target overlap: >= 10x less at <= 1.5x time: ") and "not measured" not in line
               for line in lines)
    assert [m.group(1) for line in lines if (m := re.match(r"^decide 1/(2|4|10) ", line))] == ["2", "4", "10"]
    assert any(line.startswith("| resnet152 | 1/2 |") for line in lines)


def test_the_graph_walk_counts_what_memory_meter_counts_on_an_eager_step():
    """Compiled variants are measured by walking the autograd graph; on an eager step it agrees with MemoryMeter."""
    import hooklab
    from benchmarks import bench_memory
    from hooklab.planner.alternatives import graph_saved_bytes
    setup = bench_memory.resnet_setup(quick=True, device="cpu")
    model = setup.model
    ignore = [*model.parameters(), *model.buffers(), *setup.keep]
    with hooklab.MemoryMeter(ignore=ignore) as meter:
        loss = setup.forward()
        held = meter.mark() - loss.numel() * loss.element_size()
    walked = graph_saved_bytes(loss, {t.untyped_storage().data_ptr() for t in ignore})
    assert walked == held > 0
    del loss


def test_the_readme_table_has_the_benchmarks_columns():
    """The manual's planner table (docs/maintainers/benchmarks.md) is this script's output: the same header line."""
    from benchmarks import bench_memory
    readme = (ROOT / "docs" / "maintainers" / "benchmarks.md").read_text(encoding="utf-8")
    header = bench_memory.markdown([])[0]
    assert header in readme.splitlines()
