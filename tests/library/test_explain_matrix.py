"""hooklab.explain_hook checked against the hook behaviour matrix (docs/hook_matrix.json; issue 55, item 3).

The matrix records, for each hook family x context, whether the family's hook fires, how often and on what. For every
observed cell (and every observed shape of one) in which a hook the doctor can speak of does not fire, fires more than
once, or fires on something unexpected (on a copy, while tracing, exporting or capturing, or a cell the matrix marks
surprising), this test runs the cell's own probe (``hooklab.course.hook_matrix``: the context's function, its rig
and the family's install) with the step under ``explain_hook``. The context runs in a thread of its own: it builds the
rig, installs the hook and does whatever it does before its step (the first compiled call of ``compile-hook-after``,
``model.apply``, the copy), and at the first phase it names after installing it waits; ``explain_hook`` then starts
watching and lets it go on, under its profile function, to the end of the run.

Each cell is then checked: the setup is the matrix's (the hook fired as often as the cell records, counted by the
probe's own recorders); no crash (a report, or one attached to the step's exception); the cause is the one the matrix
records for that context (:data:`CAUSE_OF`: the doctor's cause and the words its reasons must say), it names the
step's error where there was one, and it never says the hooks "fired as expected"; where the doctor cannot tell
(:data:`UNSURE`), it says what it saw and what to check.

The families the doctor cannot speak of are :data:`EXCLUDED`, each with its reason, and a test asserts that they are
exactly those whose hook, installed by the eager cell's probe, ``explain_hook`` does not count. The cells of the DDP,
FSDP2, FSDP1 and tensor-parallel columns run inside two gloo worker processes, as the matrix observed them
(:func:`doctor_in_workers`), all in one test; the few that cannot be asked are :data:`EXCLUDED_CELLS`, each with its
reason. Every unusual cell runs, each a test (about half a minute in all on two busy cores);
``HOOKLAB_HOOK_MATRIX=all`` also runs the cells with no unusual record (the generic checks only).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from hooklab import _torch_internals as internals, explain_hook
from hooklab.course import hook_matrix as hm
from hooklab.course.hook_matrix import record
from hooklab.course.hook_matrix.contexts import cleanup
from hooklab.course.hook_matrix.observe import Harness

ROOT = Path(__file__).resolve().parents[2]
MATRIX = json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))

# the phases a context's own run goes through; a call in any other phase happened while tracing, exporting,
# capturing or registering
RUN_PHASES = {"forward", "backward", "second backward", "step", "transform"}
ON_PURPOSE = "the forward raised on purpose"  # the note of a cell whose probe raises in forward (always_call)
WAIT = 240.0  # seconds a cell's run may take, each half
# contexts whose run is on a copy of the hooked model (the matrix's "how": "... the copy runs")
ON_A_COPY = {"deepcopy", "pickle"}

EXCLUDED = {
    **dict.fromkeys(("tensor-hook", "node-pre-hook", "node-hook", "multi-grad-hook-all", "multi-grad-hook-any"),
                    "registered by code in forward on a tensor made there (or on its Node), anew in each call: "
                    "nothing of it is on the module or on its parameters, where explain_hook looks"),
    **dict.fromkeys(("saved-tensors-pack", "saved-tensors-unpack", "node-creation-hook"),
                    "a context manager around the step, for the whole thread: not on any module"),
    **dict.fromkeys(("global-forward-pre-hook", "global-forward-hook", "global-forward-hook-with-kwargs",
                     "global-full-backward-pre-hook", "global-full-backward-hook"),
                    "registered for every module of the process (torch.nn.modules.module's global dicts), not on "
                    "the module: explain_hook counts the module's calls, which is what a global hook sees of it, "
                    "but not the global hooks themselves"),
    **dict.fromkeys(("state-dict-pre-hook", "state-dict-post-hook", "load-state-dict-pre-hook",
                     "load-state-dict-post-hook"),
                    "run by state_dict() / load_state_dict(), not by a call of the module: explain_hook lists them "
                    "among the module's hooks, and counts forward and backward hooks only"),
    **dict.fromkeys(("optimizer-step-pre-hook", "optimizer-step-post-hook", "optimizer-state-dict-post-hook",
                     "optimizer-load-state-dict-pre-hook"), "registered on the optimizer, not on a module"),
    "parametrization": "not a hook: the parameter becomes a property computed on each read (explain_hook lists it "
                       "among the module's hooks, and does not count it)",
    **dict.fromkeys(("ddp-comm-hook", "fsdp2-all-reduce-hook"),
                    "registered on the DDP / FSDP2 wrapper, which exists only in worker processes with a process "
                    "group: its probe cannot be installed in this process"),
}
# cells of the distributed columns the doctor is not asked about, each with why
EXCLUDED_CELLS = {
    **dict.fromkeys(("param-hook@fsdp1", "post-accumulate-grad-hook@fsdp1"),
                    "registering the hook raises (FSDP1's weight is then a view of its flat parameter, and the matrix "
                    "records that error): no hook is on the module, and no step runs for explain_hook to watch"),
}
# the distributed columns run in two gloo worker processes (observe_distributed): their cells are asked of the doctor
# there (doctor_in_workers), the others in this process
WORKER_CONTEXTS = {c.id for c in hm.CONTEXTS if c.wrap}
WORKER_WAIT = 600.0  # seconds all the cells of the distributed columns may take, on two busy cores

# the matrix's cause of each context's unusual cells, as the doctor names it: context (or "context/shape") ->
# the kind of hook ("forward", "backward": module hooks; "parameter": hooks on its parameters; "*": any) ->
# (the causes it may give, the words its reasons must say)
RAN, GRAPH = {"ran"}, {"graph"}
CAUSE_OF: dict[str, dict[str, tuple[set[str], tuple[str, ...]]]] = {
    "autograd-grad": {"*": (RAN, ("torch.autograd.grad", "computes only"))},
    "backward-inputs": {"*": (RAN, ("backward(inputs=...)",))},
    "retain-graph": {"*": (RAN, ("backward passes",))},
    "double-backward": {"*": (RAN, ("backward passes",))},
    "double-backward/tanh-tail": {"*": (RAN, ("backward passes",))},
    "no-grad": {"*": (RAN, ("without gradients",))},
    "inference-mode": {"*": (RAN, ("without gradients",))},
    "inplace": {"*": (RAN, ())},   # the step's error (checked for every cell that raised)
    "view": {"*": (RAN, ())},
    "used-twice": {"forward": (RAN, ("called 2 times",)), "backward": (RAN, ("called 2 times",)),
                   "parameter": (RAN, ("once per backward pass",))},
    "unused-branch": {"*": (RAN, ("not part of the loss",))},
    "compile-hook-after": {"*": ({"compiled"}, ("hooks registered later do not run",))},
    "export": {"*": (GRAPH, ("FakeTensor",))},
    "precompile": {"forward": ({"compiled"}, ("precompiled",)), "backward": ({"compiled"}, ("no backward ran",)),
                   "parameter": ({"compiled"}, ("no backward ran",))},
    "jit-script": {"forward": ({"step raised"}, ("torch.jit",)), "backward": ({"scripted"}, ("TorchScript",))},
    "jit-trace": {"forward": ({"scripted"}, ("torch.jit.trace",)),
                  "backward": ({"ran", "step raised"}, ("torch.jit",))},
    "fx-root": {"*": (GRAPH, ("torch.fx",))},
    "fx-child": {"*": (GRAPH, ("torch.fx",))},
    "vmap": {"*": (RAN, ("torch.func.vmap",))},
    "func-grad": {"*": (RAN, ("torch.func",))},
    "checkpoint-reentrant": {"*": (RAN, ("checkpoint",))},
    "checkpoint": {"*": (RAN, ("checkpoint",))},
    "deepcopy": {"forward": ({"copy"}, ("copy",)), "backward": ({"copy"}, ("copy",)),
                 "parameter": ({"copy", "another model"}, ("do not survive copying",))},
    "pickle": {"forward": ({"copy"}, ("copy",)), "backward": ({"copy"}, ("copy",)),
               "parameter": ({"copy", "another model"}, ("do not survive copying",))},
    "apply": {"*": (RAN, ("paths",))},
    "forward-ad": {"*": (RAN, ("no backward ran",))},
    "export-strict": {"forward": (GRAPH, ("torch.export",)), "backward": ({"step raised"}, ("torch._dynamo",))},
    "jit-freeze": {"forward": ({"step raised"}, ("torch.jit",)), "backward": ({"scripted"}, ("TorchScript",)),
                   "parameter": ({"scripted"}, ("TorchScript",))},
    "functional-call": {"*": (RAN, ("functional_call",))},
    "quantization": {"forward": (RAN, ("called 2 times",)), "backward": (RAN, ("no backward ran",)),
                     "parameter": (RAN, ("no backward ran",))},
    "load-assign": {"*": (RAN, ("assign=True",))},
    "meta-to-empty": {"*": (RAN, ("to_empty()",))},
    "split-batch": {"*": (RAN, ("called 2 times",))},
    "grad-scaler": {"*": (RAN, ("GradScaler",))},
    # the distributed columns (asked in worker processes): the hooks on a sharded or replaced parameter, and what a
    # hook on a module computing with DTensors receives
    "fsdp2": {"*": (RAN, ("FSDP2", "DTensor"))},
    "fsdp1": {"*": (RAN, ("FSDP1", "FlatParameter"))},
    "tensor-parallel": {"*": (RAN, ("DTensor",))},
    "tensor-parallel/hooked-first": {"*": (RAN, ("tensor parallelism", "register hooks on the parameters after"))},
}
# causes the doctor gives where it cannot tell which of several things happened: it then says what to check
UNSURE = {"another model", "not observed", "profiler stopped"}


# ------------------------------------------------------------------------------------------------ the cells
@dataclass(frozen=True)
class Cell:
    family: str
    context: str
    shape: str            # "" for the cell's own run, else the id of one of the context's shapes
    record: dict          # what the matrix recorded for it (the cell, or the shape's entry)

    @property
    def key(self) -> str:
        return f"{self.family}@{self.context}" + (f"/{self.shape}" if self.shape else "")

    @property
    def run(self) -> Any:
        context = hm.CONTEXT_BY_ID[self.context]
        return next(s for s in context.shapes if s.id == self.shape) if self.shape else context


def unusual(cell: Cell) -> bool:
    """Whether the matrix records something unusual: no call, more than one, or a call on something unexpected."""
    rec = cell.record
    receives = " ".join(rec.get("receives", []))
    return (rec["calls"] != 1 or bool(set(rec["by_phase"]) - RUN_PHASES) or cell.context in ON_A_COPY
            or "Proxy" in receives or "FakeTensor" in receives or bool(rec.get("surprising")))


def cells(*, every: bool = False, workers: bool = False) -> list[Cell]:
    """The observed cells (and observed shapes) of the families the doctor speaks of; only the unusual ones unless
    ``every``; those of the distributed columns (run in worker processes) if ``workers``, else the others."""
    out = []
    for key, rec in MATRIX["cells"].items():
        family, context = key.split("@")
        if rec["status"] != "observed" or family in EXCLUDED or (context in WORKER_CONTEXTS) != workers:
            continue
        found = [Cell(family, context, "", rec)]
        found += [Cell(family, context, s["shape"], s) for s in rec.get("shapes", []) if "calls" in s]
        out += [c for c in found if every or unusual(c)]
    return out


# ------------------------------------------------------------------------------------------------ the runs
class DoctorHarness(Harness):
    """The matrix's harness, its context run in a thread of its own that pauses at the step: the context's function
    builds the rig and installs the family's hook as it always does, and at the first phase it names after that,
    the thread waits until explain_hook watches, then goes on under explain_hook's profile function (as a thread
    started during the step would)."""

    def __init__(self, family: Any, pause_on: int = 0, wrap: str = "") -> None:
        super().__init__(family, wrap=wrap)
        self.pause_on = pause_on  # the rig whose install starts the step (a context may build a reference rig first)
        self.installed = self.reached = self.rebuilt = False
        self.paused, self.go, self.done, self.closing, self.closed = (threading.Event() for _ in range(5))
        self.error: BaseException | None = None

    def rig(self, **options: Any) -> Any:
        self.rebuilt |= self.reached  # a rig built during the step: the step began too early
        return super().rig(**options)

    def install(self, rig: Any, module: Any = None) -> None:
        super().install(rig, module)
        self.installed |= len(self.rigs) > self.pause_on

    def phase(self, name: str) -> None:
        super().phase(name)
        if self.installed and not self.reached:
            self.reached = True
            self.paused.set()
            if not self.go.wait(WAIT):
                raise TimeoutError("explain_hook did not start")
            sys.setprofile(threading.getprofile())  # explain_hook's profile function, for the rest of the run

    def start(self, run: Any) -> None:
        """Run ``run`` (a Context or a Shape) up to its step, in a thread of its own."""
        def body() -> None:
            try:
                run.run(self)
            except BaseException as exc:  # noqa: BLE001 - given to the step (explain_hook sees it raise)
                self.error = exc
            finally:
                sys.setprofile(None)
                self.paused.set()
                self.done.set()
                self.closing.wait(WAIT)  # the hooks stay while explain_hook looks at the module, then go
                self.close()  # in this thread: what the probe entered here (saved-tensor hooks) is thread-local
                self.closed.set()
        threading.Thread(target=body, name="matrix-cell", daemon=True).start()
        self.paused.wait(WAIT)

    def step(self) -> None:
        """The rest of the run, the step: what explain_hook watches."""
        self.go.set()
        if not self.done.wait(WAIT):
            raise TimeoutError("the matrix's run did not end")
        if self.error is not None:
            raise self.error


def _recorder_key(fn: Any) -> str | None:
    """The family of a probe's hook: a Recorder, or a plain function calling one (the jit-script context)."""
    if isinstance(fn, record.Recorder):
        return fn.key
    for cell in getattr(fn, "__closure__", None) or ():
        if isinstance(cell.cell_contents, record.Recorder):
            return cell.cell_contents.key
    return None


