"""hooklab.nonfinite: find_nonfinite against plain-PyTorch truths (hand-written global hooks, detect_anomaly)."""
from __future__ import annotations

import re
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import hooklab
from hooklab.nonfinite import NonFiniteError, find_nonfinite, new_nodes
from patience import hang_guard

sys.path.insert(0, str(Path(__file__).resolve().parent))


# ------------------------------------------------------------------------------ plain-PyTorch truths
def first_bad_module(model: nn.Module, run) -> tuple[str, int, bool] | None:
    """(name, call, is producer) of the first module call whose output holds NaN/inf, by a raw global hook."""
    names = {id(m): n for n, m in model.named_modules()}
    calls: dict[str, int] = {}
    found: list[tuple[str, int, bool]] = []

    def leaves(x):
        if isinstance(x, torch.Tensor):
            return [x]
        if isinstance(x, dict):
            return [t for v in x.values() for t in leaves(v)]
        if isinstance(x, (tuple, list)):
            return [t for v in x for t in leaves(v)]
        return []

    def bad(ts):
        return any(t.is_floating_point() and not torch.isfinite(t).all() for t in ts)

    def kinds(ts):
        return ({"nan"} if any(t.is_floating_point() and t.isnan().any() for t in ts) else set()) | \
               ({"inf"} if any(t.is_floating_point() and t.isinf().any() for t in ts) else set())

    def pre(module, args):
        if id(module) in names:
            calls[names[id(module)]] = calls.get(names[id(module)], 0) + 1

    def post(module, args, kwargs, output):
        if id(module) in names and not found and bad(leaves(output)):
            name = names[id(module)]
            inputs = leaves(args) + leaves(kwargs)  # a producer: the output holds a kind the inputs did not
            found.append((name, calls[name], not kinds(leaves(output)) <= kinds(inputs)))

    with hooklab.HookScope() as scope:  # per-module hooks fire in call order too
        for m in model.modules():
            scope.add(m.register_forward_pre_hook(pre))
            scope.add(m.register_forward_hook(post, with_kwargs=True))
        run()
    return found[0] if found else None


def anomaly_node(run) -> str | None:
    """The Node that torch.autograd.detect_anomaly names as the first to return NaN in backward."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode warns that it is on and prints forward traces
        with torch.autograd.detect_anomaly():
            try:
                run()
            except RuntimeError as err:
                match = re.search(r"Function '(\w+)' returned nan values", str(err))
                if match:
                    return match.group(1)
                raise
    return None


def node_module(run, model: nn.Module, node_name: str) -> str:
    """The innermost module whose forward created the Node called ``node_name``, by raw grad_fn bookkeeping."""
    names = {id(m): n for n, m in model.named_modules()}
    owner: dict[int, str] = {}

    def walk(t, name):
        todo = [t.grad_fn] if isinstance(t, torch.Tensor) and t.grad_fn is not None else []
        while todo:
            node = todo.pop()
            if node is None or id(node) in owner:
                continue
            owner[id(node)] = (name, node)
            todo.extend(n for n, _ in node.next_functions)

    def post(module, args, output):
        if id(module) in names:
            for t in (output if isinstance(output, (tuple, list)) else [output]):
                walk(t, names[id(module)])

    from torch.nn.modules.module import register_module_forward_hook
    with hooklab.HookScope() as scope:
        scope.add(register_module_forward_hook(post))
        run()
    return {node.name(): name for name, node in owner.values()}.get(node_name)


# ------------------------------------------------------------------------------ models
class Scale(nn.Module):
    def forward(self, x):
        return x / x.sum(-1, keepdim=True)  # 0 / 0 = NaN when a row sums to 0


class CallOrder(nn.Module):
    """Defined in one order, called in another: named_modules() order is not call order."""

    def __init__(self):
        super().__init__()
        self.late, self.scale, self.early = nn.Linear(2, 2), Scale(), nn.ReLU()

    def forward(self, x):
        return self.late(self.scale(self.early(x)))


class ExpTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.exp = Exp()
        self.head = nn.Linear(3, 1)

    def forward(self, x):
        return self.head(self.exp(self.exp(x)))


class Exp(nn.Module):
    def forward(self, x):
        return torch.exp(x)


class Pair(nn.Module):
    def forward(self, x):
        return x.clone(), torch.log(x)  # the second is -inf / NaN for x <= 0


class Keyed(nn.Module):
    def forward(self, x):
        return {"ok": x * 2, "bad": x / 0}


class UsesPair(nn.Module):
    def __init__(self, inner: nn.Module, key):
        super().__init__()
        self.inner, self.key, self.head = inner, key, nn.Linear(3, 1)

    def forward(self, x):
        return self.head(self.inner(x)[self.key])


class FunctionalNaN(nn.Module):
    """The NaN is made between submodule calls, by code in the model's own forward."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x):
        return self.b(torch.log(self.a(x) * 0 - 1))


