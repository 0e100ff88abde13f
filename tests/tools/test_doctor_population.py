"""The doctor's population (docs/doctor_population.json, tools/doctor/) stays true, and explain_hook stays right on it.

- Every run: a sample of setups (one of each cause class, then setups drawn by the ISO week) is observed again and
  must equal the record; a few setups' truth is checked against plain PyTorch written here; each round's held-out
  part is the one drawn with its committed seed from its own setups; the committed agreement tables hold the
  figures measured, and a sample of each held-out part graded again agrees with them.
- Every setup: set ``HOOKLAB_DOCTOR=all`` (the weekly job) and the whole population is observed again and the whole
  held-out part graded again (a few minutes).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.utils.prune
from torch import nn

from tools.doctor import generate, grade, setups

ROOT = Path(__file__).resolve().parents[2]
ALL = os.environ.get("HOOKLAB_DOCTOR") == "all"
pytestmark = pytest.mark.timeout(3600 if ALL else 300)
AFTER_2 = 0.95  # the second round's held-out part, measured once after the changes (docs/doctor_agreement_2.json)
AFTER_4 = 0.95  # the fourth round's held-out part, measured once after the changes (docs/doctor_agreement_4.json)
# the fifth round's held-out part (docs/doctor_agreement_5.json): set after seeing the figure measured once after the
# changes (31 of 31), at the 95 % the earlier rounds ask, not at that figure: 31 setups, one of them is 3 %
AFTER_5 = 0.95
AFTER_7 = 0.95  # the seventh round's (docs/doctor_agreement_7.json): the 95 % the earlier rounds ask (measured: 66 of 66)
AFTER_6 = 0.95  # the sixth round's (docs/doctor_agreement_6.json): the 95 % the earlier rounds ask (measured: 84 of 84)
ALL_ROUNDS = 0.95  # every round's held-out part together, each as measured (issue 63 asks 95 %)


@pytest.fixture(scope="module")
def doc():
    return generate.load()


@pytest.fixture(scope="module")
def agreement():
    return json.loads(generate.AGREEMENT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def agreement_2():
    return json.loads(generate.AGREEMENT_2.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def agreement_4():
    return json.loads(generate.AGREEMENT_4.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def agreement_5():
    return json.loads(generate.AGREEMENT_5.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def agreement_6():
    return json.loads(generate.AGREEMENT_6.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def agreement_7():
    return json.loads(generate.AGREEMENT_7.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def agreement_3():
    return json.loads(generate.AGREEMENT_3.read_text(encoding="utf-8"))


def test_the_population_is_large_composed_and_labelled(doc):
    keys = generate.valid(doc)
    assert len(keys) >= 2000
    classes = {doc["setups"][k]["class"] for k in keys}
    assert classes <= set(setups.CLASSES), classes - set(setups.CLASSES)
    assert "unexplained" not in classes
    assert len(classes) >= 15
    for factor, values in doc["factors"].items():  # every value of every factor makes setups
        position = list(doc["factors"]).index(factor)
        assert {k.split("/")[position] for k in keys} == set(values), factor
    # the n/a setups say why
    assert all(r["na"] for r in doc["setups"].values() if "na" in r)


def test_the_codes_name_the_classes():
    from hooklab.explain import CODES, HookExplanation
    assert set(setups.CLASSES) <= set(CODES)
    assert "codes" in HookExplanation.__dataclass_fields__


@pytest.mark.parametrize("round_", sorted(generate.ROUNDS))
def test_the_held_out_part_is_the_drawn_one(doc, round_):
    seed, path, _agreement = generate.ROUNDS[round_]
    held = json.loads(path.read_text(encoding="utf-8"))
    keys = generate.valid(doc, round_)  # each round's part is drawn from that round's setups only
    assert held["seed"] == seed and held["of"] == len(keys)
    assert held["ids"] == sorted(random.Random(held["seed"]).sample(keys, round(held["fraction"] * len(keys))))


def test_the_second_round_adds_setups_and_keeps_the_first(doc):
    """The first round's keys come first, in their order, and every second-round setup has a new level."""
    keys = list(doc["setups"])
    first = [k for k in keys if setups.round_of(k) == 1]
    assert keys[:len(first)] == first and len(first) == 3312
    second = generate.valid(doc, 2)
    assert len(second) >= 800
    for factor, levels in setups.ROUND_2.items():  # each new level makes valid setups
        position = ("on", "between", "ctx", "does").index(factor)
        for level in levels:
            assert any(k.split("/")[position] == level for k in second), level
    new_classes = {"several_passes", "not_accumulated", "outside_backward_inputs", "vmap"}
    assert new_classes <= {doc["setups"][k]["class"] for k in second}