def holder(net: torch.nn.Module, family: str) -> tuple[str, str] | None:
    """``(module name, kind)`` of the module that holds the family's hook (kind: "forward" or "backward" for a
    module hook, "parameter" for a hook on one of its parameters, "other" for another kind of module hook)."""
    for name, m in net.named_modules():
        for _attr, kind, hooks in internals.module_hook_dicts(m):
            if any(_recorder_key(fn) == family for fn in hooks.values()):
                return name, {"forward_pre": "forward", "forward": "forward", "backward_pre": "backward",
                              "backward": "backward"}.get(kind, "other")
        for p in m.parameters(recurse=False):
            for _kind, hooks in internals.tensor_hook_dicts(p):
                if any(_recorder_key(fn) == family for fn in hooks.values()):
                    return name, "parameter"
    return None


@dataclass
class Verdict:
    name: str | None          # the module asked about
    kind: str                 # forward / backward / parameter / other
    fired: int                # how often the family's hook fired in the step pass (the probe's count)
    report: Any               # the HookExplanation (None: explain_hook crashed, or nothing held the hook)
    raised: str | None        # the step's exception, "Type: message"
    crash: str | None = None  # explain_hook's own error


def explain_cell(family_id: str, run: Any, pause_on: int = 0, wrap: str = "") -> Verdict:
    """Run ``run`` (a Context or a Shape) for ``family_id`` up to its step, then its step under explain_hook; a run
    that builds a rig during the step (a reference rig first, then the cell's) is run again, its step beginning at
    the last rig's install. ``wrap``: the distributed wrapper of the cell's context (in worker processes)."""
    h = DoctorHarness(hm.FAMILY_BY_ID[family_id], pause_on, wrap)
    record.LOG.clear()
    record.set_phase("run")
    name = kind = raised = crash = None
    report, fired = None, 0
    quiet = contextlib.ExitStack()
    quiet.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))  # FX prints a traceback of its own
    quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
    with quiet:
        try:
            h.start(run)
            net = h.rigs[-1].net if h.rigs and h.installed else None
            found = holder(net, family_id) if net is not None else None
            if found is None or not h.reached:  # not set up here (a wrapper family), or no step after installing
                return Verdict(None, "other", 0, None, None)
            name, kind = found
            try:
                report = explain_hook(net, name, run=h.step)
            except Exception as exc:  # noqa: BLE001 - the step's own error carries the explanation
                report = getattr(exc, "hooklab_explanation", None)
                if report is None:
                    crash = f"{type(exc).__name__}: {exc}"
                raised = f"{type(exc).__name__}: {exc}"
            fired = sum(1 for key, _phase, _args in record.LOG if key == family_id)
        finally:
            h.go.set()
            h.closing.set()
            h.closed.wait(WAIT)
            cleanup()
            record.LOG.clear()
            record.set_phase("run")
    if h.rebuilt:
        return explain_cell(family_id, run, len(h.rigs) - 1, wrap)
    return Verdict(name, kind, fired, report, raised, crash)