def sqrt_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.ReLU(), _Sqrt(), nn.Linear(3, 1))


class _Sqrt(nn.Module):
    def forward(self, x):
        return torch.sqrt(x)  # finite at 0, but its gradient there is inf


class SafeSqrt(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x.sqrt(), 0.0)  # finite forward; backward: 0 * (1 / sqrt(x < 0)) = NaN


def where_sqrt_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), SafeSqrt(), nn.Linear(3, 1))


def tanh_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))


def no_node_hooks(found) -> bool:
    return len(found.scope) == 0  # the Node hooks are owned by the detector's scope, with its module hooks


# ------------------------------------------------------------------------------ forward
def test_first_module_in_call_order_is_the_producer_as_a_raw_global_hook_finds():
    torch.manual_seed(0)
    model, x = CallOrder(), torch.tensor([[-1.0, -2.0], [1.0, 2.0]])
    truth = first_bad_module(model, lambda: model(x))
    assert [n for n, _ in model.named_modules()][1:] == ["late", "scale", "early"]
    with find_nonfinite(model) as found:
        model(x)
    assert truth == ("scale", 1, True)
    assert (found.forward.module, found.forward.call, found.forward.kind) == ("scale", 1, "producer")
    assert found.forward.where == "output" and found.bad_input is None and found.steps == 1
    assert "scale" in found.table() and "producer" in str(found)


def test_input_already_bad_gives_a_propagator_and_an_input_finding():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    x = torch.tensor([[float("nan"), 1.0]])
    truth = first_bad_module(model, lambda: model(x))
    with find_nonfinite(model) as found:
        model(x)
    assert truth == ("0", 1, False)
    assert found.bad_input.phase == "input" and found.bad_input.where == "args[0]"
    assert (found.forward.module, found.forward.kind) == ("0", "propagator")
    assert "model's input already was" in found.forward.note
    assert [e.phase for e in found.events] == ["input", "forward"]


def test_a_value_made_between_submodule_calls_is_blamed_on_the_enclosing_forward():
    torch.manual_seed(0)
    model, x = FunctionalNaN(), torch.ones(2, 3)
    truth = first_bad_module(model, lambda: model(x))
    with find_nonfinite(model) as found:
        model(x)
    assert truth == ("b", 1, False)
    assert (found.forward.module, found.forward.kind) == ("b", "propagator")
    assert "forward of (model)" in found.forward.note and found.bad_input is None


def test_module_called_twice_reports_which_call():
    torch.manual_seed(0)
    model, x = ExpTwice(), torch.full((1, 3), 10.0)  # exp(10) is finite, exp(exp(10)) is inf
    truth = first_bad_module(model, lambda: model(x))
    with find_nonfinite(model) as found:
        model(x)
    assert truth == ("exp", 2, True)
    assert (found.forward.module, found.forward.call, found.forward.kind) == ("exp", 2, "producer")


@pytest.mark.parametrize("inner, key, where", [(Pair(), 1, "output[1]"), (Keyed(), "bad", "output['bad']")])
def test_tuple_and_dict_outputs_name_the_bad_element(inner, key, where):
    torch.manual_seed(0)
    model, x = UsesPair(inner, key), torch.tensor([[0.0, 1.0, 2.0]])
    truth = first_bad_module(model, lambda: model(x))
    with find_nonfinite(model) as found:
        model(x).sum().backward()
    assert truth == ("inner", 1, True)
    assert (found.forward.module, found.forward.where, found.forward.kind) == ("inner", where, "producer")


