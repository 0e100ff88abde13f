"""The library matrix's operations (tools/profiles/operations.py, docs/library_operations.json): the rule on made-up
surfaces chooses what its text says and leaves out the rest by reason; the committed table is what the rule gives on
the installed libraries; every profiled library of the environment is read; every kind of operation the library
matrix is made of has operations."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from collections import Counter

import pytest
import torch
from torch import nn

from patience import hang_guard
from tools.profiles import operations
from tools.profiles.libraries import modules

pytestmark = pytest.mark.timeout(300)


def made_up_library() -> tuple[types.ModuleType, type, type]:
    """A library ``madeup``: three functions, a model class and a holder class, their methods written in it."""
    space = types.ModuleType("madeup")

    def get_lora_model(model, rank):  # wrapping, takes a model
        return model

    def from_pretrained(path):  # loading: returns a model, takes none
        return path

    def quantize_everything(config):  # a kind, but no model
        return config

    def is_quantized(model):  # a question
        return False

    def helper(model):  # no kind
        return model

    for function in (get_lora_model, from_pretrained, quantize_everything, is_quantized, helper):
        function.__module__ = "madeup"
        setattr(space, function.__name__, function)
    space.__all__ = ["get_lora_model", "from_pretrained", "quantize_everything", "is_quantized", "helper"]

    def merge_and_unload(self):
        return self

    def get_input_embeddings(self):
        return None

    def train_(self, mode=True):
        return self

    def fit(self, model):
        return model

    merge_and_unload.__module__ = get_input_embeddings.__module__ = train_.__module__ = fit.__module__ = "madeup"
    model = type("MadeUpModel", (nn.Module,), {"merge_and_unload": merge_and_unload,
                                              "get_input_embeddings": get_input_embeddings, "train": train_,
                                              "__module__": "madeup"})
    holder = type("MadeUpTrainer", (), {"fit": fit, "train": fit, "__module__": "madeup"})
    return space, model, holder


def test_the_rule_chooses_what_it_says_on_each_kind_of_surface():
    space, model, holder = made_up_library()
    chosen, left_out = operations.choose(operations.Surface("madeup", "namespace"), space)
    assert [(o["name"], o["kind"]) for o in chosen] == [("from_pretrained", "loading"),
                                                        ("get_lora_model", "wrapping and preparing")]
    assert dict(left_out) == {"no kind": 2, "takes no model": 1}  # helper and is_quantized; quantize_everything
    chosen, left_out = operations.choose(operations.Surface("madeup.MadeUpModel", "model"), model)
    # nn.Module's own methods (forward, to, state_dict...) are torch's, not the library's: not read
    assert {o["name"]: o["kind"] for o in chosen} == {"MadeUpModel.merge_and_unload": "converting",
                                                      "MadeUpModel.train": "switching"}
    assert dict(left_out) == {"no kind": 1}  # get_input_embeddings
    chosen, _ = operations.choose(operations.Surface("madeup.MadeUpTrainer", "holder"), holder)
    assert {o["name"]: o["kind"] for o in chosen} == {"MadeUpTrainer.fit": "running", "MadeUpTrainer.train": "running"}
    with pytest.raises(TypeError, match="a namespace surface is a module"):
        operations.choose(operations.Surface("madeup.MadeUpModel", "namespace"), model)
    with pytest.raises(ValueError, match="the role is one of"):
        operations.Surface("madeup", "library")


def test_every_profiled_library_of_the_environment_is_read():
    measured_here = {slug for slug, module in modules().items()
                     if module.LIBRARY.status == "measured" and module.LIBRARY.requirement is None}
    left = measured_here - set(operations.SURFACES)
    # what a profile measures that is no library operation a user calls on a model: a process group's wrapper
    # (ddp, fsdp1, pipelining: the matrix's distributed columns) or a tool that watches a run (trackers, profilers)
    assert left == {"ddp", "fsdp1", "pipelining", "flop_counter", "mem_tracker", "module_tracker", "tensorboard",
                    "torch_profiler"}, left
    assert set(operations.SURFACES) <= set(modules())


def test_the_committed_table_is_what_the_rule_gives_on_the_installed_libraries():
    """In a fresh interpreter: the rule imports twenty libraries, which this worker should not keep."""
    run = subprocess.run([sys.executable, "-m", "tools.profiles.operations", "--check"], capture_output=True,
                         text=True, timeout=hang_guard(240), check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    doc = json.loads(operations.TABLE.read_text(encoding="utf-8"))
    kinds = {o["kind"] for entry in doc["libraries"].values() for o in entry["operations"]}
    assert kinds == {kind for kind, _ in operations.KINDS}, "a kind of operation no library has"
    assert all(entry["operations"] for entry in doc["libraries"].values())


# ---- the cells (tools/profiles/cells.py, docs/library_matrix.json) ----------------------------------------------

def committed_cells() -> dict:
    from tools.profiles import cells
    return json.loads(cells.MATRIX.read_text(encoding="utf-8"))


def test_the_held_out_part_is_a_fifth_of_every_cell_the_table_makes_each_drawn_by_its_seed_and_key():
    from tools.profiles import cells
    keys = cells.every_key()
    doc = committed_cells()
    assert doc["cells in the table"] == len(keys) == len(set(keys))
    assert doc["held out"] == {"seed": cells.HELD_OUT_SEED, "share": cells.HELD_OUT_SHARE}
    drawn = cells.held_out(keys)
    assert 0.17 < len(drawn) / len(keys) < 0.23, len(drawn) / len(keys)
    # each cell's draw is its own: the part of a smaller table is the same cells (the table grows, nothing moves)
    assert cells.held_out(keys[::3]) == drawn & set(keys[::3])
    assert set(doc["cells"]) <= set(keys), "a cell of an operation the table does not have"
    observed = {key.split("|")[0] for key in doc["cells"]}
    assert observed == {case.operation for case in cells.CASES}, "python -m tools.profiles.cells --write"
    table = {key.split("|")[0] for key in keys}
    assert set(cells.CANNOT_RUN_HERE) <= table - observed, "an operation said not to run here is not in the table, or runs"
    standing = doc["operations"]
    assert sum(s["observed"] for s in standing.values()) == len(observed)
    assert sum(s["operations"] for s in standing.values()) == len(table)
    assert all(s["observed"] + len(s["cannot run here"]) + s["not yet"] == s["operations"] for s in standing.values())
    odd = doc["unusual"]["cells"]
    assert set(odd) <= set(doc["cells"]) and doc["unusual"]["count"] == len(odd)
    assert sum(s["cells"] for s in standing.values()) == len(doc["cells"])
    assert sum(s["unusual"] for s in standing.values()) == len(odd)
    fixed = doc["unusual"]["fixes"]
    assert sum(s["with a fix"] for s in standing.values()) == len(fixed) == doc["unusual"]["with a fix"]
    for key, fix in fixed.items():  # each fix is shown by the same hook registered after the operation, as usual
        assert key in odd and fix["shown by"] == key.replace("|before", "|after") and fix["shown by"] not in odd
        assert fix["shown by"] in doc["cells"]


def test_a_fix_is_proposed_only_where_the_hook_registered_after_behaves_as_without_the_operation():
    from tools.profiles.cells import fixes
    observed = dict.fromkeys(["a:op|forward-hook|before", "a:op|forward-hook|after", "a:op|param-hook|before",
                              "a:op|param-hook|after", "a:op|global-forward-hook|after"], {})
    odd = {"a:op|forward-hook|before": ["never fires"], "a:op|param-hook|before": ["never fires"],
           "a:op|param-hook|after": ["never fires"], "a:op|global-forward-hook|after": ["fires otherwise"]}
    assert fixes(odd, observed) == {"a:op|forward-hook|before": {
        "fix": "register the hook after the operation", "shown by": "a:op|forward-hook|after"}}
    assert fixes(odd, {k: v for k, v in observed.items() if k != "a:op|forward-hook|after"}) == {}


def test_a_cell_is_unusual_by_what_differs_from_the_same_hook_without_the_operation():
    from tools.profiles.cells import unusual
    base = {"registered": True, "fires": {"forward": 1}, "given": ["the target after the operation"],
            "after remove": 0, "error": None}
    assert unusual(dict(base), base) == []
    assert unusual({**base, "fires": {"operation": 2, "forward": 1}}, base) == ["fires during the operation"]
    assert unusual({**base, "fires": {}, "given": []}, base) == ["never fires"]
    assert unusual({**base, "given": ["another Linear"]}, base) == ["given another object"]
    assert unusual({**base, "given": ["what it was registered on, before the operation"]}, base) == [
        "given the object it was registered on, no longer at its place"]
    assert unusual({**base, "fires": {"forward": 2}, "after remove": 1}, base) == [
        "fires otherwise", "fires after handle.remove()"]
    assert unusual({**base, "error": "backward: RuntimeError: x"}, base) == ["a run raises"]
    assert unusual({"registered": True, "operation raised": "TypeError: no"}, base) == ["the operation raised"]
    refused = {"registered": False, "why": "the target has no parameter"}
    assert unusual(refused, refused) == []  # refused with and without the operation alike
    assert unusual(refused, base) == ["could not be registered"]
    assert unusual(base, refused) == ["registered where it could not be without the operation"]


def test_a_sample_of_the_cells_is_observed_again_as_committed():
    """One case each run (rotating with the ISO week) and prune's removal, in a fresh interpreter (the cases import
    transformers, peft and accelerate); ``HOOKLAB_PROFILES=all``: every case (the weekly run)."""
    import datetime
    import os

    from tools.profiles import cells
    names = [case.operation for case in cells.CASES]
    if os.environ.get("HOOKLAB_PROFILES") == "all":
        chosen = names
    else:
        chosen = sorted({"prune:remove", names[datetime.date.today().isocalendar()[1] % len(names)]})
    argv = [sys.executable, "-m", "tools.profiles.cells", "--check"] + [f"--only={name}" for name in chosen]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=hang_guard(240), check=False)
    assert run.returncode == 0, f"{chosen}: " + run.stderr[-3000:]


def test_a_weight_hook_registered_before_pruning_still_fires_as_a_plain_run_shows():
    """The cell ``prune:l1_unstructured|param-hook|before`` against plain PyTorch, written without the generator:
    pruning moves the Parameter to ``weight_orig`` (the same object), so a hook on it still fires in backward."""
    from torch.nn.utils import prune

    layer = nn.Linear(4, 8)
    weight, seen = layer.weight, []
    handle = weight.register_hook(lambda grad: seen.append(grad.shape))
    try:
        prune.l1_unstructured(layer, "weight", amount=0.5)
        layer(torch.ones(2, 4)).sum().backward()
    finally:
        handle.remove()
    assert layer.weight_orig is weight and seen == [torch.Size([8, 4])]
    cell = committed_cells()["cells"]["prune:l1_unstructured|param-hook|before"]
    assert cell["fires"] == {"backward": 1} and cell["given"] == ["what it was registered on, before the operation"]


def test_a_forward_hook_registered_before_fuse_modules_fires_from_the_copy_as_a_plain_run_shows():
    """The cell ``torch_ao_quantization:fuse_modules|forward-hook|before`` against plain PyTorch, written without the
    generator: ``fuse_modules`` (``inplace=False``) deep-copies the model, the hooked Linear with it, so the hook
    fires on the copy's Linear inside the fused module, and ``handle.remove()`` on the original does not reach it."""
    from torch.ao.quantization import fuse_modules

    model = nn.Sequential(nn.Identity(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    seen: list[nn.Module] = []
    handle = model[1].register_forward_hook(lambda module, args, out: seen.append(module))
    fused = fuse_modules(model, [["1", "2"]])
    fused(torch.ones(2, 4))
    handle.remove()
    fused(torch.ones(2, 4))
    assert len(seen) == 2 and seen[0] is seen[1] is fused[1][0] and seen[0] is not model[1]
    cell = committed_cells()["cells"]["torch_ao_quantization:fuse_modules|forward-hook|before"]
    assert cell["fires"] == {"forward": 1} and cell["given"] == ["another Linear"] and cell["after remove"] == 1
    assert committed_cells()["unusual"]["cells"]["torch_ao_quantization:fuse_modules|forward-hook|before"] == [
        "given another object", "fires after handle.remove()"]


def test_the_lookup_lands_on_an_operation_s_entry_when_asked_by_library_method_and_hook():
    """Every observed operation has an entry of its own in course.ask's index, found by its library's and its own
    names; asked as ``<library> <method> forward hook`` (the template is the measure's, written before it ran), the
    operation's entry is among the first three for at least 85 % of them (137 of 160 when written: the misses are
    mostly methods two classes of a library share, ``attribute``, ``delete_adapter``, ``save_pretrained``, ``train``,
    ``forward``, ``unload``). The entries once held the hook families and what they do too (148 of 160), which moved a
    held-out learner's question off its lesson (tests/tools/test_own_words.py)."""
    from hooklab import course
    doc = committed_cells()
    operations = sorted({key.split("|")[0] for key in doc["cells"]})
    per_library = Counter(operation.split(":", 1)[0] for operation in operations)
    found = 0
    for operation in operations:
        slug, name = operation.split(":", 1)
        hits = course.ask(f"{slug.replace('_', ' ')} {name.rsplit('.', 1)[-1]} forward hook", k=3)
        # a library of one operation (FSDP2's fully_shard): its page is the operation's, and the lookup shows one
        # hit per page, the library's own entry
        found += any(hit.kind == "profile" and (hit.title_en.split(": ", 1)[-1].startswith(name.replace(".", " ") + ",")
                                                or per_library[slug] == 1 and hit.page == f"profiles-{slug}.html")
                     for hit in hits)
    assert found >= 0.85 * len(operations), f"{found} of {len(operations)} operations found by their own names"