def _doctor_cells(rank: int, world_size: int, keys: list[str]) -> dict[str, dict[str, Any]]:
    """In each worker process: every cell of ``keys`` (of the distributed columns) under explain_hook, as
    :func:`explain_cell` runs them here; per key, what is wrong with the doctor's answer and what it said."""
    torch.manual_seed(0)
    by_key = {c.key: c for c in cells(every=True, workers=True)}
    out = {}
    for key in keys:
        cell = by_key[key]
        v = explain_cell(cell.family, cell.run, wrap=hm.CONTEXT_BY_ID[cell.context].wrap)
        out[key] = {"problems": problems(cell, v), "said": describe(v)}
    return out


MARK = "doctor-in-workers: "


def doctor_in_workers(keys: list[str]) -> dict[str, dict[str, Any]]:
    """:func:`_doctor_cells` in two gloo worker processes (hooklab.run_workers), started from a fresh Python process
    (a process that has run a compiled backward cannot fork workers that run autograd): rank 0's answers, as the
    matrix keeps rank 0's observations."""
    from patience import run

    here = Path(__file__).resolve().parent
    code = (f"import json, sys; sys.path[:0] = [{str(here)!r}, {str(ROOT)!r}]\n"
            "import test_explain_matrix as t\n"
            "from hooklab.workers import run_workers\n"
            f"ranks = run_workers(t._doctor_cells, {keys!r}, world_size=2, timeout={WORKER_WAIT})\n"
            f"print({MARK!r} + json.dumps(ranks[0]))\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": ""}
    proc = run([sys.executable, "-c", code], what="explain_hook in the distributed columns' workers",
               seconds=WORKER_WAIT + 60, cwd=ROOT, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith(MARK)), None)
    assert proc.returncode == 0 and line is not None, proc.stderr[-4000:]
    return json.loads(line[len(MARK):])


