"""docs/hook_api_census.md stays true: every API it marks as taught is still called in the cell it cites.

The census lists 95 public hook APIs of the pinned PyTorch, each ✓ (a code cell calls it and its output shows what it
does), ~ (named or called, nothing shown) or ✗ (not taught). For every row that cites a cell (``NN:i``, or
``NN:i→NN:j`` when cell j prints what cell i computed), the cited cell must be a code cell whose source matches the
row's pattern below, and the output cell must have an output. Removing a taught API from its cell, or inserting cells
so that the numbers move, fails here with the cells where the API is called now. The totals table at the top of the
document is recomputed from the rows.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
CENSUS = ROOT / "docs" / "hook_api_census.md"
ROW_COUNT = 95

# the API column of the table (without backticks) -> what a cell that calls it contains
PATTERNS = {
    "Tensor.register_hook": r"\.register_hook\(",
    "Tensor.register_post_accumulate_grad_hook": r"\.register_post_accumulate_grad_hook\(",
    "Tensor.retain_grad": r"\.retain_grad\(\)",
    "Node.register_hook": r"grad_fn\.register_hook\(",
    "Node.register_prehook": r"grad_fn\.register_prehook\(",
    "Node.name / next_functions": r"\.next_functions\b",
    "Node.metadata": r"\.metadata\[",
    "autograd.graph.register_multi_grad_hook": r"\bregister_multi_grad_hook\(",
    "autograd.graph.saved_tensors_hooks": r"\bsaved_tensors_hooks\(",
    "autograd.graph.save_on_cpu": r"\bsave_on_cpu\(",
    "autograd.graph.disable_saved_tensors_hooks": r"\bdisable_saved_tensors_hooks\(",
    "autograd.graph.allow_mutation_on_saved_tensors": r"\ballow_mutation_on_saved_tensors\(",
    "autograd.graph.get_gradient_edge / GradientEdge": r"\bget_gradient_edge\(",
    "autograd.graph.increment_version": r"\bincrement_version\(",
    "autograd.graph.node_creation_hook": r"\bnode_creation_hook\(",
    "autograd.graph.queue_callback": r"\bqueue_callback\(",
    "Module.register_forward_pre_hook": r"\.register_forward_pre_hook\(",
    "Module.register_forward_hook": r"\.register_forward_hook\(",
    "Module.register_full_backward_pre_hook": r"\.register_full_backward_pre_hook\(",
    "Module.register_full_backward_hook": r"\.register_full_backward_hook\(",
    "Module.register_backward_hook": r"\.register_backward_hook\(",
    "Module.register_state_dict_pre_hook": r"\.register_state_dict_pre_hook\(",
    "Module.register_state_dict_post_hook": r"\.register_state_dict_post_hook\(",
    "Module.register_load_state_dict_pre_hook": r"\.register_load_state_dict_pre_hook\(",
    "Module.register_load_state_dict_post_hook": r"\.register_load_state_dict_post_hook\(",
    "register_module_forward_pre_hook": r"\bregister_module_forward_pre_hook\(",
    "register_module_forward_hook": r"\bregister_module_forward_hook\(",
    "register_module_full_backward_pre_hook": r"\bregister_module_full_backward_pre_hook\(",
    "register_module_full_backward_hook": r"\bregister_module_full_backward_hook\(",
    "register_module_backward_hook": r"\bregister_module_backward_hook\(",
    "register_module_buffer_registration_hook": r"\bregister_module_buffer_registration_hook\(",
    "register_module_module_registration_hook": r"\bregister_module_module_registration_hook\(",
    "register_module_parameter_registration_hook": r"\bregister_module_parameter_registration_hook\(",
    "RemovableHandle": r"\bhandle\.remove\(\)",
    "utils.hooks.unserializable_hook": r"@unserializable_hook\b",
    "utils.hooks.warn_if_has_hooks": r"\bwarn_if_has_hooks\(",
    "Optimizer.register_step_pre_hook": r"\bopt\.register_step_pre_hook\(",
    "Optimizer.register_step_post_hook": r"\bopt\.register_step_post_hook\(",
    "Optimizer.register_state_dict_pre_hook": r"\bopt\.register_state_dict_pre_hook\(",
    "Optimizer.register_state_dict_post_hook": r"\bopt\.register_state_dict_post_hook\(",
    "Optimizer.register_load_state_dict_pre_hook": r"\bopt\.register_load_state_dict_pre_hook\(",
    "Optimizer.register_load_state_dict_post_hook": r"\bopt\.register_load_state_dict_post_hook\(",
    "optim.optimizer.register_optimizer_step_pre_hook": r"\bregister_optimizer_step_pre_hook\(",
    "optim.optimizer.register_optimizer_step_post_hook": r"\bregister_optimizer_step_post_hook\(",
    "utils.checkpoint.checkpoint": r"\bcheckpoint\(",
    "utils.checkpoint.checkpoint_sequential": r"\bcheckpoint_sequential\(",
    "create_selective_checkpoint_contexts / CheckpointPolicy": r"\bcreate_selective_checkpoint_contexts\b",
    "set_checkpoint_early_stop": r"\bset_checkpoint_early_stop\(",
    "set_checkpoint_debug_enabled": r"\bset_checkpoint_debug_enabled\(",
    "apply_activation_checkpointing / checkpoint_wrapper": r"\bapply_activation_checkpointing\(",
    "offload_wrapper": r"\boffload_wrapper\(",
    "nn.utils.prune": r"\bprune\.l1_unstructured\(",
    "nn.utils.parametrize.register_parametrization": r"\bregister_parametrization\(",
    "nn.utils.weight_norm / remove_weight_norm": r"\bnn\.utils\.weight_norm\(",
    "nn.utils.parametrizations.weight_norm": r"\bparametrizations\.weight_norm\(",
    "nn.utils.spectral_norm / remove_spectral_norm": r"\bnn\.utils\.spectral_norm\(",
    "nn.utils.parametrizations.spectral_norm / orthogonal":
        r"(?s)\bparametrizations\.spectral_norm\(.*\bparametrizations\.orthogonal\(",
    "nn.modules.lazy.LazyModuleMixin (LazyLinear, …)": r"\bnn\.LazyLinear\(",
    "DistributedDataParallel.register_comm_hook": r"\.register_comm_hook\(",
    "torch.distributed.GradBucket": r"\bbucket\.(buffer|parameters|index)\(\)",
    "default_hooks.allreduce_hook / fp16_compress_hook / bf16_compress_hook":
        r"(?s)default_hooks\.allreduce_hook\b.*default_hooks\.fp16_compress_hook\b.*default_hooks\.bf16_compress_hook\b",
    "default_hooks.fp16_compress_wrapper / bf16_compress_wrapper":
        r"(?s)\bfp16_compress_wrapper\b.*\bbf16_compress_wrapper\b",
    "powerSGD_hook.powerSGD_hook / PowerSGDState": r"(?s)\bPowerSGDState\(.*\.powerSGD_hook\b",
    "powerSGD_hook.batched_powerSGD_hook": r"\.batched_powerSGD_hook\b",
    "post_localSGD_hook / PostLocalSGDState": r"(?s)\bPostLocalSGDState\(.*\.post_localSGD_hook\b",
    "quantization_hooks.quantization_pertensor_hook / _perchannel_hook":
        r"(?s)\.quantization_pertensor_hook\b.*\.quantization_perchannel_hook\b",
    "debugging_hooks.noop_hook": r"\bdebugging_hooks\.noop_hook\b",
    "ddp_zero_hook.hook_with_zero_step / _interleaved": r"\bhook_with_zero_step\(",
    "ddp_comm_hooks.register_ddp_comm_hook / DDPCommHookType": r"\bregister_ddp_comm_hook\(DDPCommHookType\.",
    "algorithms.join.JoinHook / Joinable / Join": r"\bJoin\(\[",
    "FSDPModule.set_all_reduce_hook (FSDP2)": r"\.set_all_reduce_hook\(",
    "fsdp.register_fsdp_forward_method (FSDP2)": r"\bregister_fsdp_forward_method\(",
    "FSDPModule.set_custom_all_gather / set_custom_reduce_scatter": r"(?s)\.set_custom_all_gather\(.*\.set_custom_reduce_scatter\(",
    "distributed.tensor.distribute_module": r"\bdistribute_module\(",
    "tensor.parallel PrepareModuleInput / PrepareModuleOutput": r"\bPrepareModule(Input|Output|InputOutput)\(",
    "distributed.tensor.debug.CommDebugMode": r"\bCommDebugMode\(\)",
    "overrides.TorchFunctionMode": r"\(TorchFunctionMode\)",
    "utils._python_dispatch.TorchDispatchMode": r"\(TorchDispatchMode\)",
    "library.register_autograd": r"\blibrary\.register_autograd\(",
    "library.register_torch_dispatch": r"\blibrary\.register_torch_dispatch\(",
    "utils.module_tracker.ModuleTracker": r"\bModuleTracker\(\)",
    "utils.flop_counter.FlopCounterMode": r"\bFlopCounterMode\(",
    "profiler.profile(on_trace_ready=…) / record_function": r"(?s)\brecord_function\(.*\bprofile\(.*on_trace_ready=",
    "ao.quantization.prepare (eager)": r"\btq\.prepare\(",
    "compiled autograd (torch._dynamo.config.compiled_autograd / compiled_autograd._enable)":
        r"\bcompiled_autograd\._enable\(",
    "utils.debug_log.debug_grad_log": r"\bdebug_grad_log\(",
    "tensor.parallel.input_reshard.input_reshard": r"\binput_reshard\(",
    "utils.checkpoint.GraphExecGroup": r"\bGraphExecGroup\(\)",
    "FSDPModule.set_manual_backward_finalization / finalize_backward (FSDP2)":
        r"(?s)\.set_manual_backward_finalization\(True\).*\.finalize_backward\(\)",
}

CELL = re.compile(r"^(\d\d):(\d+)(?:→(\d\d):(\d+))?$")
STATUSES = ("✓", "~", "✗")


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


def calls(pattern: str) -> list[str]:
    """Every code cell of every notebook whose source matches pattern, as NN:i."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = notebook(path.name[:2])
        found += [f"{path.name[:2]}:{i}" for i, c in enumerate(nb.cells)
                  if c.cell_type == "code" and re.search(pattern, c.source)]
    return found


