"""The hook doctor as a property over the atlas (hooklab/course/assets/atlas/<zoo>.json): for every module whose hooks never fire in an
architecture's forward, ``explain_hook`` gives the cause that an independent truth gives, never crashes and never gives
another; ``find_blocks`` finds the stacks the atlas recorded; and one level down, the places inside a block that
``course.atlas(zoo)[name].where(i, what)`` names (the attention output, the MLP output, the residual stream after
each) make up the block's residual identity on the model rebuilt, watched with plain hooks.

The truth is ``tools/atlas/probe.py``'s, which watches without hooklab: a counting wrapper on each class's ``forward``
(was it entered?), the modules called (a global pre-hook), a ``TorchDispatchMode`` (whose parameters did the ops read,
which fast-path op read them), and the same step in training mode. ``explain_hook`` sees none of that: it watches the
step with a profile function (module calls, forward code, parameter reads through ``Module.__getattr__``).

Each run of ``./course test`` checks a fixed sample of architectures, chosen to cover every cause the atlas records;
``HOOKLAB_ATLAS_ALL=1`` checks every architecture that the atlas built and ran (``./course test --all`` sets it; the
weekly run splits its tests across the shards of ``--all --shard i/N``), the lookups inside the blocks of every model
measured inside as well. Each architecture is rebuilt exactly
as the atlas built it (``tools/atlas/zoos.py``) and its never-firing modules are measured again: they must still be
the atlas's (else regenerate it: ``python -m tools.atlas run --zoo Z --fresh --only NAME; python -m tools.atlas write
--zoo Z`` where ``build/atlas/<zoo>.jsonl`` holds the whole zoo, since ``write`` writes the atlas from it alone; the
lookups inside a few models: ``python -m tools.atlas run --part inside --zoo Z --only NAME; python -m tools.atlas
merge --zoo Z --only``).
"""
from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import pytest
import torch

from hooklab import explain_hook, find_blocks

ROOT = Path(__file__).resolve().parents[2]
ATLAS = ROOT / "hooklab" / "course" / "assets" / "atlas"
ALL = os.environ.get("HOOKLAB_ATLAS_ALL") == "1"
# every cause the atlas records but one, in models of a few million parameters (the fast path: torchvision's ViTs, 86
# million parameters, checked weekly; tests/library/test_explain.py checks it on nn.TransformerEncoderLayer)
SAMPLE = {
    "transformers": ["falcon_mamba", "squeezebert", "switch_transformers", "whisper"],
    "torchvision": ["googlenet", "ssdlite320_mobilenet_v3_large"],
    "timm": ["test_coatnet", "test_vit_relpos"],
    "diffusers": ["AutoencoderKLTemporalDecoder"],
}
# a cause the truth knows and explain_hook cannot: a module used only in training is, for an eval-mode step, one that
# the step does not reach (its sentence says the model is in eval mode)
SAME = {"training only": {"not reached"}}

pytestmark = pytest.mark.timeout(600 if not ALL else 7200)


def atlas(zoo: str) -> dict:
    path = ATLAS / f"{zoo}.json"
    if not path.is_file():
        pytest.skip(f"{path.relative_to(ROOT)} is missing: python -m tools.atlas run --zoo {zoo}; "
                    f"python -m tools.atlas write --zoo {zoo}")
    return json.loads(path.read_text(encoding="utf-8"))


def cases() -> list[tuple[str, str]]:
    found = []
    for zoo, names in SAMPLE.items():
        if ALL:
            path = ATLAS / f"{zoo}.json"
            if path.is_file():
                models = json.loads(path.read_text(encoding="utf-8"))["models"]
                names = [n for n, e in models.items() if e["status"] == "built"]
        found += [(zoo, name) for name in names]
    return found


def test_the_sample_covers_every_cause_the_atlas_records():
    recorded, sampled = set(), set()
    for zoo in SAMPLE:
        path = ATLAS / f"{zoo}.json"
        if not path.is_file():
            continue
        models = json.loads(path.read_text(encoding="utf-8"))["models"]
        for name, entry in models.items():
            causes = {row[2] for row in entry.get("never_fired", [])}
            recorded |= causes
            if name in SAMPLE[zoo]:
                sampled |= causes
    assert recorded, "no atlas under hooklab/course/assets/atlas"
    assert recorded - sampled - {"fast path"} == set(), \
        "add an architecture with these causes to SAMPLE"


