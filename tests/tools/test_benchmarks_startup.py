"""Smoke test of benchmarks/bench_startup.py: a one-round run measures a new interpreter per checkout on this
checkout's hooklab and prints every step with its ratio to ``import torch`` and a verdict (never judging the times);
the ratios and verdicts are computed as the docstring says (checked on made-up times)."""
from __future__ import annotations

import re

import pytest

from benchmarks import bench_startup

pytestmark = pytest.mark.timeout(300)


def test_one_round_prints_every_step_with_its_ratio_and_verdict(capsys):
    assert bench_startup.main(["--rounds", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 rounds, a new interpreter per measurement") and "load average" in out[0]
    assert out[2] == str(bench_startup.ROOT)
    assert out[3].split() == ["step", "cpu", "ms", "wall", "ms", "x", "import", "torch", "(cpu)", "[min-max]", "target",
                              "verdict"]
    rows = out[4:]
    assert [row.split("  ")[0].strip() for row in rows] == list(bench_startup.STEPS)
    for row in rows:
        assert re.search(r"\d\.\d{4} \[\d\.\d{4}-\d\.\d{4}\]", row), row
        assert row.rstrip().endswith(("ok", "over", "within noise", "-")), row
    assert "1.5% of torch" in rows[1] and "1 s CPU" in rows[bench_startup.STEPS.index("first ask")]


def test_ratios_are_per_process_and_the_first_answer_is_judged_on_its_seconds():
    def run(torch_s, hooklab_s, ask_s):
        times = dict.fromkeys(bench_startup.STEPS, (0.01, 0.02))
        times.update({"import torch": (torch_s, 2 * torch_s), "import hooklab": (hooklab_s, hooklab_s),
                      "first ask": (ask_s, ask_s)})
        return times

    rows = {r[0]: r for r in bench_startup.rows([run(1.0, 0.01, 0.5), run(4.0, 0.04, 0.9), run(2.0, 0.02, 0.7)])}
    name, cpu_ms, wall_ms, ratio, target, judged = rows["import hooklab"]
    assert (ratio.median, ratio.low, ratio.high) == (0.01, 0.01, 0.01)  # a busy round slows both alike
    assert cpu_ms == pytest.approx(20) and target == bench_startup.IMPORT_TARGET and judged == "ok"
    assert rows["first ask"][5] == "ok" and rows["import torch"][3].median == 1.0
    over = bench_startup.rows([run(1.0, 0.03, 1.2), run(1.0, 0.03, 1.5)])
    assert [r[5] for r in over if r[4] is not None] == ["over", "over"]
    straddling = bench_startup.rows([run(1.0, 0.01, 0.8), run(1.0, 0.02, 1.3)])
    assert [r[5] for r in straddling if r[4] is not None] == ["within noise", "within noise"]