# ------------------------------------------------------------------------------------------------ the checks
def expected(cell: Cell, kind: str) -> tuple[set[str], tuple[str, ...]] | None:
    by_kind = CAUSE_OF.get(f"{cell.context}/{cell.shape}" if cell.shape else cell.context)
    if by_kind is None and cell.shape:
        by_kind = CAUSE_OF.get(cell.context)
    return None if by_kind is None else by_kind.get(kind, by_kind.get("*"))


def problems(cell: Cell, v: Verdict) -> list[str]:
    """What is wrong with the doctor's answer for ``cell`` (empty: it agrees with the matrix). For a cell with no
    unusual record only the generic checks apply: the setup, no crash, the step's error named."""
    if v.crash is not None:
        return [f"explain_hook crashed: {v.crash}"]
    if v.report is None:
        return ["no module of the rig holds the family's hook"]
    if v.fired != cell.record["calls"]:
        return [f"the setup is not the matrix's: the hook fired {v.fired} times, the matrix records "
                f"{cell.record['calls']}"]
    r, out = v.report, []
    text = " ".join(r.reasons)
    if not r.reasons:
        out.append("no reasons")
    if v.raised is not None and f"the step raised {v.raised.split(':')[0]}" not in text:
        out.append(f"does not name the step's error ({v.raised[:80]})")
    if not unusual(cell):
        return out
    if "fired as expected" in text:
        out.append("says the hooks fired as expected")
    if r.cause in UNSURE and "check" not in text:
        out.append(f"cause {r.cause!r} without saying what to check")
    want = expected(cell, v.kind)
    if want is not None:
        causes, words = want
        if ON_PURPOSE in cell.record.get("notes", []):  # the probe's forward raised: that is the cause too
            causes = causes | {"ran", "step raised"}
            words = () if "always_call=True" in text else words
        if r.cause not in causes:
            out.append(f"cause {r.cause!r}, the matrix's is {' or '.join(sorted(causes))}")
        out += [f"the reasons do not say {w!r}" for w in words if w not in text]
    return out