@pytest.mark.parametrize("zoo, name", cases())
def test_explain_hook_agrees_with_the_truth_on_every_never_firing_module(zoo, name):
    from tools.atlas import probe, transformers_zoo, zoos as atlas_zoos

    entry = atlas(zoo)["models"].get(name)
    if entry is None or entry["status"] != "built":
        pytest.skip(f"{name} is not built in the atlas of {zoo}")
    builder = {"transformers": transformers_zoo.Transformers, "torchvision": atlas_zoos.Torchvision,
               "timm": atlas_zoos.Timm, "diffusers": atlas_zoos.Diffusers}[zoo]()
    with atlas_zoos.quiet():
        built = builder.build(name)
        model = built.model

        def train() -> None:
            model.train()
            try:
                built.run()
            finally:
                model.eval()
        truth, _ = probe.never_fired(model, built.run, train_run=train)
    if os.environ.get("COURSE_RERUN") != "1":  # another torch may change them: then only the causes are checked
        assert [[n.name, n.cls, n.cause] for n in truth] == [row[:3] for row in entry["never_fired"]], \
            f"the atlas of {zoo} is out of date for {name}: regenerate it (this module's docstring)"
        assert [(s.path, len(s)) for s in find_blocks(model)] == [(s["path"], s["count"]) for s in entry["stacks"]]
    wrong = []
    for n in truth:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = explain_hook(model, n.name, run=built.run)
        if report.cause not in SAME.get(n.cause, {n.cause}):
            wrong.append(f"{n.name} ({n.cls}): truth {n.cause!r}, explain_hook {report.cause!r}: {report.reasons[0]}")
        assert report.calls == 0, n.name
    assert wrong == []


@pytest.mark.parametrize("zoo", sorted(SAMPLE))
def test_an_unknown_or_wrongly_cased_model_name_names_the_close_ones(zoo):
    """course.atlas(zoo)[name] with a name the atlas lacks was a bare KeyError: 'Llama'. Now the error names the
    close names, says that names are case-sensitive when only the case differs, and how to list them."""
    from hooklab import course

    models = atlas(zoo)["models"]  # the truth: the JSON file's own keys
    shipped = course.atlas(zoo)
    assert dict(shipped) == models and shipped is not course.atlas(zoo)  # a plain dict's content, fresh each call
    name = max(models, key=len)
    cased = name.upper() if name.upper() != name else name.lower()
    typo = name[:-1] if len(name) > 3 else name + "x"
    for wrong, case_note in ((cased, True), (typo, False)):
        assert wrong not in models
        with pytest.raises(KeyError) as raised:
            shipped[wrong]
        message = str(raised.value)
        assert f"has no model {wrong!r}" in message and f"did you mean {name!r}" in message, message
        assert ("(names are case-sensitive)" in message) is case_note
        assert f"sorted(course.atlas({zoo!r})) lists its {len(models)} model names" in message
    with pytest.raises(KeyError, match=r"no model 'no-such-model-at-all'\. sorted"):
        shipped["no-such-model-at-all"]
    with pytest.raises(KeyError, match="keyed by model name, a str, got int 3"):
        shipped[3]
    assert shipped.get(cased) is None and cased not in shipped and shipped[name] == models[name]


# ------------------------------------------------------------------------------------------------ inside the blocks
# one model per form the atlas finds: pre-norm, post-norm, parallel, encoder-decoder with cross-attention, MoE,
# sandwich norms, a stream scaled per channel (Doge), an MLP on flattened tokens (OPT), branches a thousand times
# smaller than the stream (ModernBERT's initialisation), two streams with gates, a branch that adds to the block's
# input (AuraFlow), a ResNet's shortcut, timm's fused attention, nn.MultiheadAttention's fast path
INSIDE = {
    "transformers": ["llama", "bert", "gpt_neox", "t5", "mixtral", "gemma2", "doge", "opt", "modernbert"],
    "diffusers": ["SD3Transformer2DModel", "AuraFlowTransformer2DModel"],
    "torchvision": ["resnet18", "vit_b_16"],
    "timm": ["test_vit", "repghostnet_150", "xcit_tiny_12_p8_224"],  # a stride-2 block's shortcut; an LPI branch
}
_TAKE = re.compile(r"\[(\d+)\]|\['([^']+)'\]|\.(\w+)")


