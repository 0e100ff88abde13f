"""The hook atlas's tools: the committed atlas files (hooklab/course/assets/atlas/), the site pages made from them, the difference
between two atlases (what ``./course rerun --with transformers==X`` reports), and the generator's own rules. No model
is built here (tests/library/test_atlas.py rebuilds a sample and checks the doctor against it)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

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


def test_the_weekly_workflow_checks_every_model_in_four_parts():
    import yaml
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "atlas.yml").read_text(encoding="utf-8"))
    on = workflow.get("on", workflow.get(True))
    assert set(on) == {"schedule", "workflow_dispatch"} and workflow["permissions"] == {"contents": "read"}
    (job,) = workflow["jobs"].values()
    assert 0 < job["timeout-minutes"] <= 180
    shards = job["strategy"]["matrix"]["shard"]
    (step,) = [s for s in job["steps"] if s.get("run", "").startswith("./course test")]
    assert step["run"] == "./course test tests/library/test_atlas.py"
    assert step["env"]["HOOKLAB_ATLAS_ALL"] == "1"
    assert step["env"]["HOOKLAB_ATLAS_SHARD"] == "${{ matrix.shard }}/" + str(len(shards))
    assert shards == list(range(len(shards)))
