"""The hook doctor as a property over the atlas (hooklab/course/assets/atlas/<zoo>.json): for every module whose hooks never fire in an
architecture's forward, ``explain_hook`` gives the cause that an independent truth gives, never crashes and never gives
another; and ``find_blocks`` finds the stacks the atlas recorded.

The truth is ``tools/atlas/probe.py``'s, which watches without hooklab: a counting wrapper on each class's ``forward``
(was it entered?), the modules called (a global pre-hook), a ``TorchDispatchMode`` (whose parameters did the ops read,
which fast-path op read them), and the same step in training mode. ``explain_hook`` sees none of that: it watches the
step with a profile function (module calls, forward code, parameter reads through ``Module.__getattr__``).

Each run of ``./course test`` checks a fixed sample of architectures, chosen to cover every cause the atlas records;
``HOOKLAB_ATLAS_ALL=1`` checks every architecture that the atlas built and ran (the weekly workflow
.github/workflows/atlas.yml runs that, in four parts: ``HOOKLAB_ATLAS_SHARD=i/4`` takes every fourth model from the
i-th). Each architecture is rebuilt exactly as the atlas built it
(``tools/atlas/zoos.py``) and its never-firing modules are measured again: they must still be the atlas's (else
regenerate it: ``python -m tools.atlas run --zoo Z --fresh --only NAME; python -m tools.atlas write --zoo Z``).
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from hooklab import explain_hook, find_blocks

ROOT = Path(__file__).resolve().parents[2]
ATLAS = ROOT / "hooklab" / "course" / "assets" / "atlas"
ALL = os.environ.get("HOOKLAB_ATLAS_ALL") == "1"
SHARD = os.environ.get("HOOKLAB_ATLAS_SHARD", "0/1")
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
    part, parts = (int(x) for x in SHARD.split("/"))
    return found[part::parts]


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
