"""docs/hook_api_census.md stays true: every API it marks as taught is still called, in code, in the cell it cites.

The census lists the public hook APIs of the pinned PyTorch, each ✓ (a code cell calls it and its output shows what it
does), ~ (called, but no output shows what it does: only a refusal, say) or ✗ (not taught). For every row that cites a
cell (``NN:i``, or ``NN:i→NN:j`` when cell j prints what cell i computed), the cited cell must be a code cell whose
**code** uses the API as the row's entry in ``SPECS`` below says, and the output cell must have an output.

The cell is parsed with :mod:`ast` (after IPython turns its ``%`` / ``!`` lines into Python), so only code counts: a
call commented out, the API's name in a string, an f-string's text, a ``print`` of the name, or a comment beside
``contextlib.nullcontext()`` do not. What a requirement asks for:

- ``call:a.b``: a call whose callee is an expression ending in ``a.b`` (``x.a.b(...)``, ``a.b(...)``; for one name
  also a bare ``b(...)``), wherever it is: inside a ``with``, a lambda, a comprehension or an f-string's ``{...}``;
- ``ref:a.b``: the name or attribute read in code (passed as a function, used as a decorator);
- ``base:C``: a class defined with ``C`` among its bases;
- ``keyword:f.k``: a call of ``f`` with the keyword argument ``k``.

Alternatives inside one requirement are separated by ``|``; every requirement of a row must hold. The tests at the
end apply the mutations that fooled the earlier, text-based check to real cells and assert that each now fails.
"""
from __future__ import annotations

import ast
import copy
import functools
import re
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parents[2]
CENSUS = ROOT / "docs" / "hook_api_census.md"
ROW_COUNT = 102
GROUPS = "A-O"

