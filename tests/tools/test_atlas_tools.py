"""The hook atlas's tools: the committed atlas files (hooklab/course/assets/atlas/), the site pages made from them, the difference
between two atlases (what ``./course rerun --with transformers==X`` reports), and the generator's own rules. No model
is built here (tests/library/test_atlas.py rebuilds a sample and checks the doctor and the lookups inside the blocks
against it); the measurement inside a block is checked on small blocks written here, whose identity is known."""
from __future__ import annotations

import copy
import json
import re
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tools.atlas import pages as atlas_pages
from tools.atlas.probe import CAUSES
from tools.atlas.transformers_zoo import shrink_config_dict
from tools.rerun import command as rerun
from tools.site import build as site

ROOT = Path(__file__).resolve().parents[2]
ATLAS = ROOT / "hooklab" / "course" / "assets" / "atlas"

pytestmark = pytest.mark.timeout(120)


def committed() -> list[dict]:
    found = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(ATLAS.glob("*.json"))]
    assert found, "hooklab/course/assets/atlas has no atlas (python -m tools.atlas run --zoo Z; python -m tools.atlas write --zoo Z)"
    return found


def test_every_atlas_counts_its_models_and_records_what_the_pages_need():
    for data in committed():
        models = data["models"]
        counts = data["counts"]
        assert counts == atlas_pages.summarize(models)
        assert counts["models"] == len(models) == counts["built"] + counts["structure only"] + sum(
            counts["not built"].values())
        assert set(data["versions"]) == set(atlas_pages.PACKAGES[data["zoo"]]) and all(data["versions"].values())
        for name, entry in models.items():
            if entry["status"] == "not built":
                assert entry["reason"], name
                continue
            assert isinstance(entry["stacks"], list), name
            if entry["status"] == "built":
                for path, _cls, cause, parent_called in entry["never_fired"]:
                    assert cause in CAUSES and parent_called in (0, 1), (name, path)


def test_the_block_finder_agrees_with_transformers_own_blocks_on_the_whole_zoo():
    """Recorded when the atlas ran: every GradientCheckpointingLayer (what transformers checkpoints) is one of the
    blocks find_blocks found, or inside one of them (a stage list's blocks)."""
    data = next((d for d in committed() if d["zoo"] == "transformers"), None)
    if data is None:
        pytest.skip("no transformers atlas")
    checked = missed = 0
    for entry in data["models"].values():
        truth = entry.get("library_blocks")
        if truth:
            checked += 1
            missed += truth["missed_count"] > 0
    assert checked > 50 and missed == 0


def test_site_pages_in_both_languages_are_searchable_by_model_type_and_module_path(tmp_path):
    for data in committed():
        built = [(n, e) for n, e in data["models"].items() if e["status"] == "built" and e.get("never_fired")]
        for lang in ("zh", "en"):
            page = atlas_pages.site_page(data, lang)
            assert page.startswith("# ") and f"`{built[0][0]}`" in page
            top = [r for r in built[0][1]["never_fired"] if r[3] and r[2] != "container"]
            if top:
                assert f"`{top[0][0]}`" in page
        assert "钩子地图" in atlas_pages.site_page(data, "zh") and "Hook atlas" in atlas_pages.site_page(data, "en")
    pages = {k: v for k, v in site.extra_pages(ROOT).items() if k.startswith("atlas-")}  # beside the recipes' pages
    assert sorted(pages) == sorted(f"atlas-{d['zoo']}" for d in committed())
    assert all(callable(write) for write in pages.values())


def test_the_difference_between_two_atlases():
    data = committed()[0]
    name, entry = next((n, e) for n, e in data["models"].items() if e["status"] == "built" and e.get("stacks"))
    newer = copy.deepcopy(data)
    newer["versions"] = {k: "9.9" for k in data["versions"]}
    newer["models"][name]["stacks"][0]["count"] += 1
    newer["models"][name]["never_fired"].append(["x.y", "Linear", "not reached", 1])
    newer["models"]["brand_new"] = {"status": "not built", "reason": "r"}
    gone = next(n for n in data["models"] if n != name)
    del newer["models"][gone]
    d = atlas_pages.diff(data, newer)
    assert d["added"] == ["brand_new"] and d["removed"] == [gone]
    assert set(d["changed"]) == {name} and set(d["changed"][name]) == {"stacks", "never fire"}
    text = atlas_pages.diff_text(data, newer)
    assert "models added: 1 (brand_new)" in text and f"`{name}` never-firing" in text and "('x.y', 'not reached')" in text
    assert atlas_pages.diff(data, data)["changed"] == {}


@pytest.mark.parametrize("argv, zoos", [
    (["--torch", "2.13.0"], []),
    (["--torch", "2.13.0", "--with", "transformers==5.0.0"], ["transformers"]),
    (["--torch", "2.13.0", "--vision", "0.28.0", "--atlas", "timm"], ["timm"]),
])
def test_matrix_measures_the_atlas_of_a_replaced_zoo(argv, zoos):
    assert rerun.atlas_zoos(rerun.parse_args(argv)) == zoos