def _adds_setups_and_keeps_the_others(doc, number: int, *, earlier: int, at_least: int) -> list[str]:
    """The earlier rounds' keys come first, in their order (``earlier`` of them); round ``number`` has at least
    ``at_least`` valid setups and each of its new levels makes some; returns them."""
    keys = list(doc["setups"])
    before = [k for k in keys if setups.round_of(k) < number]
    assert keys[:len(before)] == before and len(before) == earlier
    added = generate.valid(doc, number)
    assert len(added) >= at_least
    for factor, levels in getattr(setups, f"ROUND_{number}").items():
        position = ("on", "between", "ctx", "does").index(factor)
        for level in levels:
            assert any(k.split("/")[position] == level for k in added), level
    return added


def test_the_third_round_adds_setups_and_keeps_the_others(doc):
    """The first two rounds' keys come first, in their order; every third-round setup has a new level, and each
    new level makes valid setups."""
    _adds_setups_and_keeps_the_others(doc, 3, earlier=3312 + 1164, at_least=900)


def test_the_third_rounds_truth_is_what_the_libraries_do(doc):
    """Third-round records against the same setups written here with the libraries themselves: fuse_modules
    returns a copy, accelerate's cpu_offload puts a new Parameter in, generate calls the model once per new token
    (the later calls see one position: the KV cache), a Lightning Trainer calls it in its sanity check, training
    and validation."""
    from torch.ao.quantization import fuse_modules
    x = torch.randn(4, 4)
    torch.manual_seed(0)
    m = setups.Net("tensor", act=True)
    seen = []
    m.layers[0].register_forward_hook(lambda mod, a, o: seen.append(mod))
    fused = fuse_modules(m, [["layers.0.fc", "layers.0.act"]])
    fused(x).sum().backward()
    record = doc["setups"]["forward/fuse_copy/plain/none/tensor"]
    assert record["truth"]["fired"] == len(seen) == 1 and seen[0] is not m.layers[0] and record["class"] == "copy_ran"
    import accelerate
    m = setups.Net("tensor")
    weight = m.layers[0].fc.weight
    n, _ = _plain(m, weight.register_hook, lambda m: (accelerate.cpu_offload(m, execution_device=torch.device("cpu")),
                                                      m(x).sum().backward()))
    record = doc["setups"]["param/offload/plain/none/tensor"]
    assert record["truth"]["fired"] == n == 0 and m.layers[0].fc.weight is not weight
    assert record["class"] == "parameter_replaced"
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=16, bos_token_id=0,
                                     eos_token_id=0))
    lengths = []
    gpt.transformer.h[0].register_forward_hook(lambda mod, a, o: lengths.append(a[0].shape[1]))
    gpt.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0)
    assert lengths == [3, 1, 1] == [3] + [1] * (doc["setups"]["forward/none/generate/none/tensor"]["truth"]["fired"] - 1)
    m = setups.Net("tensor")
    modes = []
    m.layers[0].register_forward_hook(lambda mod, a, o: modes.append((torch.is_grad_enabled(), mod.training)))
    setups._trainer_fit(m, x)
    record = doc["setups"]["forward/none/trainer/none/tensor"]
    assert record["truth"]["fired"] == len(modes) == 3 and record["class"] == "several_calls"
    assert modes == [(False, False), (True, True), (False, False)]  # sanity check, training, validation


def test_the_doctor_reads_the_calls_and_other_models_from_what_ran():
    """The doctor says which calls ran without gradients and in eval mode (a Trainer's loops, generate), and
    another hooked model of the same class in the process is not taken for the one the model lost."""
    from hooklab import explain_hook
    for key, words in (("forward/none/trainer/none/tensor", "1 with gradients and 2 without, 2 in eval mode"),
                       ("forward/none/generate/none/tensor", "all 3 without gradients"),
                       ("forward/none/chunked/none/tensor", "every call with gradients")):
        truth, report, why = setups.observe(key, lambda b: explain_hook(b.model, b.name, run=b.run))
        assert any(words in r for r in report.reasons), (key, report.reasons)
    for key in ("param/offload/other_model/none/tensor", "param/quantize/other_model/none/tensor"):
        truth, report, why = setups.observe(key, lambda b: explain_hook(b.model, b.name, run=b.run))
        assert "parameter_replaced" in report.codes and "module_replaced" not in report.codes, (key, report.codes)
    truth, report, why = setups.observe("param/offload/plain/none/tensor",
                                        lambda b: explain_hook(b.model, b.name, run=b.run))
    assert any("meta device" in r and "offloading hook" in r for r in report.reasons), report.reasons


