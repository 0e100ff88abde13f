"""course.profile finds a library under the names users type (its import name, its API's classes and functions, its
aliases, any case: issue 65) and reads it in the learner's language (issue 67)."""
from __future__ import annotations

import sys

import pytest

from hooklab import course

profiles_module = sys.modules["hooklab.course.profiles"]

pytestmark = pytest.mark.course

TYPED = {  # what a user types -> the profile it names (each checked against the profile's own data below)
    "pytorch_lightning": "lightning", "lightning": "lightning", "PyTorch-Lightning": "lightning",
    "TransformerLens": "transformer_lens", "transformer_lens": "transformer_lens", "pyg": "torch_geometric",
    "torch_geometric": "torch_geometric", "fully_shard": "fsdp2", "FSDP2": "fsdp2", "fsdp1": "fsdp1",
    "FullyShardedDataParallel": "fsdp1", "AveragedModel": "swa_utils", "swa_utils": "swa_utils",
    "torch.optim.swa_utils": "swa_utils", "cpu_offload": "accelerate", "dispatch_model": "accelerate",
    "ACCELERATE": "accelerate", "bnb": "bitsandbytes", "Linear8bitLt": "bitsandbytes",
    "torch.ao.quantization": "torch_ao_quantization", "get_peft_model": "peft", "LoraConfig": "peft",
    "GradSampleModule": "opacus", "DistributedDataParallel": "ddp", "fully_shard()": "fsdp2", "thop": "thop",
}


@pytest.mark.parametrize(("typed", "slug"), sorted(TYPED.items()))
def test_a_library_is_found_under_the_names_users_type(typed, slug):
    record = course.profile(typed)
    assert record["slug"] == slug
    own = " ".join([slug, record["name"], record["title"], record["entry"], *record["names"]]).casefold()
    plain = typed.removesuffix("()").casefold()
    # the name comes from the profile's own data (any case, - and _ alike), or from the short list of aliases
    assert (plain in own or plain.replace("-", "_") in own.replace("-", "_")
            or plain.replace("_", "") in own.replace("-", "").replace("_", "").replace(" ", "")
            or profiles_module.ALIASES.get(plain) == slug), typed


def test_a_name_two_profiles_share_names_both():
    with pytest.raises(LookupError, match=r"'FSDP' names 2 profiles: course.profile\('fsdp1'\).*'fsdp2'"):
        course.profile("FSDP")


@pytest.mark.parametrize("word", ["Trainer", "model", "summary"])
def test_a_plain_word_of_an_api_names_no_library(word):
    with pytest.raises(LookupError, match="no profile of"):
        course.profile(word)


def test_a_typo_gets_the_close_names_and_bad_input_a_clear_error():
    with pytest.raises(LookupError, match="did you mean 'accelerate'"):
        course.profile("acclerate")
    with pytest.raises(TypeError, match="a str, got int"):
        course.profile(5)
    with pytest.raises(ValueError, match="lang is one of"):
        course.profile("accelerate", lang="fr")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_profile_reads_in_the_learners_language_only(lang, monkeypatch):
    monkeypatch.setenv("HOOKLAB_LANG", "both")  # lang= wins over the course's setting
    text = str(course.profile("accelerate", lang=lang))
    has_chinese = any("\u4e00" <= c <= "\u9fff" for c in text)
    assert has_chinese == (lang == "zh") and "—— 中文 ——" not in text
    if lang == "en":
        summary = course.profile("accelerate")["words"]["zh"]["summary"]
        assert summary not in text


@pytest.mark.parametrize(("setting", "blocks"), [("en", 0), ("zh", 0), ("both", 2)])
def test_without_lang_a_profile_follows_the_courses_setting(setting, blocks, monkeypatch):
    monkeypatch.setenv("HOOKLAB_LANG", setting)
    text = str(course.profile("accelerate"))
    assert text.count("—— ") == blocks
    record = course.profile("accelerate")
    if setting != "both":
        assert record["words"][setting]["summary"] in text