def test_matrix_atlas_section_compares_with_the_committed_atlas(tmp_path, monkeypatch):
    data = committed()[0]
    zoo = data["zoo"]
    changed = copy.deepcopy(data)
    changed["models"]["brand_new"] = {"status": "not built", "reason": "r"}

    def fake_run(cmd, **kwargs):  # the side environment's generator: writes the atlas it measured
        if "write" in cmd:
            dest = Path(cmd[cmd.index("--dest") + 1])
            (dest / f"{zoo}.json").write_text(json.dumps(changed), encoding="utf-8")
        return None
    monkeypatch.setattr(rerun.subprocess, "run", fake_run)
    monkeypatch.setattr(rerun, "ROOT", ROOT)
    folder = ROOT / "build" / "rerun" / "test-atlas"
    try:
        text = rerun.atlas_diff(Path("python"), folder, [zoo])
    finally:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
    assert "## Hook atlas" in text and "models added: 1 (brand_new)" in text


def test_config_shrinking_keeps_every_kind_of_layer_and_what_depends_on_the_layer_count():
    hybrid = {"num_hidden_layers": 8, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
              "layer_types": ["mamba"] * 4 + ["attention"] + ["mamba"] * 3, "per_layer_config": {"1": {}, "6": {}},
              "intermediate_size": 11008, "vocab_size": 32000, "text_config": {"model_type": "x", "hidden_size": 1024,
                                                                                 "num_hidden_layers": 24}}
    small = shrink_config_dict(hybrid)
    assert small["num_hidden_layers"] == 5 and small["layer_types"] == hybrid["layer_types"][:5]
    assert small["per_layer_config"] == {"1": {}}
    assert (small["hidden_size"], small["num_attention_heads"], small["num_key_value_heads"]) == (64, 4, 4)
    assert small["vocab_size"] == 32000 and small["text_config"]["num_hidden_layers"] == 2
    stages = shrink_config_dict({"depths": [2, 2, 6, 2], "num_layers": 4, "num_heads": [3, 6, 12, 24],
                                 "embed_dim": 96, "image_size": 224, "window_size": 7})
    assert stages["depths"] == [2, 2, 2, 2] and stages["num_layers"] == 4 and stages["embed_dim"] == 96
    assert stages["image_size"] == 224
    heads = shrink_config_dict({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                                "head_dim": 128}, "heads")
    assert (heads["hidden_size"], heads["num_attention_heads"], heads["num_key_value_heads"], heads["head_dim"]) == \
        (256, 2, 1, 128)


def test_the_weekly_run_checks_every_model_split_across_its_shards():
    """./course test --all (the weekly workflow, in shards) turns the atlas's sweep on, and the gate splits its tests
    test by test across the shards."""
    from tools.gate.command import SWEEPS
    from tools.gate.plan import SPLIT_BY_TEST

    assert SWEEPS["HOOKLAB_ATLAS_ALL"] == "1" and "tests/library/test_atlas.py" in SPLIT_BY_TEST


# ------------------------------------------------------------------------------------------------ inside the blocks
def test_every_built_model_has_lookups_inside_its_blocks_or_says_why():
    """Each lookup is a place a hook reaches (a module of the block, a forward hook or pre-hook, what to take), or a
    sum no tensor holds with how to compute it; each branch says which lookup its output is added to; a block with
    no residual identity says why."""
    take = re.compile(r"(output|args|kwargs)(\[\d+\]|\['[^']+'\]|\.\w+)*")
    for data in committed():
        for name, entry in data["models"].items():
            if entry["status"] != "built":
                continue
            assert "inside" in entry, (data["zoo"], name)
            if entry["inside"] is None:
                assert entry["inside_why"], name
                continue
            for path, stack in entry["inside"].items():
                if stack.get("why"):
                    continue
                assert len(stack["block_pattern"]) == stack["blocks"], (name, path)
                for pattern in stack["patterns"]:
                    for stream in pattern["streams"]:
                        if not stream["identity"]["holds"]:
                            assert stream["identity"]["why"], (name, path)
                            continue
                        found = stream["lookups"]
                        for role, place in found.items():
                            if place["module"] is None:
                                assert place["compute"].startswith(("block input + ", "shortcut output + ")), \
                                    (name, role)
                                continue
                            assert place["hook"] in ("forward", "forward_pre") and take.fullmatch(place["take"])
                            assert place["take"].startswith("output") == (place["hook"] == "forward"), (name, role)
                            assert place.get("adds_to", "input") in found, (name, role)