def _taken(value: object, take: str) -> object:
    """``output[0]``, ``args[0]``, ``kwargs['x']``, ``output.sample`` applied to what a hook got."""
    for index, key, attribute in _TAKE.findall(take[take.index(next(c for c in take if c in "[.")):]
                                               if any(c in take for c in "[.") else ""):
        value = value[int(index)] if index else value[key] if key else getattr(value, attribute)
    return value


def _rebuild(zoo: str, name: str):
    from tools.atlas import transformers_zoo, zoos as atlas_zoos
    builder = {"transformers": transformers_zoo.Transformers, "torchvision": atlas_zoos.Torchvision,
               "timm": atlas_zoos.Timm, "diffusers": atlas_zoos.Diffusers}[zoo]()
    with atlas_zoos.quiet():
        return builder.build(name)


def _hook(model, place: dict, seen: list) -> object:
    """A plain hook on ``place`` (its module, kind of hook, the call it names) that keeps what ``take`` names and
    what the hook received."""
    from tools.atlas.probe import kind_of
    module = model.get_submodule(place["module"])
    wanted, count = int(place.get("call", "1 of 1").split()[0]), [0]

    def pre(m, args, kwargs):
        count[0] += 1
        if count[0] == wanted:
            got = args if place["take"].startswith("args") else kwargs
            seen.append((_taken(got, place["take"]).detach().clone(), kind_of(args)))

    def post(m, args, kwargs, output):
        count[0] += 1
        if count[0] == wanted:
            seen.append((_taken(output, place["take"]).detach().clone(), kind_of(output)))
    if place["hook"] == "forward_pre":
        return module.register_forward_pre_hook(pre, with_kwargs=True)
    return module.register_forward_hook(post, with_kwargs=True)


def inside_cases() -> list[tuple[str, str]]:
    """The sample above; with ``HOOKLAB_ATLAS_ALL=1`` every model the atlas measured inside."""
    if not ALL:
        return [(z, n) for z, names in INSIDE.items() for n in names]
    found = []
    for zoo in INSIDE:
        path = ATLAS / f"{zoo}.json"
        if path.is_file():
            found += [(zoo, n) for n, e in json.loads(path.read_text(encoding="utf-8"))["models"].items()
                      if e.get("inside")]
    return found