# the API column of the table (without backticks) -> what the code of a cell that teaches it must do
SPECS: dict[str, tuple[str, ...]] = {
    "Tensor.register_hook": ("call:register_hook",),
    "Tensor.register_post_accumulate_grad_hook": ("call:register_post_accumulate_grad_hook",),
    "Tensor.retain_grad": ("call:retain_grad",),
    "Node.register_hook": ("call:grad_fn.register_hook",),
    "Node.register_prehook": ("call:grad_fn.register_prehook",),
    "Node.name / next_functions": ("ref:next_functions",),
    "Node.metadata": ("ref:metadata",),
    "autograd.graph.register_multi_grad_hook": ("call:register_multi_grad_hook",),
    "autograd.graph.saved_tensors_hooks": ("call:saved_tensors_hooks",),
    "autograd.graph.save_on_cpu": ("call:save_on_cpu",),
    "autograd.graph.disable_saved_tensors_hooks": ("call:disable_saved_tensors_hooks",),
    "autograd.graph.allow_mutation_on_saved_tensors": ("call:allow_mutation_on_saved_tensors",),
    "autograd.graph.get_gradient_edge / GradientEdge": ("call:get_gradient_edge",),
    "autograd.graph.increment_version": ("call:increment_version",),
    "autograd.graph.node_creation_hook": ("call:node_creation_hook",),
    "autograd.graph.queue_callback": ("call:queue_callback",),
    "Module.register_forward_pre_hook": ("call:register_forward_pre_hook",),
    "Module.register_forward_hook": ("call:register_forward_hook",),
    "Module.register_full_backward_pre_hook": ("call:register_full_backward_pre_hook",),
    "Module.register_full_backward_hook": ("call:register_full_backward_hook",),
    "Module.register_backward_hook": ("call:register_backward_hook",),
    "Module.register_state_dict_pre_hook": ("call:register_state_dict_pre_hook",),
    "Module.register_state_dict_post_hook": ("call:register_state_dict_post_hook",),
    "Module.register_load_state_dict_pre_hook": ("call:register_load_state_dict_pre_hook",),
    "Module.register_load_state_dict_post_hook": ("call:register_load_state_dict_post_hook",),
    "register_module_forward_pre_hook": ("call:register_module_forward_pre_hook",),
    "register_module_forward_hook": ("call:register_module_forward_hook",),
    "register_module_full_backward_pre_hook": ("call:register_module_full_backward_pre_hook",),
    "register_module_full_backward_hook": ("call:register_module_full_backward_hook",),
    "register_module_backward_hook": ("call:register_module_backward_hook",),
    "register_module_buffer_registration_hook": ("call:register_module_buffer_registration_hook",),
    "register_module_module_registration_hook": ("call:register_module_module_registration_hook",),
    "register_module_parameter_registration_hook": ("call:register_module_parameter_registration_hook",),
    "RemovableHandle": ("call:handle.remove",),
    "utils.hooks.unserializable_hook": ("ref:unserializable_hook",),
    "utils.hooks.warn_if_has_hooks": ("call:warn_if_has_hooks",),
    "Optimizer.register_step_pre_hook": ("call:opt.register_step_pre_hook",),
    "Optimizer.register_step_post_hook": ("call:opt.register_step_post_hook",),
    "Optimizer.register_state_dict_pre_hook": ("call:opt.register_state_dict_pre_hook",),
    "Optimizer.register_state_dict_post_hook": ("call:opt.register_state_dict_post_hook",),
    "Optimizer.register_load_state_dict_pre_hook": ("call:opt.register_load_state_dict_pre_hook",),
    "Optimizer.register_load_state_dict_post_hook": ("call:opt.register_load_state_dict_post_hook",),
    "optim.optimizer.register_optimizer_step_pre_hook": ("call:register_optimizer_step_pre_hook",),
    "optim.optimizer.register_optimizer_step_post_hook": ("call:register_optimizer_step_post_hook",),
    "utils.checkpoint.checkpoint": ("call:checkpoint",),
    "utils.checkpoint.checkpoint_sequential": ("call:checkpoint_sequential",),
    "create_selective_checkpoint_contexts / CheckpointPolicy": ("ref:create_selective_checkpoint_contexts",),
    "set_checkpoint_early_stop": ("call:set_checkpoint_early_stop",),
    "set_checkpoint_debug_enabled": ("call:set_checkpoint_debug_enabled",),
    "apply_activation_checkpointing / checkpoint_wrapper": ("call:apply_activation_checkpointing",),
    "offload_wrapper": ("call:offload_wrapper",),
    "nn.utils.prune": ("call:prune.l1_unstructured",),
    "nn.utils.parametrize.register_parametrization": ("call:register_parametrization",),
    "nn.utils.weight_norm / remove_weight_norm": ("call:nn.utils.weight_norm",),
    "nn.utils.parametrizations.weight_norm": ("call:parametrizations.weight_norm",),
    "nn.utils.spectral_norm / remove_spectral_norm": ("call:nn.utils.spectral_norm",),
    "nn.utils.parametrizations.spectral_norm / orthogonal":
        ("call:parametrizations.spectral_norm", "call:parametrizations.orthogonal"),
    "nn.modules.lazy.LazyModuleMixin (LazyLinear, …)": ("call:nn.LazyLinear",),
    "DistributedDataParallel.register_comm_hook": ("call:register_comm_hook",),
    "torch.distributed.GradBucket": ("call:bucket.buffer|call:bucket.parameters|call:bucket.index",),
    "default_hooks.allreduce_hook / fp16_compress_hook / bf16_compress_hook":
        ("ref:default_hooks.allreduce_hook", "ref:default_hooks.fp16_compress_hook", "ref:default_hooks.bf16_compress_hook"),
    "default_hooks.fp16_compress_wrapper / bf16_compress_wrapper": ("ref:fp16_compress_wrapper", "ref:bf16_compress_wrapper"),
    "powerSGD_hook.powerSGD_hook / PowerSGDState": ("call:PowerSGDState", "ref:powerSGD_hook"),
    "powerSGD_hook.batched_powerSGD_hook": ("ref:batched_powerSGD_hook",),
    "post_localSGD_hook / PostLocalSGDState": ("call:PostLocalSGDState", "ref:post_localSGD_hook"),
    "quantization_hooks.quantization_pertensor_hook / _perchannel_hook":
        ("ref:quantization_pertensor_hook", "ref:quantization_perchannel_hook"),
    "debugging_hooks.noop_hook": ("ref:debugging_hooks.noop_hook",),
    "ddp_zero_hook.hook_with_zero_step / _interleaved": ("call:hook_with_zero_step",),
    "ddp_comm_hooks.register_ddp_comm_hook / DDPCommHookType": ("call:register_ddp_comm_hook", "ref:DDPCommHookType"),
    "algorithms.join.JoinHook / Joinable / Join": ("call:Join",),
    "FSDPModule.set_all_reduce_hook (FSDP2)": ("call:set_all_reduce_hook",),
    "fsdp.register_fsdp_forward_method (FSDP2)": ("call:register_fsdp_forward_method",),
    "FSDPModule.set_custom_all_gather / set_custom_reduce_scatter": ("call:set_custom_all_gather", "call:set_custom_reduce_scatter"),
    "distributed.tensor.distribute_module": ("call:distribute_module",),
    "tensor.parallel PrepareModuleInput / PrepareModuleOutput":
        ("call:PrepareModuleInput|call:PrepareModuleOutput|call:PrepareModuleInputOutput",),
    "distributed.tensor.debug.CommDebugMode": ("call:CommDebugMode",),
    "overrides.TorchFunctionMode": ("base:TorchFunctionMode",),
    "utils._python_dispatch.TorchDispatchMode": ("base:TorchDispatchMode",),
    "library.register_autograd": ("call:library.register_autograd",),
    "library.register_torch_dispatch": ("call:library.register_torch_dispatch",),
    "utils.module_tracker.ModuleTracker": ("call:ModuleTracker",),
    "utils.flop_counter.FlopCounterMode": ("call:FlopCounterMode",),
    "profiler.profile(on_trace_ready=…) / record_function": ("call:record_function", "keyword:profile.on_trace_ready"),
    "ao.quantization.prepare (eager)": ("call:tq.prepare",),
    "compiled autograd (torch._dynamo.config.compiled_autograd / compiled_autograd._enable)":
        ("call:compiled_autograd._enable",),
    "utils.debug_log.debug_grad_log": ("call:debug_grad_log",),
    "tensor.parallel.input_reshard.input_reshard": ("call:input_reshard",),
    "utils.checkpoint.GraphExecGroup": ("call:GraphExecGroup",),
    "FSDPModule.set_manual_backward_finalization / finalize_backward (FSDP2)":
        ("call:set_manual_backward_finalization", "call:finalize_backward"),
    "ProcessGroup.register_pre_hook / register_post_hook": ("call:register_pre_hook", "call:register_post_hook"),
    "ProcessGroup.register_abort_hook / supports_abort_hooks": ("call:register_abort_hook",),
    "library.register_fake": ("call:library.register_fake",),
    "library.register_vmap": ("call:library.register_vmap",),
    "library.register_autocast": ("call:library.register_autocast",),
}