def test_a_hooked_lookalike_another_model_keeps_changes_no_verdict(doc):
    """A notebook's process keeps other models: hooked Linears of the hooked module's shapes (a forward hook, a
    tensor hook, a post-accumulate-grad hook) that the model never held. The doctor's answer on setups whose hooks
    did not fire (the replaced module or Parameter, an offloading hook's, assign=True's, a quantizer's) is the same
    with them in the process as without: only what ties an old object to this model counts."""
    from hooklab import explain_hook
    silent = sorted(k for k in generate.valid(doc) if doc["setups"][k]["class"] in ("parameter_replaced",
                                                                                    "module_replaced"))
    keys = ["param/offload/other_model/none/tensor", "param/offload/ckpt_early/none/tensor",
            "post_accumulate/assign/trainer/none/tensor"] + random.Random(generate.week()).sample(silent, 12)

    def codes(key):
        truth, report, why = setups.observe(key, lambda b: explain_hook(b.model, b.name, run=b.run))
        return getattr(report, "codes", None) or type(report).__name__

    alone = {key: codes(key) for key in keys}
    lookalikes = [nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)]
    lookalikes[0].register_forward_hook(lambda module, args, output: None)
    lookalikes[1].weight.register_hook(lambda grad: grad)
    lookalikes[2].weight.register_post_accumulate_grad_hook(lambda param: None)
    beside = {key: codes(key) for key in keys}
    assert beside == alone, {k: (alone[k], beside[k]) for k in keys if alone[k] != beside[k]}
    assert all(doc["setups"][k]["class"] in alone[k] for k in keys[:3]), alone


def test_a_sample_is_observed_as_recorded(doc):
    keys = list(doc["setups"]) if ALL else generate.sample(doc, 30, generate.week())
    assert generate.check(keys, doc) == []


@pytest.mark.parametrize("key", ["node/none/pool_before/removes/tensor", "forward_pre/none/pool_before/raises/model_output",
                                 "forward_pre/none/pool_before/registers/tensor"])
def test_a_setup_run_in_a_thread_pool_is_observed_the_same_each_time(doc, key):
    """The pool context runs its two chunks in pool threads one after the other, and waits for both: run at once,
    which thread registered last, and whether the second chunk's hook had fired when the first one's raise was
    counted, was a race (one CI run observed one count, the record held the other)."""
    with generate._quiet():
        seen = [generate.observe(key)["truth"] for _ in range(4)]
    assert all(truth == doc["setups"][key]["truth"] for truth in seen), (seen, doc["setups"][key]["truth"])


def test_the_check_catches_a_changed_record(doc):
    key = next(k for k in generate.valid(doc) if doc["setups"][k]["class"] == "several_calls"
               and k.startswith("forward/none/chunked/"))
    changed = json.loads(json.dumps(doc))
    changed["setups"][key]["truth"]["fired"] = 1
    assert [line for line in generate.check([key], changed) if line.startswith(key)]


