"""``python -m tools.gate``: the gate's maintenance commands.

    python -m tools.gate plan [--all | --touched]   what ./course test would run now, check by check
    python -m tools.gate measure    run every check once in its push form (./course test --every), then `costs`
    python -m tools.gate costs [FILE]   each check's worker-seconds from a run (build/gate/last-run.json) into
                                    tests/gate/costs.json, and the table of docs/maintainers/tests.md
    python -m tools.gate table      the table of docs/maintainers/tests.md again, from tests/gate/costs.json
    python -m tools.gate run ...    ./course test's own entry (tools/gate/command.py)
"""
from __future__ import annotations

import subprocess
import sys

from tools.gate import costs as costing, plan as planning
from tools.gate.checks import ROOT


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        from tools.gate import command as run

        return run.main(rest)
    if command == "plan":
        mode = "all" if "--all" in rest else "touched" if "--touched" in rest else "push"
        plan = planning.make(mode)
        print(plan.header())
        try:
            for check, tier in sorted(plan.tiers.items(), key=lambda kv: (kv[1], kv[0])):
                print(f"{tier:<10} {plan.costs.get(check, planning.UNKNOWN_S):8.1f}  {check}")
        except BrokenPipeError:  # | head
            sys.stderr.close()
        return 0
    if command == "measure":
        done = subprocess.run([str(ROOT / "course"), "test", "--every", *rest], cwd=ROOT)
        if done.returncode not in (0, 1):  # 1: some test failed; its check's time is still its cost
            return done.returncode
        return costing.main([])
    if command == "costs":
        return costing.main(rest)
    if command == "table":
        costing.write_table()
        print(f"{costing.TABLE_FILE.relative_to(ROOT)}: the table written again from tests/gate/costs.json")
        return 0
    print(f"python -m tools.gate: unknown command {command!r} (try: plan, measure, costs, table, run)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