CELL = re.compile(r"^(\d\d):(\d+)(?:→(\d\d):(\d+))?$")
STATUSES = ("✓", "~", "✗")
KINDS = ("call", "ref", "base", "keyword")


@functools.cache
def rows() -> tuple[dict, ...]:
    """The census table: one dict per row (number, api, group, status, cell, note, scope)."""
    table = []
    for line in CENSUS.read_text(encoding="utf-8").splitlines():
        if not re.match(r"\| \d+ \|", line):
            continue
        fields = [f.strip() for f in line.strip().strip("|").split("|")]
        assert len(fields) == 7, f"a census row needs 7 columns, this has {len(fields)}: {line}"
        number, api, group, status, cell, note, scope = fields
        table.append({"number": int(number), "api": api.replace("`", ""), "group": group, "status": status,
                      "cell": cell, "note": note, "scope": scope})
    return tuple(table)


def cited() -> list[dict]:
    return [r for r in rows() if r["status"] != "✗"]


@functools.cache
def notebook(number: str):
    path, = (ROOT / "notebooks").glob(f"{number}_*.ipynb")
    return nbformat.read(path, as_version=4)


def dotted(node: ast.AST) -> tuple[str, ...]:
    """``a.b.c`` -> ("a", "b", "c"); a part that is no plain name (a call, a subscript) becomes "?"."""
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Attribute):
        return (*dotted(node.value), node.attr)
    return ("?",)