@pytest.mark.parametrize("zoo, name", inside_cases())
def test_the_atlas_lookups_inside_a_block_prove_its_residual_identity(zoo, name):
    """The truth here is plain PyTorch: hooks on the places ``course.atlas(zoo)[name].where(i)`` names, on the model
    rebuilt as the atlas built it (constant parameters given values, as the atlas does: a zero gate hides its
    branch). Each branch's sum must be the lookup it ``adds_to`` plus its output (times its scale; a gate per
    channel: one factor per item and channel), and each hook must receive what the atlas says."""
    from hooklab import course
    from tools.atlas import inside

    entry = course.atlas(zoo)[name]
    if not entry.get("inside"):
        pytest.skip(f"{name}: {entry.get('inside_why', entry['status'])}")
    built = _rebuild(zoo, name)
    inside.unconstant(built.model)
    checked = 0
    for block in (0, 1):  # every stack has two blocks or more
        try:
            places = entry.where(block)
        except LookupError:
            continue
        hooked = {role: place for role, place in places.items() if place["module"] is not None}
        hooked.update({f"{role}.sum": place["sum"] for role, place in places.items() if "sum" in place})
        seen: dict[str, list] = {role: [] for role in hooked}
        handles = [_hook(built.model, place, seen[role]) for role, place in hooked.items()]
        try:
            built.run()
        finally:
            for handle in handles:
                handle.remove()
        for role, place in hooked.items():
            receives = place["receives"]
            assert len(seen[role]) == 1, (name, block, role, "the hook did not fire")
            assert seen[role][0][1] == (next(iter(receives.values())) if isinstance(receives, dict) else receives), \
                (name, block, role)

        def value(role: str) -> torch.Tensor:
            if places[role]["module"] is None:  # a sum no tensor holds: "block input + attention output"
                parts = places[role]["compute"].replace("block input", "input").replace(" output", "").split(" + ")
                return sum(value(part) for part in parts)
            return seen[role][0][0]

        def size(role: str) -> torch.Tensor:  # the magnitude float32 rounds a sum on: its parts', where no tensor holds it
            if places[role]["module"] is None:
                parts = places[role]["compute"].replace("block input", "input").replace(" output", "").split(" + ")
                return sum(size(part) for part in parts)
            return seen[role][0][0].double().abs()
        for role, place in places.items():
            after = places.get(f"residual_after_{role}")
            if "adds_to" not in place or after is None or after["module"] is None:
                continue
            total = seen[f"residual_after_{role}.sum"][0][0] if "sum" in after else value(f"residual_after_{role}")
            base, term, scale = value(place["adds_to"]), value(role), place.get("scale", 1.0)
            base_scale = place.get("base_scale", 1.0)
            if base_scale == "per channel":  # the stream scaled per channel before the branch is added (Doge)
                assert _gated(total - term, base), (name, block, role)
            elif scale == "per channel":
                assert _gated(total - base_scale * base, term), (name, block, role)
            else:  # up to float32 rounding, element by element, and the branch is more than rounding
                t, b, a = total.double(), base_scale * base.double(), scale * term.double()
                bound = 16 * EPS * (t.abs() + abs(base_scale) * size(place["adds_to"]) + a.abs())
                assert bool(((t - b - a).abs() <= bound).all()), (name, block, role)
                assert float(a.norm()) > 1e3 * EPS * float(t.norm()), (name, block, role, "the branch adds nothing")
            checked += 1
    if not ALL:  # a model whose first two blocks have no identity (a decoder that starts from zeros) checks none
        assert checked, f"{name}: no block's identity was checked"


EPS = torch.finfo(torch.float32).eps


def _gated(difference: torch.Tensor, term: torch.Tensor) -> bool:
    """``difference == g * term`` with one ``g`` per item and channel (the last dimension of tokens, the second of
    feature maps), up to a relative 1e-5 (the gate's own rounding)."""
    channel = difference.dim() - 1 if difference.dim() == 3 else 1
    d, t = difference.double().movedim(channel, 1).flatten(2), term.double().movedim(channel, 1).flatten(2)
    g = (d * t).sum(-1) / (t * t).sum(-1).clamp_min(1e-30)
    return float(d.norm()) > 0 and float((d - g.unsqueeze(-1) * t).norm()) <= 1e-5 * float(d.norm())


def test_where_answers_for_every_measured_block_or_says_why():
    """``course.atlas(zoo)[name].where(i)`` over the whole shipped atlas: every block whose identity holds gives its
    places inside that block (or a sum to compute); every other one raises a LookupError that says why; a model
    without lookups says why too (not built, not run, not reached by the measurement)."""
    from hooklab import course

    answered = refused = 0
    for zoo in SAMPLE:
        for name, entry in course.atlas(zoo).items():
            if not entry.get("inside"):
                with pytest.raises(LookupError, match="has no lookups inside its blocks: .{10}"):
                    entry.where(0)
                continue
            for path, stack in entry["inside"].items():
                for block in range(stack["blocks"]):
                    try:
                        places = entry.where(block, stack=path)
                    except LookupError as error:
                        refused += 1
                        assert str(error).strip(), (name, path, block)
                        continue
                    answered += 1
                    names = stack["names"]
                    own = names.format(i=block) if isinstance(names, str) else names[block]
                    assert all(p["module"] is None or p["module"] == own or p["module"].startswith(own + ".")
                               for p in places.values()), (name, path, block)
    assert answered > 1000 and refused