def test_a_parameter_that_is_non_finite_is_named():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    with torch.no_grad():
        model[1].weight[0, 0] = float("inf")
    with find_nonfinite(model) as found:
        model(torch.ones(1, 2))
    assert found.forward.module == "1" and "'weight'" in found.forward.note


def test_overflowing_sum_of_finite_values_is_finite():
    big = torch.full((4,), 3e38)
    assert not torch.isfinite(big.sum())
    model = nn.Identity()
    with find_nonfinite(model) as found:
        model(big)
    assert not found.found and "no non-finite value seen in 1 step" in found.table()


def test_finite_model_finds_nothing_and_counts_steps():
    model = tanh_model()
    with find_nonfinite(model) as found:
        for _ in range(3):
            model(torch.ones(2, 3) + 1).sum().backward()
    assert found.steps == 3 and not found.found and found.events == []
    assert no_node_hooks(found)


# ------------------------------------------------------------------------------ backward
@pytest.mark.parametrize("make, x, module", [
    (where_sqrt_model, torch.tensor([[1.0, -2.0, 3.0]]), "1"),
    (lambda: nn.Sequential(nn.Linear(3, 3), Scale()), torch.zeros(1, 3), "1"),
])
def test_first_backward_node_matches_detect_anomaly(make, x, module):
    model = make()
    if isinstance(model[-1], Scale):  # forward finite, backward NaN: x / s with s == 0 after the sum
        with torch.no_grad():
            model[0].weight.zero_(), model[0].bias.copy_(torch.tensor([1.0, -1.0, 0.0]))
    run = lambda: model(x).sum().backward()  # noqa: E731
    truth = anomaly_node(run)
    owner = node_module(run, model, truth)
    model.zero_grad()
    with find_nonfinite(model) as found:
        run()
    assert truth is not None and found.backward is not None
    assert found.backward.node == truth and found.backward.kind == "producer"
    assert found.backward.module == owner == module
    assert no_node_hooks(found)


def test_an_inf_gradient_that_detect_anomaly_does_not_report_is_found():
    model, x = sqrt_model(), torch.full((1, 3), -5.0)  # ReLU gives 0, sqrt'(0) = inf, ReLU's backward masks it
    run = lambda: model(x).sum().backward()  # noqa: E731
    assert anomaly_node(run) is None  # anomaly mode checks for NaN only
    model.zero_grad()
    with find_nonfinite(model) as found:
        run()
    assert found.forward is None and found.backward.node == "SqrtBackward0" and found.backward.module == "2"
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())  # masked before it reached any .grad


def test_a_nan_made_from_a_minus_inf_mask_is_produced_not_propagated():
    attn = nn.MultiheadAttention(4, 1, batch_first=True)
    x, mask = torch.randn(1, 3, 4), torch.full((3, 3), float("-inf"))  # every position masked: softmax gives NaN
    truth = first_bad_module(attn, lambda: attn(x, x, x, attn_mask=mask))
    with find_nonfinite(attn) as found:
        attn(x, x, x, attn_mask=mask)
    assert truth == ("", 1, True)
    assert found.bad_input.where == "kwargs['attn_mask']"
    assert found.forward.kind == "producer" and "made nan from inputs holding only inf" in found.forward.note


def test_a_bad_gradient_from_the_loss_is_a_propagator():
    model = tanh_model()
    out = None
    with find_nonfinite(model) as found:
        out = model(torch.ones(2, 3))
        out.backward(torch.full_like(out, float("nan")))
    assert found.forward is None
    assert found.backward.kind == "propagator" and "outside the model's graph" in found.backward.note
    assert found.backward.node == out.grad_fn.name()