@functools.cache
def uses(source: str) -> dict[str, frozenset]:
    """What the code of a cell does, by kind: the dotted names it calls, reads, subclasses, and calls with a keyword.
    Comments, strings and f-string text are not code and leave nothing here."""
    tree = ast.parse(TransformerManager().transform_cell(source))
    found: dict[str, set] = {kind: set() for kind in KINDS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found["call"].add(dotted(node.func))
            found["keyword"].update((*dotted(node.func), k.arg) for k in node.keywords if k.arg)
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            found["ref"].add(dotted(node))
        elif isinstance(node, ast.ClassDef):
            found["base"].update(dotted(base) for base in node.bases)
    return {kind: frozenset(names) for kind, names in found.items()}


def holds(requirement: str, source: str) -> bool:
    """Whether the code of `source` meets one requirement (alternatives separated by "|")."""
    found = uses(source)
    for alternative in requirement.split("|"):
        kind, _, name = alternative.partition(":")
        assert kind in KINDS and name, f"a requirement is kind:dotted.name, kind one of {KINDS}: {alternative!r}"
        suffix = tuple(name.split("."))
        if any(names[-len(suffix):] == suffix for names in found[kind]):
            return True
    return False


def missing(source: str, spec: tuple[str, ...]) -> list[str]:
    """The requirements of `spec` that the code of `source` does not meet."""
    return [requirement for requirement in spec if not holds(requirement, source)]


def calls(spec: tuple[str, ...]) -> list[str]:
    """Every code cell of every notebook whose code meets `spec`, as NN:i."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = notebook(path.name[:2])
        found += [f"{path.name[:2]}:{i}" for i, c in enumerate(nb.cells)
                  if c.cell_type == "code" and not missing(c.source, spec)]
    return found


def problems(cell: str, spec: tuple[str, ...], load=notebook) -> list[str]:
    """What is wrong with citing `cell` for an API whose use `spec` describes; empty when nothing is."""
    match = CELL.match(cell)
    if not match:
        return [f"cell {cell!r} is not NN:i or NN:i→NN:j"]
    nb_number, index, out_number, out_index = match.groups()
    out_number, out_index = out_number or nb_number, int(out_index or index)
    if out_number != nb_number or out_index < int(index):
        return [f"cell {cell!r}: the output cell must be a later cell of the same notebook"]
    cells = load(nb_number).cells
    roles = {int(index): "the call"} | ({out_index: "the output"} if out_index != int(index) else {})
    found = [f"{nb_number}:{i} ({role}) is not a code cell" for i, role in roles.items()
             if i >= len(cells) or cells[i].cell_type != "code"]
    if found:
        return found
    if lacking := missing(cells[int(index)].source, spec):
        found.append(f"{nb_number}:{index}'s code does not meet {lacking}")
    if not cells[out_index].get("outputs"):
        found.append(f"{nb_number}:{out_index} has no output")
    return found


def test_the_table_has_every_row_once():
    table = rows()
    assert [r["number"] for r in table] == list(range(1, ROW_COUNT + 1))
    apis = [r["api"] for r in table]
    assert len(set(apis)) == ROW_COUNT, f"APIs listed twice: {sorted({a for a in apis if apis.count(a) > 1})}"
    for r in table:
        assert r["status"] in STATUSES, f"row {r['number']}: status {r['status']!r} is not one of {STATUSES}"
        assert re.fullmatch(f"[{GROUPS}]", r["group"]), f"row {r['number']}: group {r['group']!r} is not {GROUPS}"
        assert r["note"], f"row {r['number']} ({r['api']}): say what the output shows, or why it is not taught"
        if r["status"] == "✗":
            assert r["cell"] == "—", f"row {r['number']} ({r['api']}) is ✗ but cites {r['cell']}"


def test_every_cited_row_has_a_spec_and_every_spec_a_row():
    cited_apis = {r["api"] for r in cited()}
    assert not cited_apis - SPECS.keys(), f"give these rows an entry in SPECS: {sorted(cited_apis - SPECS.keys())}"
    assert not SPECS.keys() - cited_apis, f"SPECS for rows that cite no cell: {sorted(SPECS.keys() - cited_apis)}"


@pytest.mark.parametrize("row", cited(), ids=lambda r: f"{r['number']:02d}")
def test_the_cited_cell_still_calls_the_api_and_has_output(row):
    spec = SPECS[row["api"]]
    found = problems(row["cell"], spec)
    assert not found, (f"docs/hook_api_census.md row {row['number']} ({row['api']}, {row['status']}): "
                       f"{'; '.join(found)}. Cells whose code meets it now: {calls(spec) or 'none'}")


def test_only_code_counts():
    source = '''
import contextlib
from torch.autograd.graph import node_creation_hook          # an import alone is no use
# y.register_hook(keep)                                        a comment
label = "register_forward_hook(h)"                             # a string
print(f"warn_if_has_hooks(t): {[]}")                           # f-string text around a field that calls nothing
print("register_module_backward_hook(old_hook) not called")    # a print of the name
with contextlib.nullcontext():  # was node_creation_hook(created)
    pass
%time z = 1
'''
    for requirement in ("call:register_hook", "call:register_forward_hook", "call:warn_if_has_hooks",
                        "call:register_module_backward_hook", "call:node_creation_hook", "ref:node_creation_hook"):
        assert not holds(requirement, source), requirement
    assert holds("call:nullcontext", source) and holds("call:contextlib.nullcontext", source)
    assert not holds("call:other.nullcontext", source)  # the dotted suffix must match, not just the last name
    code = '''
t.register_hook(lambda g: g)
print(f"{hook_warnings(lambda: warn_if_has_hooks(t))}")       # a call inside an f-string's field is code
opt.register_step_pre_hook(h)
model.register_comm_hook(None, default_hooks.allreduce_hook)
@unserializable_hook
def f(grad): ...
class Log(TorchDispatchMode): ...
torch.profiler.profile(schedule=s, on_trace_ready=ready)
'''
    for requirement in ("call:register_hook", "call:warn_if_has_hooks", "call:opt.register_step_pre_hook",
                        "ref:default_hooks.allreduce_hook", "ref:unserializable_hook", "base:TorchDispatchMode",
                        "keyword:profile.on_trace_ready", "call:PrepareModuleInput|call:register_comm_hook"):
        assert holds(requirement, code), requirement
    assert missing(code, ("call:register_hook", "call:grad_fn.register_hook", "keyword:profile.schedule_x")) == [
        "call:grad_fn.register_hook", "keyword:profile.schedule_x"]


# The mutations under which the earlier check (a regular expression on the raw cell source) stayed green, each on
# the real cell a row cites: (row, what was done, the text in the cell, what it became). Each must now fail.
MUTATIONS = [
    (1, "the call commented out", "y.register_hook(keep_grad)", "# y.register_hook(keep_grad)"),
    (36, "the call reduced to an f-string label", "hook_warnings(lambda: warn_if_has_hooks(t))", "[]"),
    (30, "the call replaced by a print of its name",
     "course.attempt(lambda: module_globals.register_module_backward_hook(old_hook))",
     'print("register_module_backward_hook(old_hook) not called")'),
    (15, "swapped for nullcontext, the name left in a comment",
     "with torch.autograd.graph.node_creation_hook(created):",
     "with contextlib.nullcontext():  # was node_creation_hook(created)"),
]


@pytest.mark.parametrize("number, how, before, after", MUTATIONS, ids=[m[1] for m in MUTATIONS])
def test_a_call_that_survives_only_as_text_fails(number, how, before, after):
    row, = (r for r in rows() if r["number"] == number)
    spec = SPECS[row["api"]]
    nb_number, index = CELL.match(row["cell"]).group(1, 2)
    mutated = copy.deepcopy(notebook(nb_number))
    cell = mutated.cells[int(index)]
    assert before in cell.source, (f"row {number} cites {row['cell']}, which no longer holds {before!r}: "
                                   "update this mutation to the cell's code")
    assert problems(row["cell"], spec, load=lambda _: mutated) == []  # the real cell passes
    cell.source = cell.source.replace(before, after)
    name = spec[0].split(":")[1].split(".")[-1]
    assert name in cell.source  # the API's name is still in the cell's text, which is what fooled a textual check
    assert problems(row["cell"], spec, load=lambda _: mutated) == [
        f"{nb_number}:{index}'s code does not meet {list(spec)}"], how


def test_a_cell_without_the_api_or_without_output_is_reported():
    v4 = nbformat.v4
    printed = v4.new_output("stream", name="stdout", text="2\n")
    fake = v4.new_notebook(cells=[
        v4.new_markdown_cell("# title"),
        v4.new_code_cell("y = x.exp()\nincrement_version(y)", outputs=[printed]),
        v4.new_code_cell("y.sum().backward()  # increment_version(y) is not called here"),
        v4.new_code_cell("print(y._version)", outputs=[printed]),
    ])
    spec = SPECS["autograd.graph.increment_version"]

    def check(cell):
        return problems(cell, spec, load=lambda number: fake)

    assert check("99:1") == []
    assert check("99:2") == [f"99:2's code does not meet {list(spec)}", "99:2 has no output"]
    assert check("99:1→99:2") == ["99:2 has no output"]
    assert check("99:1→99:3") == []
    assert check("99:0") == ["99:0 (the call) is not a code cell"]
    assert check("99:1→99:7") == ["99:7 (the output) is not a code cell"]
    assert check("99:3→99:1") == ["cell '99:3→99:1': the output cell must be a later cell of the same notebook"]
    assert check("99:1→98:3") == ["cell '99:1→98:3': the output cell must be a later cell of the same notebook"]
    assert check("9:1") == ["cell '9:1' is not NN:i or NN:i→NN:j"]


def test_the_totals_agree_with_the_table():
    text = CENSUS.read_text(encoding="utf-8")
    stated = {m.group(1): tuple(int(n) for n in m.group(2, 3, 4, 5))
              for m in re.finditer(r"^\| ([^|]+?) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", text, re.M)}

    def count(selected):
        return (len(selected), *(sum(r["status"] == s for r in selected) for s in STATUSES))

    table = rows()
    expected = {
        "all rows": count(table),
        "the 90 rows of the earlier census (groups A–M)": count([r for r in table if r["group"] < "N"]),
        "the 95 rows of the round-three census (groups A–N)": count([r for r in table if r["group"] < "O"]),
        "the rows that are not GPU only": count([r for r in table if r["scope"] != "GPU only"]),
    }
    assert stated == expected, f"the totals table says {stated}, the rows give {expected}"