def test_where_reads_aliases_streams_and_blocks_beyond_the_small_model():
    from hooklab import course

    models = course.atlas("transformers")
    uniform, path = next((e, p) for e in models.values() for p, st in (e.get("inside") or {}).items()
                         if len(set(st["block_pattern"])) == 1 and isinstance(st["names"], str) and st["patterns"]
                         and st["patterns"][0]["streams"][0]["lookups"].get("attention"))
    far = uniform.where(40, "attn", stack=path)  # the stack named: a model may have two (aimv2: vision and text)
    assert far == uniform.where(40, "attention", stack=path) and ".40." in far["module"] and "built alike" in far["note"]
    assert "built alike" in str(far) and str(far).startswith(far["module"])
    hybrid = next((e, p) for e in models.values() for p, st in (e.get("inside") or {}).items()
                  if len({i for i in st["block_pattern"] if i is not None}) > 1 and isinstance(st["names"], str))
    with pytest.raises(LookupError, match="not all built alike"):
        hybrid[0].where(hybrid[0]["inside"][hybrid[1]]["blocks"] + 5, stack=hybrid[1])
    with pytest.raises(KeyError, match="has no 'no_such_part': it has .*attention"):
        uniform.where(0, "no_such_part")
    with pytest.raises(TypeError, match="index of a block"):
        uniform.where("0")
    joint = course.atlas("diffusers")["SD3Transformer2DModel"]
    if joint.get("inside"):  # two streams: the image's and the text's, each with its own attention output
        image, text = joint.where(0, "attention"), joint.where(0, "attention", stream="encoder_hidden_states")
        assert image["module"] == text["module"] and image["take"] != text["take"]


def test_an_encoder_decoder_generates_and_its_encoder_blocks_run_once():
    """t5's config made from defaults has no decoder start token: the atlas recorded an error for ``generate``
    where t5 generates well (it starts the decoder with its pad token). Now it generates, and the atlas's counts
    are those of the model rebuilt: the encoder's blocks run once, the decoder's once per step."""
    from hooklab import course

    recorded = course.atlas("transformers")["t5"]["generate"]
    assert "error" not in recorded, recorded
    built = _rebuild("transformers", "t5")
    counts = {"model": 0, "encoder.block": 0, "decoder.block": 0}
    handles = [built.model.register_forward_pre_hook(lambda m, a: counts.update(model=counts["model"] + 1))]
    for path in ("encoder.block", "decoder.block"):
        handles.append(built.model.get_submodule(f"{path}.0").register_forward_hook(
            lambda m, a, o, path=path: counts.update({path: counts[path] + 1})))
    try:
        out = built.generate()
    finally:
        for handle in handles:
            handle.remove()
    assert out.shape[-1] > 1 and counts["encoder.block"] == 1 and counts["decoder.block"] == counts["model"] > 1
    assert recorded["block_fires"] == {k: counts[k] for k in recorded["block_fires"]}
    assert recorded["model_calls"] == counts["model"]


def test_where_validates_its_arguments_like_a_command_line():
    """Types, ranges and known values, as a command line checks them: a bool, a float, a str or None is no block
    index (``where(True)`` gave ``model.layers.True.self_attn``), a negative one is refused (the atlas built the
    model small: its last block is not yours), and no value a caller passed is shown longer than its cut repr."""
    import numpy

    from hooklab import course

    llama = course.atlas("transformers")["llama"]
    for bad in (True, False, 1.0, "0", None, [0]):
        with pytest.raises(TypeError, match="index of a block in its stack"):
            llama.where(bad, "attention")
    with pytest.raises(ValueError, match="negative indices are refused"):
        llama.where(-1, "attention")
    assert llama.where(numpy.int64(3), "attention") == llama.where(3, "attention")
    for bad in (3, b"mlp", ["mlp"], True):
        with pytest.raises(TypeError, match="what is a str"):
            llama.where(0, bad)
    for key in ("stack", "stream"):
        for bad in ("", " ", 3, True):
            with pytest.raises(TypeError, match=f"{key} is a non-empty str or None"):
                llama.where(0, **{key: bad})
    long = "attention" * 2000
    for call in (lambda: llama.where(0, long), lambda: llama.where(0, stack=long),
                 lambda: llama.where(0, "attention", stream=long)):
        with pytest.raises(LookupError) as error:
            call()
        assert long not in str(error.value) and len(str(error.value)) < 1200
    assert llama.where(0, "residual") == llama.where(0, "residual_after_mlp")
    with pytest.raises(KeyError) as error:  # a model name too
        course.atlas("transformers")[long]
    assert long not in str(error.value) and len(str(error.value)) < 1200