def problems(cell: str, pattern: str, load=notebook) -> list[str]:
    """What is wrong with citing `cell` for an API that `pattern` finds; empty when nothing is."""
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
    if not re.search(pattern, cells[int(index)].source):
        found.append(f"{nb_number}:{index} does not match {pattern!r}")
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
        assert re.fullmatch(r"[A-N]", r["group"]), f"row {r['number']}: group {r['group']!r} is not A-N"
        assert r["note"], f"row {r['number']} ({r['api']}): say what the output shows, or why it is not taught"
        if r["status"] == "✗":
            assert r["cell"] == "—", f"row {r['number']} ({r['api']}) is ✗ but cites {r['cell']}"


def test_every_cited_row_has_a_pattern_and_every_pattern_a_row():
    cited_apis = {r["api"] for r in cited()}
    assert not cited_apis - PATTERNS.keys(), f"give these rows a pattern in PATTERNS: {sorted(cited_apis - PATTERNS.keys())}"
    assert not PATTERNS.keys() - cited_apis, f"patterns for rows that cite no cell: {sorted(PATTERNS.keys() - cited_apis)}"


@pytest.mark.parametrize("row", cited(), ids=lambda r: f"{r['number']:02d}")
def test_the_cited_cell_still_calls_the_api_and_has_output(row):
    pattern = PATTERNS[row["api"]]
    found = problems(row["cell"], pattern)
    assert not found, (f"docs/hook_api_census.md row {row['number']} ({row['api']}, {row['status']}): "
                       f"{'; '.join(found)}. Cells that call it now: {calls(pattern) or 'none'}")


def test_a_cell_without_the_api_or_without_output_is_reported():
    v4 = nbformat.v4
    printed = v4.new_output("stream", name="stdout", text="2\n")
    fake = v4.new_notebook(cells=[
        v4.new_markdown_cell("# title"),
        v4.new_code_cell("y = x.exp()\nincrement_version(y)", outputs=[printed]),
        v4.new_code_cell("y.sum().backward()"),
        v4.new_code_cell("print(y._version)", outputs=[printed]),
    ])

    def check(cell, pattern=PATTERNS["autograd.graph.increment_version"]):
        return problems(cell, pattern, load=lambda number: fake)

    assert check("99:1") == []
    assert check("99:2") == [f"99:2 does not match {PATTERNS['autograd.graph.increment_version']!r}",
                             "99:2 has no output"]
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
        "the 90 rows of the earlier census (groups A–M)": count([r for r in table if r["group"] != "N"]),
        "the rows that are not GPU only": count([r for r in table if r["scope"] != "GPU only"]),
    }
    assert stated == expected, f"the totals table says {stated}, the rows give {expected}"