class _Mix(nn.Module):
    """Self-attention under another name: only what runs in it (``scaled_dot_product_attention``) says so."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        return self.proj(F.scaled_dot_product_attention(q, k, v).squeeze(1))


class _PreNorm(nn.Module):
    """x + mix(ln1(x)), then + mlp(ln2(.))."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.ln1, self.ln2, self.mix = nn.LayerNorm(width), nn.LayerNorm(width), _Mix(width)
        self.mlp = nn.Sequential(nn.Linear(width, 16), nn.GELU(), nn.Linear(16, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mix(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class _PostNorm(_PreNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x + self.mix(x))
        return self.ln2(h + self.mlp(h))


class _Parallel(_PreNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mix(self.ln1(x)) + self.mlp(self.ln2(x))


class _ZeroGate(_PreNorm):
    """A branch behind a zero-initialised gate per channel (adaLN-zero, a layer scale): invisible as built."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gate * self.mlp(self.ln1(x))


class _NoSkip(_PreNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.ln1(x))


class _Stack(nn.Module):
    def __init__(self, block: type) -> None:
        super().__init__()
        self.layers = nn.ModuleList([block() for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _inside(block: type) -> dict:
    """The one stream of a two-block stack of ``block``, as the atlas measures it."""
    from hooklab import find_blocks
    from tools.atlas import inside

    torch.manual_seed(0)
    model = _Stack(block).eval()
    x = torch.randn(2, 5, 8)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return model(x)
    stack = inside.measure(model, run, find_blocks(model))["layers"]  # (and the stacks inside a branch, if any)
    (pattern,) = stack["patterns"]
    assert pattern["blocks"] == [0, 1] and stack["block_pattern"] == [0, 0] and stack["names"] == "layers.{i}"
    (stream,) = pattern["streams"]
    return stream


def _terms(found: dict) -> dict:
    return {role: (place["module"], place.get("hook"), place.get("take"), place.get("adds_to"))
            for role, place in found["lookups"].items() if role != "input"}


def test_a_pre_norm_block_attention_named_by_what_runs_in_it():
    found = _inside(_PreNorm)
    assert found["identity"]["text"] == "block output = block input + attention + mlp"
    assert found["lookups"]["attention"]["evidence"] == ["scaled_dot_product_attention"]
    assert _terms(found) == {"attention": ("mix", "forward", "output", "input"),
                             "mlp": ("mlp", "forward", "output", "residual_after_attention"),
                             "residual_after_attention": ("ln2", "forward_pre", "args[0]", None),
                             "residual_after_mlp": ("", "forward", "output", None)}


def test_a_post_norm_block_its_stream_is_the_normalized_sum():
    found = _inside(_PostNorm)
    assert found["identity"] == {"holds": True, "form": "post-norm",
                                 "text": "block output = norm(norm(block input + attention) + mlp)"}
    after = found["lookups"]["residual_after_attention"]
    assert (after["module"], after["take"]) == ("ln1", "output")
    assert (after["sum"]["module"], after["sum"]["hook"]) == ("ln1", "forward_pre")


class _NormedStream(_PreNorm):
    """MiniMax's layer: the attention adds to the normalized input, not to the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        h = self.ln2(h + self.mix(h))
        return h + self.mlp(h)


def test_a_branch_that_adds_to_a_stream_made_inside_the_block_names_that_stream():
    """transformers' MiniMax: ``residual = input_layernorm(x)``, then ``residual + attention``. The atlas said the
    attention adds to the block's input; the truth is plain hooks on the model: ln2's input is ln1's output plus
    the attention's, and not the block's input plus it."""
    found = _inside(_NormedStream)
    assert found["identity"]["text"] == "block output = norm(norm(block input) + attention) + mlp"
    assert found["lookups"]["attention"]["adds_to"] == "residual_before_attention"
    before = found["lookups"]["residual_before_attention"]
    assert (before["module"], before["hook"], before["take"]) == ("ln1", "forward", "output")
    torch.manual_seed(0)
    model = _Stack(_NormedStream).eval()
    seen: dict[str, torch.Tensor] = {}
    block = model.layers[0]
    handles = [block.register_forward_pre_hook(lambda m, a: seen.setdefault("input", a[0])),
               block.ln1.register_forward_hook(lambda m, a, o: seen.setdefault("before", o)),
               block.mix.register_forward_hook(lambda m, a, o: seen.setdefault("attention", o)),
               block.ln2.register_forward_pre_hook(lambda m, a: seen.setdefault("sum", a[0]))]
    try:
        with torch.no_grad():
            model(torch.randn(2, 5, 8))
    finally:
        for handle in handles:
            handle.remove()
    assert torch.allclose(seen["sum"], seen["before"] + seen["attention"], atol=1e-6)
    assert not torch.allclose(seen["sum"], seen["input"] + seen["attention"], atol=1e-2)


def test_a_parallel_block_has_no_tensor_for_the_sum_after_attention():
    found = _inside(_Parallel)
    assert found["identity"]["form"] == "parallel"
    assert _terms(found)["residual_after_attention"] == (None, None, None, None)
    assert found["lookups"]["residual_after_attention"]["compute"] == "block input + attention output"
    assert found["lookups"]["mlp"]["adds_to"] == "residual_after_attention"
    assert found["lookups"]["residual_after_attention"]["note"] == (  # GPT-NeoX's: each branch its own norm
        "a parallel block: the attention reads `ln1`'s output (the block's input through it), the mlp `ln2`'s "
        "output (the block's input through it); no tensor holds this sum")


def test_a_zero_initialised_gate_is_given_values_and_its_branch_found():
    found = _inside(_ZeroGate)
    assert found["identity"]["text"] == "block output = block input + gate * mlp"
    assert found["lookups"]["mlp"]["scale"] == "per channel"


class _LPI(nn.Module):
    """timm's local patch interaction: a depthwise convolution over neighbouring tokens."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv1d(width, width, 3, padding=1, groups=width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class _LocalMix(_PreNorm):
    """XCiT's order: attention, a convolution over the tokens (named ``local_mp``, as timm's LPI), then the MLP."""

    def __init__(self, width: int = 8) -> None:
        super().__init__(width)
        self.ln3, self.local_mp = nn.LayerNorm(width), _LPI(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mix(self.ln1(x))
        x = x + self.local_mp(self.ln3(x))
        return x + self.mlp(self.ln2(x))


def _mixes_positions(module: nn.Module, x: torch.Tensor) -> bool:
    """The plain-PyTorch truth: does perturbing token 0 of ``module``'s input change its output at other tokens?"""
    with torch.no_grad():
        y = x.clone()
        y[:, 0] += 1.0
        return not torch.equal(module(x)[:, 1:], module(y)[:, 1:])


def test_each_branch_is_named_by_what_it_computes_not_by_its_place():
    """A branch that mixes positions without attention (a convolution) is a ``branch``, not the MLP, though it
    comes after the attention (the old rule named it ``mlp``); the position-wise one is the ``mlp``; the truth is
    the perturbation measured here with plain PyTorch on each module alone."""
    found = _inside(_LocalMix)
    roles = {role: place["module"] for role, place in found["lookups"].items() if "adds_to" in place}
    assert roles == {"attention": "mix", "branch": "local_mp", "mlp": "mlp"}, roles
    x = torch.randn(2, 5, 8)
    truth = {"attention": _mixes_positions(_Mix(), x), "branch": _mixes_positions(_LPI(), x),
             "mlp": _mixes_positions(_PreNorm().mlp, x)}
    assert truth == {"attention": True, "branch": True, "mlp": False}
    for role, mixes in truth.items():
        assert found["lookups"][role]["computes"] == ("mixes positions" if mixes else "position-wise")
    assert found["identity"]["text"] == "block output = block input + attention + branch + mlp"


class _Multiplied(_PreNorm):
    """A residual multiplier (Granite's, MiniCPM's): 1.0 by default, so a place proved at the default cannot tell
    ``x + m * attention`` from ``x + attention``."""

    def __init__(self, width: int = 8) -> None:
        super().__init__(width)
        self.residual_multiplier = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.residual_multiplier * self.mix(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def test_a_scalar_that_scales_a_branch_is_changed_and_the_place_says_its_scale_follows_it():
    from tools.atlas import inside

    found = _inside(_Multiplied)
    assert found["lookups"]["attention"].get("scale_follows_scalars") is True
    assert "scale_follows_scalars" not in found["lookups"]["mlp"]
    block = _Multiplied()
    assert [name for _, name, _ in inside.config_scalars({"b": block})] == ["residual_multiplier"]
    with inside.other_scalars(inside.config_scalars({"b": block})) as changed:
        assert changed == ["residual_multiplier"] and block.residual_multiplier != 1.0
    assert block.residual_multiplier == 1.0  # put back


class _Granite(_PreNorm):
    """Granite's block: both branches times ``self.residual_multiplier``, copied from its config at init (1.0 by
    default; Granite's checkpoints use others, 0.22)."""

    def __init__(self, width: int = 8, multiplier: float = 1.0) -> None:
        super().__init__(width)
        self.config = SimpleNamespace(residual_multiplier=multiplier, hidden_size=width)
        self.residual_multiplier = self.config.residual_multiplier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mix(self.ln1(x)) * self.residual_multiplier
        return x + self.mlp(self.ln2(x)) * self.residual_multiplier


def _run_then_remove(model, x, handles) -> None:
    """One call of model(x) without gradients, with the plain hooks of ``handles``, removed even on a raise."""
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()


def test_the_identity_names_the_scalar_a_branch_is_multiplied_by_and_holds_at_other_values():
    """Proved at the default multiplier of 1.0 alone, the identity read ``block input + attention + mlp``, which is
    false for any other value; the scalar changed on its own shows which one it is. The truth, with plain hooks on
    a block built with 0.22: the sums are the stream plus 0.22 times each branch's output, not plus the output."""
    found = _inside(_Granite)
    assert found["identity"]["text"] == \
        "block output = block input + residual_multiplier * attention + residual_multiplier * mlp"
    for role in ("attention", "mlp"):
        place = found["lookups"][role]
        assert place["scale_by"] == [{"scalar": "residual_multiplier", "of": "", "config": "residual_multiplier",
                                      "value": 1.0}], place
        assert place["scale_by_factor"] == 1.0 and place["added"].startswith("times residual_multiplier (")
    torch.manual_seed(0)
    block, x, seen = _Granite(multiplier=0.22).eval(), torch.randn(2, 5, 8), {}
    handles = [block.mix.register_forward_hook(lambda m, a, out: seen.update(attention=out)),
               block.ln2.register_forward_pre_hook(lambda m, a: seen.update(after=a[0]))]
    _run_then_remove(block, x, handles)
    assert torch.allclose(seen["after"], x + 0.22 * seen["attention"], atol=1e-6)
    assert not torch.allclose(seen["after"], x + seen["attention"], atol=1e-3)


def test_a_branch_scaled_in_proportion_to_a_scalar_reads_as_its_factor_times_the_scalar():
    """MiniCPM's ``scale_depth / sqrt(num_hidden_layers)``: the factor measured in the model built, times the name.
    The sentence shows 4 digits; the data keep the scale as measured, since a sum rebuilt with 0.9899 for
    1.4 / sqrt(2) = 0.98995 misses by 5e-5 of the branch, far above float32 rounding."""
    class Depth(_PreNorm):
        def __init__(self, width: int = 8) -> None:
            super().__init__(width)
            self.scale_depth = 1.4

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.mix(self.ln1(x)) * (self.scale_depth / 2 ** 0.5)
            return x + self.mlp(self.ln2(x))
    found = _inside(Depth)
    assert found["identity"]["text"] == "block output = block input + 0.7071 * scale_depth * attention + mlp"
    assert found["lookups"]["attention"]["added"].startswith("times 0.7071 * scale_depth ")
    assert found["lookups"]["attention"]["scale"] == pytest.approx(1.4 / 2 ** 0.5, rel=1e-6)
    assert found["lookups"]["attention"]["scale_by_factor"] == 0.7071  # a name's factor, as the sentence says
    assert "scale_by" not in found["lookups"]["mlp"]


class _InPlace(_PreNorm):
    """torchvision's ResNet order: ``out = mlp(...); out += x; relu(out)`` in place."""

    def __init__(self, width: int = 8) -> None:
        super().__init__(width)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.mlp(self.ln1(x))
        out += x
        return self.relu(out)


def test_a_place_overwritten_later_in_the_forward_says_to_clone_it():
    """Truth with plain hooks: the tensor ``mlp``'s forward hook gets, kept without a clone, is not what it was
    when the hook ran (``out += x`` and the in-place ReLU changed it); the block's own output is not changed."""
    found = _inside(_InPlace)
    assert found["lookups"]["mlp"].get("clone") is True
    assert "clone" not in found["lookups"]["residual_after_mlp"]
    block, x = _InPlace().eval(), torch.randn(2, 5, 8)
    kept = []
    handle = block.mlp.register_forward_hook(lambda m, a, out: kept.append((out, out.clone())))
    try:
        with torch.no_grad():
            block(x)
    finally:
        handle.remove()
    assert not torch.equal(*kept[0])


class _Ghost(nn.Module):
    """RepGhost's stride-free widening block: out = shortcut(x) + cheap(h) + fusion(h), h = primary(x); the
    stream changes width, so the identity starts from the shortcut's output."""

    def __init__(self) -> None:
        super().__init__()
        self.primary = nn.Sequential(nn.Conv2d(4, 6, 1), nn.ReLU())
        self.cheap, self.fusion = nn.Conv2d(6, 6, 3, padding=1, groups=6), nn.BatchNorm2d(6)
        self.shortcut = nn.Sequential(nn.Conv2d(4, 6, 1), nn.BatchNorm2d(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.primary(x)
        return self.shortcut(x) + self.cheap(h) + self.fusion(h)


def test_a_block_that_changes_the_stream_proves_its_identity_with_its_shortcut():
    from hooklab import find_blocks
    from tools.atlas import inside

    torch.manual_seed(0)
    model = nn.Sequential(_Ghost(), _Ghost()).eval()
    model[1].primary[0], model[1].shortcut[0] = nn.Conv2d(6, 6, 1), nn.Conv2d(6, 6, 1)
    x = torch.randn(2, 4, 6, 6)
    stack = inside.measure(model, lambda: model(x), find_blocks(model))[""]
    first = stack["patterns"][stack["block_pattern"][0]]["streams"][0]
    assert first["identity"]["holds"], first["identity"]
    found = first["lookups"]
    assert found["shortcut"]["module"] == "shortcut"
    assert first["identity"]["text"].startswith("block output = shortcut(block input) + ")
    parallel = [p for p in found.values() if p.get("module") is None]
    assert parallel and parallel[0]["compute"].startswith("shortcut output + ")
    # both branches read the primary convolution's output, not the block's input (the note said so before)
    assert parallel[0]["note"] == "a parallel block: both branches read `primary`'s output; no tensor holds this sum"
    with torch.no_grad():  # the truth: output = shortcut(x) + the two branches, with plain calls
        h = model[0].primary(x)
        assert torch.allclose(model[0](x), model[0].shortcut(x) + model[0].cheap(h) + model[0].fusion(h))
    seen: dict = {}
    handles = [model[0].primary.register_forward_hook(lambda m, a, out: seen.update(primary=out)),
               model[0].cheap.register_forward_pre_hook(lambda m, a: seen.update(cheap=a[0])),
               model[0].fusion.register_forward_pre_hook(lambda m, a: seen.update(fusion=a[0]))]
    _run_then_remove(model, x, handles)
    assert seen["cheap"] is seen["primary"] and seen["fusion"] is seen["primary"]
    assert seen["cheap"].shape != x.shape  # not the block's input: 6 channels where the input has 4


class _Transformer2D(nn.Module):
    """A UNet's attention block: x + proj_out(blocks(proj_in(x))), the blocks each attention and a feed-forward."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.proj_in, self.proj_out = nn.Linear(width, width), nn.Linear(width, width)
        self.transformer_blocks = nn.ModuleList([_PreNorm(width)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj_in(x)
        for block in self.transformer_blocks:
            h = block(h)
        return x + self.proj_out(h)


def test_a_whole_transformer_block_is_not_named_attention_and_its_inside_is_measured():
    found = _inside(_Transformer2D)
    place = found["lookups"]["transformer"]
    assert "attention" not in found["lookups"] and place["blocks_inside"] == "transformer_blocks"
    from hooklab import find_blocks
    from tools.atlas import inside

    torch.manual_seed(0)
    model = _Stack(_Transformer2D).eval()
    x = torch.randn(2, 5, 8)
    measured = inside.measure(model, lambda: model(x), find_blocks(model))
    inner = measured["layers.0.transformer_blocks"]
    assert inner["inner_of"] == "layers"
    lookups = inner["patterns"][0]["streams"][0]["lookups"]
    assert lookups["attention"]["module"] == "mix" and lookups["mlp"]["module"] == "mlp"
    assert measured["layers"]["order"] == 0


def test_a_block_without_a_skip_connection_says_why():
    found = _inside(_NoSkip)
    assert found["identity"]["holds"] is False and "no residual sum" in found["identity"]["why"]
    assert found["lookups"] == {}


def test_multihead_attention_out_proj_fires_neither_on_nor_off_the_fast_path():
    """The atlas's "fast path" cause for nn.MultiheadAttention's out_proj suggests leaving the fast path; measured
    with it off as well, the hook still never fires (the slow path reads out_proj.weight directly)."""
    from tools.atlas import inside

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln, self.attn = nn.LayerNorm(8), nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.ln(x)
            return x + self.attn(y, y, y, need_weights=False)[0]

    model = nn.Sequential(Encoder(), Encoder()).eval()
    x = torch.randn(2, 5, 8)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return model(x)
    found = inside.measure(model, run, [SimpleNamespace(path="", names=["0", "1"])])[""]
    assert found["implementations"] == ["fast path", "fast path off"]
    (pattern,) = found["patterns"]
    assert pattern["never_fire"] == ["attn.out_proj"]
    attention = pattern["streams"][0]["lookups"]["attention"]
    assert (attention["module"], attention["take"], attention["receives"]) == ("attn", "output[0]", "tuple[Tensor, None]")


def test_block_call_names_the_hidden_states_stream_of_a_two_stream_block():
    """SD3's joint blocks take hidden_states and encoder_hidden_states and return (encoder_hidden_states,
    hidden_states): the first output tensor is the text's stream, not the image's."""
    from tools.atlas import probe

    class Joint(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.image, self.text = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor) -> tuple:
            return encoder_hidden_states + self.text(encoder_hidden_states), hidden_states + self.image(hidden_states)

    block = Joint()
    model = nn.ModuleList([block])
    call = probe.block_call(model, block, lambda: block(hidden_states=torch.randn(1, 6, 8),
                                                        encoder_hidden_states=torch.randn(1, 3, 8)))
    assert (call["hidden_states"], call["hidden_states_out"]) == ("kwargs['hidden_states']", "output[1]")
    assert call["streams"] == [{"input": "kwargs['hidden_states']", "output": "output[1]"},
                               {"input": "kwargs['encoder_hidden_states']", "output": "output[0]"}]


def test_the_page_shows_the_lookups_inside_the_blocks_in_both_languages():
    for data in committed():
        measured = [(n, e) for n, e in data["models"].items() if any(
            s["identity"]["holds"] for st in (e.get("inside") or {}).values() for p in st.get("patterns", [])
            for s in p["streams"])]
        name, entry = measured[0]
        stack = next(st for st in entry["inside"].values() if any(
            s["identity"]["holds"] for p in st.get("patterns", []) for s in p["streams"]))
        stream = next(s for p in stack["patterns"] for s in p["streams"] if s["identity"]["holds"])
        role, place = next((r, p) for r, p in stream["lookups"].items() if r != "input" and p["module"])
        for lang, heading in (("zh", "## 块的内部"), ("en", "## Inside the blocks")):
            page = atlas_pages.site_page(data, lang)
            section = page[page.index(heading):]
            assert f"| `{name}` |" in section and f"**{role}**: `{place['module']}`" in section, (data["zoo"], lang)
            assert '.where(3, "attention")' in section


def test_merging_the_inside_pass_fills_every_built_model_or_says_why(tmp_path):
    """``merge`` puts the pass's fields into a copy of the atlas: a model the pass measured gets its lookups and its
    block calls measured again, one it did not reach says how to measure it, one it rebuilt too large says so."""
    data = next(d for d in committed() if d["zoo"] == "transformers")
    built = [n for n, e in data["models"].items() if e["status"] == "built"]
    measured, missing, too_large = built[:3]
    (tmp_path / "transformers.json").write_text(json.dumps(data), encoding="utf-8")
    pass_file = tmp_path / "transformers.inside.jsonl"
    pass_file.write_text(
        json.dumps({"name": measured, "status": "built", "block_calls": {"x": "marked"}, "inside": {"s": {}}}) + "\n"
        + json.dumps({"name": too_large, "status": "structure only"}) + "\n", encoding="utf-8")
    atlas_pages.merge_inside("transformers", pass_file, tmp_path)
    merged = json.loads((tmp_path / "transformers.json").read_text(encoding="utf-8"))
    models = merged["models"]
    assert models[measured]["block_calls"] == {"x": "marked"} and models[measured]["inside"] == {"s": {}}
    assert models[missing]["inside"] is None and f"--only {missing}" in models[missing]["inside_why"]
    assert models[too_large]["inside"] is None and "structure only" in models[too_large]["inside_why"]
    assert merged["counts"] == atlas_pages.summarize(models) and "inside" in merged["counts"]
    assert all(m.get("inside") is None or m["status"] == "built" for m in models.values())


def test_the_models_measured_before_a_check_existed_are_found():
    """A place that says nothing of a check says nothing when its model was measured before the check existed: the
    atlas records the checks with each model it measures (``inside_checks``), and ``stale`` lists the models that
    lack one (those written before the record: the stacks' ``order`` tells the measurement that said clone)."""
    from tools.atlas import inside

    ordered = {"s": {"order": 0, "patterns": []}}
    data = {"models": {
        "old": {"status": "built", "inside": {"s": {"patterns": []}}},
        "ordered": {"status": "built", "inside": ordered},
        "now": {"status": "built", "inside": ordered, "inside_checks": list(inside.CHECKS)},
        "not run": {"status": "structure only"}, "none inside": {"status": "built", "inside": None}}}
    found = atlas_pages.stale(data)
    assert set(found) == {"old", "ordered"}
    assert "clone" in found["old"] and "clone" not in found["ordered"]
    assert found["ordered"] == [c for c in inside.CHECKS if c not in ("identity", "what each branch computes", "clone",
                                                                       "scalars", "run order")]
    assert "run order" in inside.CHECKS and inside.CHECKS[0] == "identity"


def test_models_measured_again_say_clone_where_a_later_in_place_op_changes_a_place():
    """keypointrcnn_resnet50_fpn (resnet50's backbone), regnet_x_3_2gf and regnet_y_128gf were measured before the
    atlas checked for in-place overwrites: their places said nothing where ``out += identity`` and
    ``ReLU(inplace=True)`` change the tensor a hook got (bn3's output, the sum before the ReLU). Measured again,
    they say clone there (tests/library/test_atlas.py checks the flags on the models rebuilt, with plain hooks),
    and keypointrcnn's blocks count from ``layer1``, the stack the input meets first. A regnet stage's first block
    (a residual block that changes the shape) was once taken whole for the stage's shortcut; its own sum is now in
    the stage's identity, with its two places to clone."""
    from hooklab import course

    def flagged(entry, block: int) -> list[str]:
        places = entry.where(block)
        return [role for role, p in places.items() if p.get("clone")] + \
            [f"{role}.sum" for role, p in places.items() if isinstance(p.get("sum"), dict) and p["sum"].get("clone")]
    models = course.atlas("torchvision")
    expected = {"regnet_x_3_2gf": 8, "regnet_y_128gf": 9, "keypointrcnn_resnet50_fpn": 4}
    found = {name: flagged(models[name], 0) + flagged(models[name], 1) for name in expected}
    assert {name: len(places) for name, places in found.items()} == expected, found
    assert found["keypointrcnn_resnet50_fpn"] == ["branch", "residual_after_branch.sum"] * 2
    assert models["keypointrcnn_resnet50_fpn"].where(0, "input")["module"] == "backbone.body.layer1.0"
    data = json.loads((ATLAS / "torchvision.json").read_text(encoding="utf-8"))
    assert not set(expected) & set(atlas_pages.stale(data))


class _Residual(nn.Module):
    """MobileOne's block: out = branch(y) + identity(y), the identity a BatchNorm of the block's input."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.branch, self.identity = nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.branch(y) + self.identity(y)


def test_a_stage_whose_first_block_changes_the_shape_adds_its_branches_to_a_shortcut_not_to_its_input():
    """timm's mobileone_s0: a stage (a block of the stack) is a strided convolution, then residual blocks; the first
    sum adds to a tensor made from the stage's input, of the output's shape, never to the input itself (the atlas
    said ``block input + branch``: a 112-wide input plus a 56-wide branch, which --all's identity check refused)."""
    from hooklab import find_blocks
    from tools.atlas import inside

    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=1), _Residual(6)),
                          nn.Sequential(nn.Conv2d(6, 6, 3, stride=2, padding=1), _Residual(6))).eval()
    for stage in model:  # a BatchNorm that is not the identity, so the sum's base is not the strided output itself
        stage[1].identity.weight.data.uniform_(0.5, 1.5)
        stage[1].identity.running_mean.uniform_(-0.5, 0.5)
    x = torch.randn(2, 4, 8, 8)
    stack = inside.measure(model, lambda: model(x), find_blocks(model))[""]
    first = stack["patterns"][stack["block_pattern"][0]]["streams"][0]
    assert first["identity"]["holds"], first["identity"]
    found = first["lookups"]
    assert first["identity"]["text"].startswith("block output = shortcut(block input) + "), first["identity"]["text"]
    assert found["branch"]["adds_to"] == "shortcut" and found["shortcut"]["module"] == "1.identity", found
    with torch.no_grad():  # the truth: the stage's output is its identity's output plus the branch, in plain calls
        y = model[0][0](x)
        assert model[0](x).shape != x.shape
        assert torch.allclose(model[0](x), model[0][1].identity(y) + model[0][1].branch(y))


class _Add(nn.Module):
    """EfficientViT's ``ResidualDrop``: x + m(x)."""

    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.m(x)


class _DownStage(nn.Module):
    """timm's EfficientViT (and SHViT) stage: residual sums at the input's shape, a patch merging that makes the
    stream into the output's shape, residual sums at that shape, then the stage's blocks."""

    def __init__(self, a: int = 4, b: int = 6) -> None:
        super().__init__()
        self.downsample = nn.Sequential(OrderedDict(
            res1=_Add(nn.Conv2d(a, a, 3, padding=1, groups=a)),
            merge=nn.Sequential(nn.Conv2d(a, b, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(b, b, 1)),
            res2=_Add(nn.Conv2d(b, b, 3, padding=1, groups=b))))
        self.blocks = nn.Sequential(_Add(nn.Conv2d(b, b, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.downsample(x))


def test_a_stage_that_changes_the_shape_between_its_own_sums_names_the_module_that_does_as_its_shortcut():
    """timm's efficientvit_m0-m4 and shvit_s1: the stage's ``downsample`` makes the input into the output's shape,
    but it holds residual sums itself, so it is no shortcut (the atlas took it for one, and said the stage's
    later branches add to the 14-wide input, which --all's identity check refused with a 7-wide branch). The
    shortcut is the patch merging, which reads the stream after the first sums."""
    from hooklab import find_blocks
    from tools.atlas import inside

    torch.manual_seed(0)
    model = nn.Sequential(_DownStage(), _DownStage(6, 8)).eval()
    x = torch.randn(2, 4, 8, 8)
    stack = inside.measure(model, lambda: model(x), find_blocks(model))[""]
    first = stack["patterns"][stack["block_pattern"][0]]["streams"][0]
    assert first["identity"]["holds"], first["identity"]
    found, text = first["lookups"], first["identity"]["text"]
    assert found["shortcut"]["module"] == "downsample.merge", found
    assert text == "block output = shortcut(block input + branch) + branch_2 + mlp", text
    assert found["branch"]["adds_to"] == "input" and found["branch_2"]["adds_to"] == "shortcut", found
    assert "residual_after_branch" in found["shortcut"]["note"]
    stage = model[0]
    with torch.no_grad():  # the truth, in plain calls: each sum where the lookups say
        s1 = x + stage.downsample.res1.m(x)
        short = stage.downsample.merge(s1)
        s2 = short + stage.downsample.res2.m(short)
        assert torch.allclose(stage(x), s2 + stage.blocks[0].m(s2))
    seen: dict = {}
    handles = [model.get_submodule(f"0.{found[role]['module']}").register_forward_hook(
        lambda m, a, out, role=role: seen.update({role: out})) for role in ("shortcut", "branch", "branch_2")]
    _run_then_remove(model, x, handles)
    assert torch.allclose(seen["shortcut"], short) and torch.allclose(seen["branch_2"], s2 - short)


class _TwoPaths(nn.Module):
    """transformers' ResNet layer that changes the shape: ``act(layer(x) + shortcut(x))``, the main path called
    first and the shortcut (a 1x1 convolution and a norm) second."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__()
        self.layer = nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(), nn.Conv2d(b, b, 3, padding=1))
        self.shortcut = nn.Sequential(nn.Conv2d(a, b, 1), nn.BatchNorm2d(b)) if a != b else nn.Identity()
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        main = self.layer(x)
        return self.act(main + self.shortcut(x))


def test_where_two_paths_from_the_input_meet_the_lighter_one_is_the_shortcut_and_a_residual_layer_is_none():
    """transformers' resnet, regnet and rt_detr_resnet: a stage whose first layer adds its 1x1 shortcut to its
    main path. The atlas took that whole first layer (a residual block itself) for the stage's shortcut and left its
    sum out; where two paths from the input meet in the first sum, the one with fewer weights is the shortcut."""
    from hooklab import find_blocks
    from tools.atlas import inside

    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(_TwoPaths(4, 6), _TwoPaths(6, 6)),
                          nn.Sequential(_TwoPaths(6, 8), _TwoPaths(8, 8))).eval()
    x = torch.randn(2, 4, 8, 8)
    stack = inside.measure(model, lambda: model(x), find_blocks(model))[""]
    first = stack["patterns"][stack["block_pattern"][0]]["streams"][0]
    assert first["identity"]["holds"], first["identity"]
    found, text = first["lookups"], first["identity"]["text"]
    assert text == "block output = 1.act(0.act(shortcut(block input) + branch) + branch_2)", text
    assert found["shortcut"]["module"] == "0.shortcut" and found["branch"]["module"] == "0.layer", found
    assert found["branch_2"]["adds_to"] == "residual_after_branch", found
    stage = model[0]
    with torch.no_grad():  # the truth, in plain calls
        s = stage[0].layer(x) + stage[0].shortcut(x)
        assert torch.allclose(stage(x), stage[1].act(stage[0].act(s) + stage[1].layer(stage[0].act(s))))


class _PooledLayer(nn.Module):
    """Hiera's first layer of a stage: its shortcut is a projection pooled by a view and a max, outside any
    module, so no hook sees the sum's base."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__()
        self.norm, self.proj = nn.LayerNorm(a), nn.Linear(a, b)
        self.attn = nn.Sequential(nn.Linear(a, b), nn.Unflatten(1, (2, -1)))
        self.mlp = nn.Linear(b, b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        pooled = self.proj(h).view(x.shape[0], 2, -1, self.proj.out_features).max(dim=1).values
        s = pooled + self.attn(h).max(dim=1).values
        return s + self.mlp(s)


class _TokenLayer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.attn, self.mlp = nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x + self.attn(x)
        return s + self.mlp(s)


def test_a_stage_whose_first_layer_pools_its_shortcut_outside_any_module_starts_its_identity_from_that_layer():
    """transformers' hiera: no hook sees the sum of the stage's first layer (its base is pooled by a view and a
    max), so the stage's identity starts from that layer's output, and the shortcut's note says the layer is a
    residual block of its own."""
    from hooklab import find_blocks
    from tools.atlas import inside

    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(_PooledLayer(4, 6), _TokenLayer(6)),
                          nn.Sequential(_PooledLayer(6, 8), _TokenLayer(8))).eval()
    x = torch.randn(2, 8, 4)
    stack = inside.measure(model, lambda: model(x), find_blocks(model))[""]
    first = stack["patterns"][stack["block_pattern"][0]]["streams"][0]
    assert first["identity"]["holds"], first["identity"]
    found = first["lookups"]
    assert found["shortcut"]["module"] == "0" and "residual block of its own" in found["shortcut"]["note"], found
    with torch.no_grad():
        s0 = model[0][0](x)
        s1 = s0 + model[0][1].attn(s0)
        assert torch.allclose(model[0](x), s1 + model[0][1].mlp(s1))