def test_where_counts_blocks_in_the_order_they_run_and_says_which_stack():
    """resnet50's stacks come largest first (``layer4``), but ``where(i)`` counts the blocks in the order the input
    meets them: the truth is a forward pre-hook on every block of torchvision's resnet50. ``residual`` is the stream
    after the block on a convolution net too (the block's own output)."""
    import torchvision

    from hooklab import course

    entry = course.atlas("torchvision")["resnet50"]
    assert entry["stacks"][0]["path"] == "layer4"
    model = torchvision.models.resnet50(weights=None).eval()
    order = []
    handles = [m.register_forward_pre_hook(lambda m, a, name=name: order.append(name))
               for name, m in model.named_modules() if type(m).__name__ == "Bottleneck"]
    try:
        with torch.no_grad():
            model(torch.randn(1, 3, 64, 64))
    finally:
        for handle in handles:
            handle.remove()
    assert len(order) == 16
    for i, name in enumerate(order):
        place = entry.where(i, "residual")
        assert (place["module"], place["stack"], place["block"]) == (name, name.rpartition(".")[0],
                                                                      int(name.rpartition(".")[2])), i
    assert "block 3 in the order the blocks run is block 0 of stack 'layer2'" in entry.where(3, "residual")["note"]
    with pytest.raises(LookupError, match="16 in all, so block 16 is past them"):
        entry.where(16)


def test_a_place_overwritten_in_place_later_says_to_clone_it():
    """torchvision's Bottleneck: ``out = bn3(...); out += identity; out = relu(out)`` with ``inplace=True``. The
    truth, with a plain forward hook on ``bn3``: the tensor it got, kept without ``.clone()``, is not what it was
    when the hook ran. The atlas says so (``clone``), and says nothing for the block's own output, which nothing
    changes after."""
    import torchvision

    from hooklab import course

    entry = course.atlas("torchvision")["resnet50"]
    branch = entry.where(1, "branch")
    assert branch["module"] == "layer1.1.bn3" and branch["clone"] is True and "clone it" in str(branch)
    residual = entry.where(1, "residual")
    assert "clone" not in residual
    # the sum before the in-place ReLU (its forward pre-hook): the printed line says to clone it too
    assert residual["sum"]["module"] == "layer1.1.relu" and residual["sum"]["clone"] is True
    assert "clone the sum in its hook" in str(residual)
    model = torchvision.models.resnet50(weights=None).eval()
    kept, sums = [], []
    handles = [model.layer1[1].bn3.register_forward_hook(lambda m, a, out: kept.append((out, out.clone()))),
               model.layer1[1].relu.register_forward_pre_hook(lambda m, a: sums.append((a[0], a[0].clone())))]
    try:
        with torch.no_grad():
            model(torch.randn(1, 3, 64, 64))
    finally:
        for handle in handles:
            handle.remove()
    assert not torch.equal(*kept[0])
    assert not torch.equal(*sums[2])  # relu runs three times in the block: the sum is its third call's input
    assert residual["sum"]["call"] == "3 of 3"