def describe(v: Verdict) -> str:
    r = v.report
    if r is None:
        return "no report"
    return f"asked about {v.name!r} ({v.kind}): cause {r.cause!r}\n" + "\n".join(f"  - {x}" for x in r.reasons)


# ------------------------------------------------------------------------------------------------ the tests
def test_the_excluded_families_are_exactly_those_the_doctor_cannot_speak_of():
    """A family is spoken of when its hook, installed by the eager cell's probe, sits on a module (or one of its
    parameters) and explain_hook counts it: the report has a line for it, with the count the probe recorded."""
    speaks = set()
    for family in hm.FAMILIES:
        v = explain_cell(family.id, hm.CONTEXT_BY_ID["eager"])
        if v.report is not None and v.crash is None and v.fired and sum(
                sum(on.values()) for on in v.report.fired.values()) == v.fired:
            speaks.add(family.id)
    assert speaks == {f.id for f in hm.FAMILIES} - set(EXCLUDED), \
        f"spoken of but excluded: {sorted(speaks & set(EXCLUDED))}; not spoken of, not excluded: " \
        f"{sorted({f.id for f in hm.FAMILIES} - speaks - set(EXCLUDED))}"
    assert all(reason for reason in EXCLUDED.values())


def test_every_context_with_unusual_cells_has_the_matrix_cause():
    missing = sorted({c.context for c in cells()} - {k.split("/")[0] for k in CAUSE_OF})
    assert not missing, f"contexts with unusual cells and no recorded cause in CAUSE_OF: {missing}"
    missing = sorted({c.context for c in cells(workers=True)} - {k.split("/")[0] for k in CAUSE_OF})
    assert not missing, f"distributed contexts with unusual cells and no recorded cause in CAUSE_OF: {missing}"
    assert WORKER_CONTEXTS == {"ddp", "fsdp2", "fsdp1", "tensor-parallel"}
    assert set(EXCLUDED_CELLS) <= {c.key for c in cells(workers=True)}, "an excluded cell that is not unusual"