def _plain(model, hook_on, step):
    fired = []
    hook_on(lambda *a: fired.append(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step(model)
    return len(fired), [str(w.message) for w in caught]


def test_the_truth_is_what_plain_pytorch_does(doc):
    """Three records against the same setups written here with plain PyTorch."""
    torch.manual_seed(0)
    m = setups.Net("tensor")
    x = torch.randn(4, 4)
    n, _ = _plain(m, m.layers[0].register_forward_hook, lambda m: sum(m(c).sum() for c in x.chunk(2)).backward())
    assert doc["setups"]["forward/none/chunked/none/tensor"]["truth"]["fired"] == n == 2
    m = setups.Net("dict")
    n, warned = _plain(m, m.layers[0].register_full_backward_hook, lambda m: m(x).sum().backward())
    record = doc["setups"]["backward/none/plain/none/dict"]
    assert record["truth"]["fired"] == n == 0 and record["class"] == "dict_output"
    assert record["truth"]["warned_dict"] == any("Tensor or a tuple of Tensors" in w for w in warned)
    m = setups.Net("tensor")
    m.layers[0].fc.weight.register_hook(lambda g: None)
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        fired = []
        p = m.layers[0].fc.weight
        p.register_hook(lambda g: fired.append(1))
        m.double()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)
    m(x.double()).sum().backward()
    assert m.layers[0].fc.weight is p and p.grad is not None  # the same object, a gradient, and no firing
    assert doc["setups"]["param/swap_dtype/plain/none/tensor"]["truth"]["fired"] == len(fired) == 0


def test_the_new_levels_truth_is_what_plain_pytorch_does(doc):
    """Second-round records against plain PyTorch: two backward passes, torch.autograd.grad, weight_norm."""
    x = torch.randn(4, 4)
    torch.manual_seed(0)
    m = setups.Net("tensor")

    def twice(m):
        loss = m(x).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    n, _ = _plain(m, m.layers[0].register_full_backward_hook, twice)
    record = doc["setups"]["backward/none/retain_graph/none/tensor"]
    assert record["truth"]["fired"] == n == 2 and record["class"] == "several_passes"
    m = setups.Net("tensor")
    n, _ = _plain(m, m.layers[0].fc.weight.register_post_accumulate_grad_hook,
                  lambda m: torch.autograd.grad(m(x).sum(), list(m.parameters())))
    record = doc["setups"]["post_accumulate/none/autograd_grad/none/tensor"]
    assert record["truth"]["fired"] == n == 0 and record["class"] == "not_accumulated"
    m = setups.Net("tensor")
    fired = []
    m.layers[0].fc.weight.register_hook(lambda g: fired.append(1))
    torch.nn.utils.parametrizations.weight_norm(m.layers[0].fc, "weight")
    m(x).sum().backward()
    record = doc["setups"]["param/weight_norm/plain/none/tensor"]
    assert record["truth"]["fired"] == len(fired) == 0 and record["class"] == "parameter_replaced"


def test_grading():
    class Answer:
        def __init__(self, codes):
            self.codes, self.cause, self.reasons = codes, "ran", []
    assert grade.grade("no_grad", 0, Answer(["no_grad"]))["verdict"] == "right"
    assert grade.grade("no_grad", 0, Answer(["fired", "no_grad"]))["false_fired"]
    assert grade.grade("several_calls", 2, Answer(["several_calls", "module_replaced"]))["verdict"] == "wrong"
    assert grade.grade("fired", 1, RuntimeError("a crash"))["verdict"] == "crash"
    step_error = RuntimeError("the step")
    step_error.hooklab_explanation = Answer(["step_raised"])
    assert grade.grade("step_raised", 0, step_error)["verdict"] == "right"


def test_the_committed_agreement_holds_the_figures(agreement):
    after = agreement["after"]["heldout"]
    total = after["total"]
    assert total["n"] == len(json.loads(generate.HELDOUT.read_text(encoding="utf-8"))["ids"])
    assert total["right"] / total["n"] >= 0.92  # measured once: 508 of 549
    assert total["crash"] == 0 and total["false_fired"] == 0
    assert sum(v["n"] for v in after["per_class"].values()) == total["n"]
    assert "wrong" not in after  # which held-out setups it gets wrong is not kept
    before = agreement["before"]["heldout"]["total"]
    assert before["n"] == total["n"] and before["right"] < total["right"]


def test_the_second_round_agreement_holds_the_figures(agreement_2):
    """Graded once before the doctor was changed, once after; the new held-out part only, per class."""
    held = json.loads(generate.HELDOUT_2.read_text(encoding="utf-8"))
    before, after = agreement_2["before"]["heldout"], agreement_2["after"]["heldout"]
    for part in (before, after):
        assert part["total"]["n"] == len(held["ids"]) == sum(v["n"] for v in part["per_class"].values())
        assert part["total"]["crash"] == 0 and part["total"]["false_fired"] == 0
        assert "wrong" not in part  # which held-out setups it gets wrong is not kept
    assert after["total"]["right"] / after["total"]["n"] >= AFTER_2
    assert before["total"]["right"] < after["total"]["right"]
    assert set(before["per_class"]) == set(after["per_class"])


def test_the_third_round_agreement_holds_the_figures(agreement, agreement_2, agreement_3):
    """Graded once before the doctor was changed, once after, on the third round's held-out part; and every
    round's held-out part together, each as measured after its round, reaches the 95 % asked."""
    held = json.loads(generate.HELDOUT_3.read_text(encoding="utf-8"))
    before, after = agreement_3["before"]["heldout"], agreement_3["after"]["heldout"]
    for part in (before, after):
        assert part["total"]["n"] == len(held["ids"]) == sum(v["n"] for v in part["per_class"].values())
        assert part["total"]["crash"] == 0 and part["total"]["false_fired"] == 0
        assert "wrong" not in part
    assert after["total"]["right"] >= before["total"]["right"]
    parts = [agreement["after"]["heldout"], agreement_2["after"]["heldout"], after]
    right, n = sum(p["total"]["right"] for p in parts), sum(p["total"]["n"] for p in parts)
    assert right / n >= ALL_ROUNDS, (right, n)


@pytest.mark.parametrize("round_", sorted(generate.ROUNDS))
def test_a_sample_of_each_held_out_part_agrees(doc, round_):
    """A sample of each round's held-out part (all of it weekly) graded again agrees with the committed figure: the
    whole part at that figure (less one setup), a sample of 25 with room for chance (the first round, measured at
    92.5 %: 3 wrong at most; the others, at 100 %: 2)."""
    _seed, path, agreement_path = generate.ROUNDS[round_]
    held = sorted(generate.heldout_ids(path))
    keys = held if ALL else random.Random(generate.week()).sample(held, 25)
    result = generate.measure(doc, keys)
    t = result["total"]
    assert t["crash"] == 0 and t["false_fired"] == 0 and t["changed"] == 0, result["wrong"]
    figure = json.loads(agreement_path.read_text(encoding="utf-8"))["after"]["heldout"]["total"]
    assert t["right"] >= (figure["right"] / figure["n"] * t["n"] - 1 if ALL else t["n"] - (3 if round_ == 1 else 2)), \
        result["wrong"]


def test_a_doctor_without_codes_is_read_from_its_words():
    class Old:
        cause, reasons = "ran", ["'0' ran 1 time(s) as a module and its hooks fired as expected (hook 1)"]
    assert grade.codes_of(Old()) == ["fired"]
    Old.cause, Old.reasons = "copy", []
    assert grade.codes_of(Old()) == ["copy_ran"]


def test_setups_clean_up_after_themselves():
    from torch.nn.modules import module as module_globals
    before = len(module_globals._global_forward_hooks)
    for key in ("global/none/plain/raises/tensor", "global/none/pool_before/none/tensor",
                "global_pre/none/plain/raises/tensor", "global_pre/data_parallel/plain/none/tensor"):
        truth, _result, why = setups.observe(key)
        assert why is None and truth is not None
    assert len(module_globals._global_forward_hooks) == before
    assert not torch.__future__.get_swap_module_params_on_conversion()
    assert isinstance(setups.Block(), nn.Module)


def test_the_fourth_round_adds_setups_and_keeps_the_others(doc):
    """The first three rounds' keys come first, in their order; every fourth-round setup has a new level, and each
    new level makes valid setups of its new class."""
    fourth = _adds_setups_and_keeps_the_others(doc, 4, earlier=3312 + 1164 + 1464, at_least=450)
    classes = {doc["setups"][k]["class"] for k in fourth}
    assert {"processes", "recompiled", "qat_swapped", "not_reached"} <= classes


def test_the_fourth_rounds_truth_is_what_pytorch_does(doc):
    """Fourth-round records against the same setups written here: a forward hook fires in each DataLoader worker
    (the worker sends its count back), prepare_qat registers a forward hook again on the QAT Linear it swaps in (and
    not a full backward hook), a hook added after the first compiled call fires once a new input shape makes it
    recompile, and repr(model) calls no module."""
    x = torch.randn(4, 4)

    class Counted(torch.utils.data.Dataset):
        def __init__(self, m):
            self.m = m

        def __len__(self):
            return 2

        def __getitem__(self, i):
            fired = []
            handle = self.m.layers[0].register_forward_hook(lambda mod, a, o: fired.append(1))
            self.m(x.chunk(2)[i]).sum().backward()
            handle.remove()
            return len(fired)
    torch.manual_seed(0)
    m = setups.Net("tensor")
    seen = []
    m.layers[0].register_forward_hook(lambda mod, a, o: seen.append(1))
    loader = torch.utils.data.DataLoader(Counted(m), batch_size=None, num_workers=2, timeout=60,
                                         multiprocessing_context="fork")
    in_workers = sum(loader)
    record = doc["setups"]["forward/none/workers/none/tensor"]
    assert seen == [] and in_workers == 2  # each worker's copy ran the hook (the hook added there, and ours)
    assert record["truth"]["fired"] == record["truth"]["in_processes"] == 2 and record["class"] == "processes"
    from torch.ao.quantization import get_default_qat_qconfig, prepare_qat
    m = setups.Net("tensor").train()
    old = m.layers[0].fc
    forward, backward = [], []
    old.register_forward_hook(lambda mod, a, o: forward.append(mod))
    old.register_full_backward_hook(lambda mod, gi, go: backward.append(mod))
    m.qconfig = get_default_qat_qconfig("fbgemm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_qat(m, inplace=True)
    m(x).sum().backward()
    assert m.layers[0].fc is not old and forward == [m.layers[0].fc] and backward == []
    assert doc["setups"]["forward/prepare_qat/plain/none/tensor"]["class"] == "qat_swapped"
    assert doc["setups"]["backward/prepare_qat/plain/none/tensor"]["class"] == "module_replaced"
    record = doc["setups"]["forward/compile_eager_recompile/plain/none/tensor"]
    assert record["truth"]["fired"] == 1 and record["class"] == "recompiled"
    for ctx in ("repr_read", "other_entry"):
        record = doc["setups"][f"forward/none/{ctx}/none/tensor"]
        assert record["truth"]["fired"] == 0 and record["class"] == "not_reached"


def test_the_fourth_round_agreement_holds_the_figures(agreement_4):
    """Graded once before the doctor was changed, once after, on the fourth round's held-out part (98 setups drawn
    with seed 6304 before the change), per class; the doctor was changed on the round's other setups only."""
    _holds_the_figures(agreement_4, generate.HELDOUT_4, AFTER_4)


def _holds_the_figures(agreement, heldout, floor, classes=frozenset()):
    """A round's held-out part graded before and after: every drawn setup graded, none crashed or changed, which
    ones are wrong not kept, the same classes (``classes`` among them), no "fired" of a hook that did not fire after,
    more right after than before, and after at least ``floor``."""
    held = json.loads(heldout.read_text(encoding="utf-8"))
    before, after = agreement["before"]["heldout"], agreement["after"]["heldout"]
    for part in (before, after):
        assert part["total"]["n"] == len(held["ids"]) == sum(v["n"] for v in part["per_class"].values())
        assert part["total"]["crash"] == 0 and part["total"]["changed"] == 0
        assert "wrong" not in part  # which held-out setups it gets wrong is not kept
    assert set(before["per_class"]) == set(after["per_class"]) >= classes
    assert after["total"]["false_fired"] == 0
    assert before["total"]["right"] < after["total"]["right"]
    assert after["total"]["right"] / after["total"]["n"] >= floor


def test_a_setup_this_process_cannot_observe_is_skipped_not_changed(doc, monkeypatch):
    """DataLoader workers forked from a process whose autograd started its threads (torch.compile's aot_eager with a
    raising hook does) cannot run backward; such a process skips the worker setups (their records stand) instead of
    reporting a change or grading them."""
    monkeypatch.setattr(setups, "autograd_refuses_fork", lambda: True)
    key = "forward/none/workers/none/tensor"
    with pytest.raises(setups.Unobservable):
        setups.observe(key)
    assert generate.check([key], doc) == []
    result = generate.measure(doc, [key])
    assert result["unobservable"] == [key] and result["total"]["n"] == 0


def test_the_fifth_round_adds_setups_and_keeps_the_others(doc):
    """The first four rounds' keys come first, in their order; every fifth-round setup has a new level, and each
    new level makes valid setups of its new class."""
    fifth = _adds_setups_and_keeps_the_others(doc, 5, earlier=3312 + 1164 + 1464 + 536, at_least=150)
    classes = {doc["setups"][k]["class"] for k in fifth}
    assert {"assisted", "fused", "no_grad"} <= classes


def test_the_fifth_rounds_truth_is_what_the_libraries_do(doc):
    """Fifth-round records against the same libraries used here: assisted generation calls the hooked model fewer
    times than it makes new tokens (the assistant drafts, the model verifies several in one call), and after
    diffusers' fuse_qkv_projections a hook on to_q never fires while the fused to_qkv runs."""
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=16, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    torch.manual_seed(1)
    assistant = GPT2LMHeadModel(config)
    calls = []
    model.transformer.h[0].register_forward_hook(lambda mod, a, o: calls.append(1))
    ids = torch.tensor([[1, 2, 3]])
    out = model.generate(ids, assistant_model=assistant, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                         pad_token_id=0)
    assert out.shape[1] - ids.shape[1] == 8 and 1 < len(calls) < 8
    record = doc["setups"]["forward/none/assisted/none/tensor"]
    assert record["truth"]["fired"] == len(calls) and record["class"] == "assisted"
    assert doc["setups"]["backward/none/assisted/none/tensor"]["class"] == "no_grad"
    from diffusers import SD3Transformer2DModel
    torch.manual_seed(0)
    m = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=4,
                              num_attention_heads=2, joint_attention_dim=8, caption_projection_dim=8,
                              pooled_projection_dim=8, out_channels=4, pos_embed_max_size=8)
    attn = m.transformer_blocks[0].attn
    on_q, on_qkv = [], []
    attn.to_q.register_forward_hook(lambda mod, a, o: on_q.append(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fuse_qkv_projections()
    attn.to_qkv.register_forward_hook(lambda mod, a, o: on_qkv.append(1))
    m(hidden_states=torch.randn(1, 4, 8, 8), encoder_hidden_states=torch.randn(1, 3, 8),
      pooled_projections=torch.randn(1, 8), timestep=torch.ones(1)).sample.sum().backward()
    assert on_q == [] and on_qkv == [1]
    for on in ("forward", "param", "backward"):
        record = doc["setups"][f"{on}/fuse_qkv/plain/none/tensor"]
        assert record["truth"]["fired"] == 0 and record["class"] == "fused"


def test_the_fifth_round_agreement_holds_the_figures(agreement_5):
    """Graded once before the doctor was changed, once after, on the fifth round's held-out part (31 setups drawn
    with seed 6305 before the change), per class; the doctor was changed on the round's other setups only."""
    _holds_the_figures(agreement_5, generate.HELDOUT_5, AFTER_5, {"assisted", "fused"})
    held = json.loads(generate.HELDOUT_5.read_text(encoding="utf-8"))
    rest = agreement_5["after"]["rest_of_round_5"]["total"]
    assert rest["n"] + len(held["ids"]) == held["of"] and rest["crash"] == 0 and rest["false_fired"] == 0


def test_the_sixth_round_adds_setups_and_keeps_the_others(doc):
    """The first five rounds' keys come first, in their order; every sixth-round setup has a new level, and each new
    level makes valid setups; the new class is among them, with a step that raised (two backward passes through one
    cached weight)."""
    sixth = _adds_setups_and_keeps_the_others(doc, 6, earlier=3312 + 1164 + 1464 + 536 + 180, at_least=400)
    classes = {doc["setups"][k]["class"] for k in sixth}
    assert {"parametrize_cached", "several_calls", "fused", "step_raised"} <= classes


def test_the_sixth_rounds_truth_is_what_pytorch_does(doc):
    """Sixth-round records against plain PyTorch written here: a forward hook on a weight's parametrization fires at
    each call of the Linear, once for two under parametrize.cached(); a second backward through the cached weight
    raises; and diffusers' fused projection changed since fusing still leaves the hook on to_q silent."""
    from torch.nn.utils import parametrize

    class Times(nn.Module):
        def forward(self, w):
            return w * 1.0

    def firings(cached: bool, accumulate: bool = False) -> tuple[int, str | None]:
        torch.manual_seed(0)
        fc = nn.Linear(4, 4)
        parametrize.register_parametrization(fc, "weight", Times())
        fired = []
        fc.parametrizations.weight[0].register_forward_hook(lambda mod, a, o: fired.append(1))
        context = parametrize.cached() if cached else contextlib.nullcontext()
        try:
            with context:
                if accumulate:
                    for c in torch.randn(4, 4).chunk(2):
                        fc(c).sum().backward()
                else:
                    sum(fc(c).sum() for c in torch.randn(4, 4).chunk(2)).backward()
        except RuntimeError as exc:
            return len(fired), str(exc)
        return len(fired), None

    assert firings(cached=False) == (2, None) and firings(cached=True) == (1, None)
    fired, error = firings(cached=True, accumulate=True)
    assert fired == 1 and "backward through the graph a second time" in error
    for between, fired, cls in (("parametrized", 2, "several_calls"), ("parametrized_cached", 1, "parametrize_cached")):
        record = doc["setups"][f"forward/{between}/chunked/none/tensor"]
        assert (record["truth"]["fired"], record["class"]) == (fired, cls)
    record = doc["setups"]["forward/parametrized_cached/grad_accum/none/tensor"]
    assert record["class"] == "step_raised" and "second time" in record["truth"]["error"]
    for on in ("forward", "param"):
        record = doc["setups"][f"{on}/fuse_qkv_trained/plain/none/tensor"]
        assert record["truth"]["fired"] == 0 and record["class"] == "fused"


def test_the_sixth_round_agreement_holds_the_figures(agreement_6):
    """Graded once before the doctor's parametrize.cached() and trained-fused answers (the doctor of 7031d65) and
    once after, on the sixth round's held-out part (84 setups drawn with seed 6306 before either was graded), per
    class; the doctor was changed against the round's other setups only."""
    _holds_the_figures(agreement_6, generate.HELDOUT_6, AFTER_6, {"parametrize_cached", "fused"})
    held = json.loads(generate.HELDOUT_6.read_text(encoding="utf-8"))
    rest = agreement_6["after"]["rest_of_round_6"]["total"]
    assert rest["n"] + len(held["ids"]) == held["of"] and rest["crash"] == 0 and rest["false_fired"] == 0
    assert agreement_6["before"]["rest_of_round_6"]["total"]["right"] < rest["right"]


def test_the_seventh_round_adds_setups_and_keeps_the_others(doc):
    """The first six rounds' keys come first, in their order; every seventh-round setup has a new level, and each new
    level makes valid setups: the deprecated weight_norm, and a parameter hook with a hook on its module too."""
    seventh = _adds_setups_and_keeps_the_others(doc, 7, earlier=3312 + 1164 + 1464 + 536 + 180 + 450, at_least=300)
    classes = {doc["setups"][k]["class"] for k in seventh}
    assert {"parameter_replaced", "fired", "no_grad", "module_replaced"} <= classes


def test_the_seventh_rounds_truth_is_what_pytorch_does(doc):
    """Seventh-round records against plain PyTorch written here: the deprecated torch.nn.utils.weight_norm deletes
    the Parameter ``weight`` (a hook on it never fires, one on ``weight_g`` does); after load_state_dict(assign=True)
    a hook on the old weight never fires while the module's own forward hook does; pruning keeps the Parameter (its
    hook fires), so a silent one under no_grad is the no_grad's."""
    def firings(change) -> tuple[int, int, int]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        fired = {"old": 0, "module": 0, "g": 0}
        old = model[0].weight
        old.register_hook(lambda g: fired.__setitem__("old", fired["old"] + 1))
        model[0].register_forward_hook(lambda m, a, o: fired.__setitem__("module", fired["module"] + 1))
        change(model)
        if hasattr(model[0], "weight_g"):
            model[0].weight_g.register_hook(lambda g: fired.__setitem__("g", fired["g"] + 1))
        model(torch.randn(3, 4)).sum().backward()
        return fired["old"], fired["module"], fired["g"]

    def legacy(model):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.nn.utils.weight_norm(model[0], "weight")
        assert "weight" not in model[0]._parameters
    assert firings(legacy) == (0, 1, 1)
    assert firings(lambda m: m.load_state_dict({k: v.clone() for k, v in m.state_dict().items()}, assign=True)) == \
        (0, 1, 0)
    assert firings(lambda m: torch.nn.utils.prune.l1_unstructured(m[0], "weight", amount=0.25)) == (1, 1, 0)
    for key, fired, cls in (("param/weight_norm_legacy/plain/none/tensor", 0, "parameter_replaced"),
                            ("forward/weight_norm_legacy/plain/none/tensor", 1, "fired"),
                            ("param/assign/plain/module_hook_too/tensor", 0, "parameter_replaced"),
                            ("param/prune/plain/module_hook_too/tensor", 1, "fired"),
                            ("param/prune/no_grad/module_hook_too/tensor", 0, "no_grad")):
        record = doc["setups"][key]
        assert (record["truth"]["fired"], record["class"]) == (fired, cls), key
    assert doc["setups"]["param/assign/plain/module_hook_too/tensor"]["truth"]["other_fired"] == 1


def test_the_seventh_round_agreement_holds_the_figures(agreement_7):
    """Graded once before the doctor's answer for a hooked Parameter left behind while the module's own hooks ran
    (the doctor of 2c99d31) and once after, on the seventh round's held-out part (66 setups drawn with seed 6307
    before either was graded), per class; the doctor was changed against the round's other setups only. Six labels
    were corrected after the first grading (a parameter that pruning, a parametrization or to_empty keeps, silent
    under no_grad, is no_grad's): the held-out part was graded again before the change with them."""
    _holds_the_figures(agreement_7, generate.HELDOUT_7, AFTER_7, {"parameter_replaced"})
    relabelled = agreement_7["before_relabelled"]["heldout"]["total"]
    assert relabelled["right"] < agreement_7["after"]["heldout"]["total"]["right"]
    held = json.loads(generate.HELDOUT_7.read_text(encoding="utf-8"))
    rest = agreement_7["after"]["rest_of_round_7"]["total"]
    assert rest["n"] + len(held["ids"]) == held["of"] and rest["crash"] == 0 and rest["false_fired"] == 0
    assert agreement_7["before"]["rest_of_round_7"]["total"]["right"] < rest["right"]