@pytest.mark.parametrize("name", ["regnet_x_3_2gf", "keypointrcnn_resnet50_fpn"])
def test_the_clone_flags_say_which_tensors_a_later_in_place_op_changes(name):
    """On the model rebuilt as the atlas built it, a plain hook on every place ``where(i)`` names (and each sum
    before a norm or ReLU) keeps the tensor it got and a copy; after the step, the tensor differs from its copy
    exactly where the atlas says ``clone`` (RegNet's ``ReLU(inplace=True)`` after each sum; the ResNet backbone's
    ``out += identity`` on bn3's output, then the in-place ReLU)."""
    from hooklab import course

    entry = course.atlas("torchvision")[name]
    built = _rebuild("torchvision", name)
    for block in (0, 1):
        places = entry.where(block)
        hooked = {role: p for role, p in places.items() if p["module"] is not None}
        hooked.update({f"{role}.sum": p["sum"] for role, p in places.items() if isinstance(p.get("sum"), dict)})
        kept: dict[str, list] = {role: [] for role in hooked}
        handles = []
        for role, place in hooked.items():
            wanted, count = int(place.get("call", "1 of 1").split()[0]), [0]

            def keep(got, role=role, wanted=wanted, count=count, take=place["take"]):
                count[0] += 1
                if count[0] == wanted:
                    t = _taken(got, take)
                    kept[role].append((t, t.detach().clone()))
            module = built.model.get_submodule(place["module"])
            handles.append(module.register_forward_pre_hook(lambda m, a, keep=keep: keep(a))
                           if place["hook"] == "forward_pre" else
                           module.register_forward_hook(lambda m, a, out, keep=keep: keep(out)))
        try:
            built.run()
        finally:
            for handle in handles:
                handle.remove()
        changed = {role for role, got in kept.items() if not torch.equal(*got[0])}
        assert all(len(got) == 1 for got in kept.values()), (name, block)
        assert changed == {role for role, p in hooked.items() if p.get("clone")}, (name, block, changed)
        assert changed, (name, block)


def test_granite_adds_its_branches_times_its_residual_multiplier():
    """transformers' GraniteDecoderLayer computes ``residual + hidden_states * self.residual_multiplier`` after the
    attention and after the MLP (recipe mech-interp-31 checks it too). The atlas built Granite at the default of 1.0;
    proved there alone, its identity read ``block input + attention + mlp``. The truth: a Granite built with 0.22,
    plain hooks on the places ``where(0)`` names, and the multiplier read where ``scale_by`` says."""
    import transformers

    from hooklab import course

    entry = course.atlas("transformers")["granite"]
    places = entry.where(0)
    assert places["attention"]["identity"] == \
        "block output = block input + residual_multiplier * attention + residual_multiplier * mlp"
    torch.manual_seed(0)
    model = transformers.GraniteForCausalLM(transformers.GraniteConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=32, residual_multiplier=0.22)).eval()
    seen: dict[str, list] = {role: [] for role in places}
    handles = [_hook(model, place, seen[role]) for role, place in places.items()]
    try:
        with torch.no_grad():
            model(torch.tensor([[1, 5, 9, 13, 17, 21]]))
    finally:
        for handle in handles:
            handle.remove()
    got = {role: found[0][0] for role, found in seen.items()}
    for role, base, after in (("attention", "input", "residual_after_attention"),
                              ("mlp", "residual_after_attention", "residual_after_mlp")):
        (scalar,) = places[role]["scale_by"]
        assert (scalar["of"], scalar["scalar"], scalar["config"]) == \
            ("model.layers.0", "residual_multiplier", "residual_multiplier")
        m = getattr(model.get_submodule(scalar["of"]), scalar["scalar"]) * places[role]["scale_by_factor"]
        assert m == 0.22 and f"`{scalar['of']}.residual_multiplier`" in str(places[role])
        assert torch.allclose(got[after], got[base] + m * got[role], atol=1e-6), role
        assert not torch.allclose(got[after], got[base] + got[role], atol=1e-3), role


def _mixes_positions(module, x: torch.Tensor, *args) -> bool:
    """The plain-PyTorch truth of a module alone: does perturbing token 1 change its output at other tokens?"""
    with torch.no_grad():
        y = x.clone()
        y[:, 1] += 1.0
        change = (module(y, *args) - module(x, *args)).abs().amax(dim=(0, 2))
    return int((change > 0).sum()) > 1