@pytest.mark.parametrize("cell", cells(), ids=lambda c: c.key)
def test_the_doctor_names_the_matrix_cause(cell):
    v = explain_cell(cell.family, cell.run)
    found = problems(cell, v)
    assert not found, "; ".join(found) + "\n" + describe(v)


@pytest.mark.timeout(900)
def test_the_doctor_names_the_matrix_cause_in_the_distributed_columns():
    """The unusual cells of the DDP, FSDP2, FSDP1 and tensor-parallel columns (hooks on a parameter FSDP replaced or
    sharded, a forward hook receiving a DTensor, ...), each run by its own probe under explain_hook inside two gloo
    worker processes, as the matrix observed them; the cells in EXCLUDED_CELLS are not asked, each for its reason."""
    todo = [c for c in cells(workers=True) if c.key not in EXCLUDED_CELLS]
    assert len(todo) >= 8 and {c.context for c in todo} >= {"fsdp2", "fsdp1", "tensor-parallel"}
    found = doctor_in_workers([c.key for c in todo])
    assert set(found) == {c.key for c in todo}
    wrong = {k: "; ".join(r["problems"]) + "\n" + r["said"] for k, r in found.items() if r["problems"]}
    assert not wrong, "\n\n".join(f"{k}: {v}" for k, v in wrong.items())


def test_the_unusual_cells_are_many_and_each_kind_of_hook_is_among_them():
    todo = cells()
    assert len(todo) > 50  # the selection is not empty by accident
    assert {c.family for c in todo} == {f.id for f in hm.FAMILIES} - set(EXCLUDED)


@pytest.mark.timeout(1800)
@pytest.mark.skipif(os.environ.get("HOOKLAB_HOOK_MATRIX") != "all",
                    reason="every observed cell, the usual ones too: HOOKLAB_HOOK_MATRIX=all runs them (weekly CI)")
def test_no_crash_on_any_observed_cell():
    wrong = {}
    for cell in cells(every=True):
        v = explain_cell(cell.family, cell.run)
        found = problems(cell, v)
        if found:
            wrong[cell.key] = "; ".join(found) + "\n" + describe(v)
    keys = [c.key for c in cells(every=True, workers=True) if c.key not in EXCLUDED_CELLS]
    wrong |= {k: "; ".join(r["problems"]) + "\n" + r["said"] for k, r in doctor_in_workers(keys).items()
              if r["problems"]}
    assert not wrong, "\n\n".join(f"{k}: {v}" for k, v in wrong.items())


def test_a_cell_the_doctor_gets_wrong_is_reported():
    """The check can fail: a report with a false cause for a cell the matrix records (forward-hook@deepcopy)."""
    cell = next(c for c in cells() if c.key == "forward-hook@deepcopy")
    v = explain_cell(cell.family, cell.run)
    assert problems(cell, v) == []
    v.report.cause = "another model"
    v.report.reasons = ["'subject' ran 1 time(s) as a module and its hooks fired as expected"]
    assert ON_PURPOSE not in cell.record["notes"]
    assert problems(cell, v) == ["says the hooks fired as expected", "cause 'another model' without saying what to "
                                 "check", "cause 'another model', the matrix's is copy",
                                 "the reasons do not say 'copy'"]
    v.fired += 1
    assert problems(cell, v)[0].startswith("the setup is not the matrix's")