def test_hooks_of_nodes_of_freed_graphs_are_forgotten_so_the_handles_stay_bounded():
    model = tanh_model()
    with find_nonfinite(model) as found:
        model(torch.ones(2, 3)).sum().backward()
        after_one = len(found.scope)  # the module hooks and one graph's Node hooks
        sizes = []
        for _ in range(300):  # 300 graphs' worth of Node hooks if nothing were forgotten
            model(torch.ones(2, 3)).sum().backward()
            sizes.append(len(found.scope))
        assert max(sizes) <= 64 + 2 * after_one, "the handles grow with the steps"
    assert no_node_hooks(found)


def test_new_nodes_stops_at_known_nodes_and_leaves():
    a = torch.ones(2, requires_grad=True)
    b = a * 2
    c = b.exp()
    nodes = new_nodes([c], {}, {})
    assert [n.name() for n in nodes] == ["ExpBackward0", "MulBackward0"]
    assert [n.name() for n in new_nodes([c], {}, {id(b.grad_fn): b.grad_fn})] == ["ExpBackward0"]


# ------------------------------------------------------------------------------ raise_first, failures, lifecycle
def test_raise_first_forward_raises_and_leaves_nothing_behind():
    torch.manual_seed(0)
    model, x = CallOrder(), torch.tensor([[-1.0, -2.0]])
    with hooklab.no_hooks_left_behind(model):
        with pytest.raises(NonFiniteError, match=r"forward, scale call 1, output: producer") as info:
            with find_nonfinite(model, raise_first=True) as found:
                model(x)
    assert info.value.event is found.forward
    assert no_node_hooks(found)


def test_raise_first_backward_raises_the_node():
    model = sqrt_model()
    with hooklab.no_hooks_left_behind(model):
        with pytest.raises(NonFiniteError, match=r"backward of step 1: SqrtBackward0 \(module 2\)"):
            with find_nonfinite(model, raise_first=True) as found:
                model(torch.full((1, 3), -5.0)).sum().backward()
    assert found.backward.node == "SqrtBackward0" and no_node_hooks(found)


def test_a_failing_body_leaves_no_hook():
    model = sqrt_model()
    with hooklab.no_hooks_left_behind(model):
        with pytest.raises(ValueError, match="body failed"):
            with find_nonfinite(model) as found:
                model(torch.ones(1, 3))  # a graph is alive: Node hooks are registered
                assert len(found.scope) > 3 * len(list(model.modules())) + 1  # more than the module hooks
                raise ValueError("body failed")
    assert no_node_hooks(found)


def test_a_failing_forward_leaves_no_hook_and_the_next_step_starts_clean():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = nn.Sequential(nn.Linear(2, 2), Boom())
    with hooklab.no_hooks_left_behind(model):
        with find_nonfinite(model) as found:
            with pytest.raises(RuntimeError, match="boom"):
                model(torch.ones(1, 2))
            model[0](torch.ones(1, 2))
        assert found.steps == 2 and found._stack == []


@pytest.mark.parametrize("bad, kwargs, error", [
    (lambda: "model", {}, "takes an nn.Module"),
    (lambda: nn.Linear(2, 2), {"raise_first": "yes"}, "raise_first must be True or False"),
    (lambda: nn.Linear(2, 2), {"backward": 1}, "backward must be True or False"),
])
def test_bad_arguments_are_refused_clearly(bad, kwargs, error):
    with pytest.raises(TypeError, match=error):
        find_nonfinite(bad(), **kwargs)


def test_a_compiled_model_is_refused():
    compiled = torch.compile(nn.Linear(2, 2), backend="eager")
    with pytest.raises(TypeError, match=r"torch.compile'd.*model._orig_mod"):
        find_nonfinite(compiled)


def test_a_ddp_wrapper_is_refused():
    ddp = nn.parallel.DistributedDataParallel.__new__(nn.parallel.DistributedDataParallel)
    nn.Module.__init__(ddp)
    with pytest.raises(TypeError, match=r"DistributedDataParallel.*another rank.*model.module"):
        find_nonfinite(ddp)


def test_calls_from_another_thread_are_not_checked_and_it_says_so():
    model = CallOrder()
    x = torch.tensor([[-1.0, -2.0]])
    with pytest.warns(RuntimeWarning, match="another thread"):
        with find_nonfinite(model) as found:
            worker = threading.Thread(target=lambda: model(x))
            worker.start()
            worker.join(timeout=hang_guard(30))
            assert not worker.is_alive(), "the thread calling the model did not finish in 30 s"
    assert found.forward is None and found.steps == 0