def test_xcit_local_patch_interaction_is_a_branch_and_the_mlp_is_the_mlp():
    """timm's XCABlock runs attention, then ``local_mp`` (LPI: depthwise convolutions over neighbouring patches),
    then ``mlp``. The atlas named ``local_mp`` the MLP; measured, it mixes positions (a ``branch``) and the MLP is
    the position-wise one. The truth: each module alone, perturbed at one token."""
    from timm.layers import Mlp
    from timm.models.xcit import LPI

    from hooklab import course

    entry = course.atlas("timm")["xcit_tiny_12_p8_224"]
    places = entry.where(0)
    assert [k for k in places if k not in ("input",) and not k.startswith("residual")] == \
        ["attention", "branch", "mlp"]
    assert (places["branch"]["inside"]["module"], places["mlp"]["inside"]["module"]) == \
        ("blocks.0.local_mp", "blocks.0.mlp")  # inside the drop_path modules whose outputs are the terms
    torch.manual_seed(0)
    x = torch.randn(2, 16, 8)
    assert _mixes_positions(LPI(8), x, 4, 4) and not _mixes_positions(Mlp(8, 16), x)
    assert places["branch"]["computes"] == "mixes positions" and places["mlp"]["computes"] == "position-wise"


def test_a_stride_two_block_proves_its_identity_with_its_shortcut():
    """repghostnet's block 1 widens the stream (24 -> 36 channels): its output is ``shortcut(input)`` plus the
    second ghost module's output (``x += self.shortcut(residual)``, in place: the branch's hook must clone), and the
    atlas offers the ``shortcut`` (the numbers are checked on the model rebuilt, above). The bottleneck itself, a
    residual block, is no shortcut: the first sum is found whole, not as two parallel parts inside ``ghost2``."""
    from hooklab import course

    entry = course.atlas("timm")["repghostnet_150"]
    places = entry.where(1)
    assert places["shortcut"]["module"] == "blocks.1.0.shortcut"
    assert places["branch"]["identity"] == "block output = shortcut(block input) + branch"
    assert places["branch"]["module"] == "blocks.1.0.ghost2" and places["branch"]["clone"] is True
    assert places["residual_after_branch"]["module"] == "blocks.1"


def test_a_unet_names_its_transformer_blocks_and_the_stacks_that_answer():
    """A UNet's ``attentions.N`` is a whole Transformer2DModel (self-attention, cross-attention, feed-forward):
    not "attention". Its inner blocks are measured as a stack: there self-attention mixes positions, the
    cross-attention (keys from the text) and the feed-forward are position-wise in the image's stream. The default
    stack (down blocks, then the middle, then the up blocks) has no identity: the error names the stacks that do."""
    from hooklab import course

    unet = course.atlas("diffusers")["UNet2DConditionModel"]
    with pytest.raises(LookupError, match="Stacks whose blocks answer: .*down_blocks.0.attentions"):
        unet.where(0)
    outer = unet.where(0, "transformer", stack="down_blocks.0.attentions")
    inner = outer["inner_stack"]
    assert inner == "down_blocks.0.attentions.0.transformer_blocks" and "where(j, 'attention'" in outer["note"]
    with pytest.raises(KeyError, match="holds blocks of its own"):
        unet.where(0, "attention", stack="down_blocks.0.attentions")
    parts = unet.where(0, stack=inner)
    assert parts["attention"]["module"] == f"{inner}.0.attn1" and parts["attention"]["computes"] == "mixes positions"
    assert parts["cross_attention"]["module"] == f"{inner}.0.attn2"
    assert parts["mlp"]["module"] == f"{inner}.0.ff" and parts["mlp"]["computes"] == "position-wise"


def test_every_kind_of_place_has_a_line_in_both_languages():
    """What ``course.ask``'s index reads: ``place_kinds`` of each atlas, kind -> {"en", "zh"}; every role a
    measured block has is one of them."""
    from hooklab import course

    for zoo in ("torchvision", "timm", "diffusers", "transformers"):
        kinds = course.atlas(zoo).place_kinds
        assert all(v["en"] and v["zh"] for v in kinds.values()), zoo
        for entry in course.atlas(zoo).values():
            for stack in (entry.get("inside") or {}).values():
                for pattern in stack.get("patterns", []):
                    for stream in pattern["streams"]:
                        for role in stream["lookups"]:
                            base = re.sub(r"_\d+$", "", role)
                            assert base in kinds or base.startswith("residual_after_"), (zoo, role)