def test_one_block_per_detector_and_results_need_a_block():
    found = find_nonfinite(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="recorded nothing"):
        found.table()
    with found:
        pass
    with pytest.raises(RuntimeError, match="already recorded"):
        with found:
            pass


def test_other_modules_are_not_checked():
    model, other = nn.Linear(2, 2), Scale()
    with find_nonfinite(model) as found:
        other(torch.zeros(1, 2))
        model(torch.ones(1, 2))
    assert found.steps == 1 and not found.found


# ------------------------------------------------------------------------------ the zoo
pytest.importorskip("torchvision")
from zoo import SPECS, Case  # noqa: E402

ZOO = [pytest.param(s, id=s.name.split(" (")[0]) for s in SPECS if not s.heavy]


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("spec", ZOO)
def test_zoo(spec):
    case = Case(spec)
    if spec.compiled:
        with pytest.raises(TypeError, match="torch.compile'd"):
            find_nonfinite(case.model)
        return
    model = case.eager
    param = next(p for p in case.module(spec.layers[0]).parameters())
    with torch.no_grad():
        param.fill_(float("nan"))
    truth = first_bad_module(model, case.forward)
    assert truth is not None, "the NaN parameter made no NaN output"

    def run():  # the loss multiplies by zero: the gradient entering the model is finite
        out = case.forward()
        if case.grad_enabled:
            out = out[0] if isinstance(out, tuple) else out
            (out * torch.zeros_like(out)).sum().backward()

    node = anomaly_node(run) if case.grad_enabled else None
    model.zero_grad(set_to_none=True)
    with hooklab.no_hooks_left_behind(model):
        with find_nonfinite(model) as found:
            run()
    kind = "producer" if truth[2] else "propagator"  # a parameter used functionally (a layer scale) propagates
    assert (found.forward.module, found.forward.call, found.forward.kind) == (truth[0], truth[1], kind)
    if case.grad_enabled:
        assert node is not None and found.backward is not None and found.backward.node == node
    else:
        assert found.backward is None
    assert no_node_hooks(found)


def test_a_backward_left_for_after_the_block_is_said_to_be_unchecked():
    """Round 3's N7: with the backward after the block, NaN weight gradients gave backward None and no word."""
    class AbsSqrt(nn.Module):
        def forward(self, x):
            return x.abs().sqrt()  # sqrt(|0|) = 0; backward: sign(0) * inf = NaN

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), AbsSqrt(), nn.Linear(3, 1))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    with pytest.warns(RuntimeWarning, match=r"found nothing, but the backward of the last forward in the block did "
                                            r"not run inside it.*backward=False"):
        with find_nonfinite(model) as found:
            loss = model(torch.ones(1, 3)).sum()
    loss.backward()
    assert found.backward is None and not found.found
    assert any(not torch.isfinite(p.grad).all() for p in model.parameters())  # what went unchecked


@pytest.mark.parametrize("how", ["output dropped", "backward inside", "backward=False", "no_grad"])
def test_no_such_warning_when_nothing_was_left_unchecked(how, recwarn):
    model = tanh_model()
    with find_nonfinite(model, backward=how != "backward=False") as found:
        if how == "no_grad":
            with torch.no_grad():
                out = model(torch.ones(1, 3))
        else:
            out = model(torch.ones(1, 3)).sum()
        if how == "backward inside":
            out.backward()
        if how == "output dropped":
            del out
    assert not found.found and not [w for w in recwarn if "did not run inside it" in str(w.message)]


def test_results_are_properties_guarded_like_every_recorders_and_events_can_still_be_called():
    model = tanh_model()
    detector = find_nonfinite(model)
    for name in ("forward", "backward", "bad_input", "steps", "events"):
        with pytest.raises(RuntimeError, match="has recorded nothing"):
            getattr(detector, name)
    with detector:
        model(torch.ones(1, 3)).sum().backward()
    assert detector.events == [] and detector.steps == 1
