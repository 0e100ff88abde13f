"""The transformers zoo of the atlas: every architecture the installed transformers offers, each built small from its
config class's defaults (every size field set small, recursively in sub-configs: :func:`shrink_config_dict`), with
the inputs its forward takes (its main input alone, then with an image: :func:`_transformers_inputs`). The other zoos and
what they share: :mod:`tools.atlas.zoos`.
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch
from torch import nn

from .zoos import MAX_RUN_PARAMETERS, SEQ, Built, NotBuilt, _structure_only, classify_error, parameter_count

_LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers", "num_encoder_layers",
           "encoder_layers", "decoder_layers", "depth", "num_blocks", "num_encoder_blocks")
_HIDDEN = ("hidden_size", "d_model", "n_embd", "embed_dim", "emb_dim", "dim", "hidden_dim", "encoder_hidden_size",
           "decoder_hidden_size", "text_hidden_size", "projection_dim", "out_hidden_size", "output_hidden_size",
           "embedding_size", "projector_hidden_size", "fusion_hidden_size")
_HEADS = ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
          "n_heads", "decoder_num_attention_heads", "linear_num_value_heads")
_KV_HEADS = ("num_key_value_heads", "linear_num_key_heads")
_HEAD_DIM = ("head_dim", "rotary_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "d_kv", "kv_channels",
             "linear_key_head_dim", "linear_value_head_dim", "index_head_dim")
_INTERMEDIATE = ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff",
                 "moe_intermediate_size", "shared_expert_intermediate_size", "mlp_dim", "decoder_intermediate_size")
_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_PER_TOKEN = ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts", "moe_k")
_SMALL_RANKS = {"kv_lora_rank": 16, "q_lora_rank": 32, "n_group": 1, "topk_group": 1, "n_shared_experts": 1,
                "num_shared_experts": 1, "first_k_dense_replace": 1, "index_n_heads": 2, "index_topk": 4}


def _shrink_value(key: str, value: Any, level: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    if key in _LAYERS:
        return min(value, 2) if value > 0 else value
    if level == "layers":
        return value
    if key in _HIDDEN:
        return min(value, 64) if value > 0 and level == "small" else value
    if key in _HEADS:
        return min(value, 4) if value > 0 else value
    if key in _KV_HEADS:
        return 1 if value == 1 else min(value, 2)
    if key in _HEAD_DIM:
        return min(value, 16) if value > 0 and level == "small" else value
    if key in _INTERMEDIATE:
        return min(value, 128) if value > 0 else value
    if key in _EXPERTS:
        return min(value, 4) if value > 0 else value
    if key in _PER_TOKEN:
        return min(value, 2) if value > 0 else value
    if key in _SMALL_RANKS:
        return min(value, _SMALL_RANKS[key]) if value > 0 else value
    return value


def shrink_config_dict(d: dict[str, Any], level: str = "small") -> dict[str, Any]:
    """A config's ``to_dict()`` with its sizes made small (recursively in sub-configs); see the module docstring.
    ``level``: ``small`` (everything), ``heads`` (the head size kept: hidden size = heads x head size), ``layers``
    (only the numbers of layers)."""
    out = dict(d)
    stages = len(d["depths"]) if isinstance(d.get("depths"), (list, tuple)) else None
    layer_keys = [k for k in _LAYERS if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)
                  and d.get(k) != stages]  # a count of stages (Swin's num_layers = len(depths)) stays
    layers_key = layer_keys[0] if layer_keys else None
    old_layers = d[layers_key] if layers_key else None
    layer_types = d.get("layer_types")
    new_layers = None
    if layers_key:
        new_layers = _shrink_value(layers_key, old_layers, level)
        if isinstance(layer_types, (list, tuple)) and layer_types:
            # keep a prefix that has every kind of layer (a hybrid model keeps its attention and its mamba layers)
            kinds, prefix = set(layer_types), 0
            while len(set(layer_types[:prefix])) < len(kinds):
                prefix += 1
            new_layers = max(new_layers, min(prefix, 8))
    for key, value in d.items():
        if isinstance(value, dict) and ("model_type" in value or str(key).endswith("config")):
            out[key] = shrink_config_dict(value, level)
        elif key == layers_key and new_layers is not None:
            out[key] = new_layers
        elif key in _LAYERS and key not in layer_keys:
            continue
        else:
            out[key] = _shrink_value(key, value, level)
    if old_layers and new_layers is not None and new_layers < old_layers:
        if stages is None:  # backbone outputs named after the layers: the config derives them again
            for key in ("out_features", "out_indices", "stage_names"):
                out.pop(key, None)
        for key in ("num_kv_shared_layers",):  # layers that reuse another layer's cache: none left to share
            if isinstance(d.get(key), int):
                out[key] = 0
        for key, value in d.items():  # settings per layer index
            if isinstance(value, dict) and value and all(str(k).isdigit() for k in value):
                out[key] = {k: v for k, v in value.items() if int(k) < new_layers}
        for key, value in d.items():
            if isinstance(value, (list, tuple)) and len(value) == old_layers and key not in ("depths",):
                out[key] = list(value[:new_layers])
        for key in ("mlp_only_layers", "global_attn_indexes", "deepstack_visual_indexes", "full_attention_layers"):
            if isinstance(d.get(key), (list, tuple)) and all(isinstance(i, int) for i in d[key]):
                out[key] = [i for i in d[key] if i < new_layers] or ([] if not d[key] else [new_layers - 1])
    heads_key = next((k for k in _HEADS if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)), None)
    hidden_key = next((k for k in _HIDDEN if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)), None)
    if level == "heads" and heads_key and hidden_key and d[heads_key] and d[hidden_key] % d[heads_key] == 0:
        head = d["head_dim"] if isinstance(d.get("head_dim"), int) else d[hidden_key] // d[heads_key]
        out[heads_key] = min(d[heads_key], 2)
        for key in _KV_HEADS:
            if isinstance(d.get(key), int):
                out[key] = out[heads_key] if d[key] == d[heads_key] else 1
        out[hidden_key] = min(d[hidden_key], out[heads_key] * head)
    for key in _KV_HEADS:  # multi-head latent attention and the like: as many key/value heads as heads
        if heads_key and isinstance(d.get(key), int) and d[key] == d[heads_key]:
            out[key] = out[heads_key]
    if any(isinstance(d.get(k), (list, tuple)) for k in _HEADS):  # heads per stage: widths stay divisible by them
        for key in _HIDDEN:
            if key in d:
                out[key] = d[key]
    for key, value in d.items():  # a layer pattern (every 8th layer, from the 4th): keep one of each
        if isinstance(key, str) and key.endswith("_offset") and isinstance(value, int) and \
                isinstance(d.get(key[:-len("_offset")] + "_period"), int) and new_layers is not None \
                and layers_key and value + 1 > out[layers_key] and value + 1 <= 8:
            out[layers_key] = value + 1
            new_layers = value + 1
    _fit_rope_sections(out)
    if isinstance(d.get("depths"), (list, tuple)):
        out["depths"] = [min(x, 2) for x in d["depths"]]
    if isinstance(d.get("image_size"), int) and not isinstance(d.get("image_size"), bool) and level != "layers" \
            and "window_size" not in d and "depths" not in d:
        patch = d.get("patch_size") if isinstance(d.get("patch_size"), int) else 16
        merge = d.get("spatial_merge_size") if isinstance(d.get("spatial_merge_size"), int) else 1
        out["image_size"] = min(d["image_size"], max(patch * 4 * merge, 32))
    return out


def _fit_rope_sections(d: dict[str, Any]) -> None:
    """Multimodal rotary sections (``mrope_section``) sum to half the head size: scale them to the new one."""
    hidden = next((d[k] for k in _HIDDEN if isinstance(d.get(k), int)), None)
    heads = next((d[k] for k in _HEADS if isinstance(d.get(k), int)), None)
    head_dim = d.get("head_dim") if isinstance(d.get("head_dim"), int) else (hidden // heads if hidden and heads
                                                                             else None)
    for key in ("rope_scaling", "rope_parameters"):
        params = d.get(key)
        if isinstance(params, dict) and isinstance(params.get("mrope_section"), list) and head_dim:
            sections = params["mrope_section"]
            total, want = sum(sections), head_dim // 2
            new = [max(1, s * want // total) for s in sections]
            new[0] += want - sum(new)
            d[key] = {**params, "mrope_section": new}


def _transformers_classes(model_type: str) -> list[str]:
    from transformers.models.auto import modeling_auto as ma
    order = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
             "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
             "MODEL_MAPPING_NAMES")
    found = []
    for mapping in order:
        name = getattr(ma, mapping, {}).get(model_type)
        if isinstance(name, (tuple, list)):
            name = name[0]
        if name and name not in found:
            found.append(name)
    if not found:
        for mapping in sorted(n for n in dir(ma) if n.endswith("_MAPPING_NAMES") and n != "CONFIG_MAPPING_NAMES"):
            name = getattr(ma, mapping).get(model_type)
            if isinstance(name, (tuple, list)):
                name = name[0]
            if isinstance(name, str) and name not in found:
                found.append(name)
    return found


def _token_ids(d: dict[str, Any], out: set[int]) -> set[int]:
    for key, value in d.items():
        if isinstance(value, dict):
            _token_ids(value, out)
        elif isinstance(key, str) and (key.endswith("_id") or key.endswith("_index") or key.endswith("_ids")) and "token" in key:
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(v, int):
                    out.add(v)
    return out


def _first(d: dict[str, Any], keys: tuple[str, ...], default: Any = None) -> Any:
    for key in keys:
        if key in d and d[key] is not None:
            return d[key]
    for value in d.values():
        if isinstance(value, dict) and ("model_type" in value):
            found = _first(value, keys, None)
            if found is not None:
                return found
    return default


def _pixels(d: dict[str, Any], g: torch.Generator) -> torch.Tensor:
    size = _first(d, ("image_size",), 64)
    size = size[0] if isinstance(size, (list, tuple)) else size
    if isinstance(size, dict):
        size = size.get("height", 64)
    channels = _first(d, ("num_channels", "in_channels"), 3)
    return torch.randn(1, int(channels), int(size), int(size), generator=g)


def _transformers_inputs(model: nn.Module, config: Any) -> list[dict[str, Any]]:
    """The inputs to try, in order: the model's main input alone (text only for a vision-language model), then with
    an image as well (a dual encoder such as CLIP needs both)."""
    d = config.to_dict()
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    g = torch.Generator().manual_seed(0)
    inputs: dict[str, Any] = {}
    vocab = _first(d, ("vocab_size",), 100) or 100
    special = _token_ids(d, set())
    low, high = 3, max(4, min(int(vocab), 200))
    pool = [i for i in range(low, high) if i not in special] or [0]
    if main == "input_ids" or "input_ids" in params:
        idx = torch.randint(0, len(pool), (1, SEQ), generator=g)
        inputs["input_ids"] = torch.tensor(pool)[idx]
    if main == "pixel_values" or (main != "input_ids" and "pixel_values" in params and not inputs):
        inputs["pixel_values"] = _pixels(d, g)
    if main == "input_features":
        bins = _first(d, ("num_mel_bins", "feature_size", "input_feat_per_channel"), 80)
        frames = 2 * int(_first(d, ("max_source_positions",), 32)) if "max_source_positions" in str(d) else 64
        inputs["input_features"] = torch.randn(1, int(bins), frames, generator=g)
    if main == "input_values":
        inputs["input_values"] = torch.randn(1, 4000, generator=g)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params and "input_ids" in inputs:
        inputs["decoder_input_ids"] = inputs["input_ids"][:, :4].clone()
    elif getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        inputs["decoder_input_ids"] = torch.tensor([[pool[0]] * 4])
    if not inputs:
        raise NotBuilt("its inputs are not generic (it needs inputs of its own)", f"main_input_name={main!r}")
    candidates = [inputs]
    if "pixel_values" in params and "pixel_values" not in inputs:
        candidates.append({**inputs, "pixel_values": _pixels(d, g)})
    return candidates
_RECIPES = {"small": "defaults, made small", "heads": "defaults, made small, head size kept",
            "layers": "defaults, only the layers made fewer"}


class Transformers:
    """Every model type of transformers' AutoConfig, built from its config class's defaults, made small."""

    zoo = "transformers"

    def names(self) -> list[str]:
        from transformers.models.auto import configuration_auto as ca
        return sorted(ca.CONFIG_MAPPING_NAMES)

    def build(self, model_type: str) -> Built:
        """The first recipe (:data:`_RECIPES`) whose model builds and runs its forward; the first model class of
        :func:`_transformers_classes` that builds."""
        import transformers
        from transformers.models.auto import configuration_auto as ca

        config_cls = getattr(transformers, ca.CONFIG_MAPPING_NAMES[model_type], None)
        if config_cls is None:
            raise NotBuilt("no config class in transformers' namespace", ca.CONFIG_MAPPING_NAMES[model_type])
        classes = _transformers_classes(model_type)
        if not classes:
            raise NotBuilt("no model class (a config only: a sub-model's, a tokenizer's or a processor's)",
                           model_type)
        try:
            default = config_cls()
        except Exception as exc:  # noqa: BLE001 - a config that does not build from its defaults
            raise NotBuilt("its config does not build from its defaults", f"{type(exc).__name__}: {exc}") from None
        failures: list[tuple[str, BaseException]] = []
        for level, recipe in _RECIPES.items():
            try:
                config = config_cls.from_dict(shrink_config_dict(default.to_dict(), level))
            except Exception as exc:  # noqa: BLE001
                failures.append((f"{level} config", exc))
                continue
            for name in classes:
                cls = getattr(transformers, name, None)
                if cls is None:
                    continue
                try:
                    built = self._build(cls, config, recipe)
                except Exception as exc:  # noqa: BLE001 - the next class, then the next recipe
                    failures.append((f"{level} {name}", exc))
                    continue
                built.info["failed_recipes"] = [f"{what}: {type(e).__name__}" for what, e in failures]
                return built
        if not failures:
            raise NotBuilt("no model class in transformers' namespace", ", ".join(classes))
        what, last = next(((w, e) for w, e in failures if not (isinstance(e, NotBuilt) and e.reason.startswith(
            "too large"))), failures[0])  # the first recipe's own failure, unless all were too large
        reason = last.reason if isinstance(last, NotBuilt) else classify_error(last)
        if all(" config" in w for w, _ in failures):
            reason = "its config does not build when made small"
        detail = " | ".join(f"{w}: {type(e).__name__}: {str(e)[:120]}" for w, e in failures[-3:])
        for level, recipe in _RECIPES.items():  # not run: its structure, built on the meta device, where it builds
            try:
                config = config_cls.from_dict(shrink_config_dict(default.to_dict(), level))
            except Exception:  # noqa: BLE001
                continue
            for name in classes:
                cls = getattr(transformers, name, None)
                try:
                    return _structure_only(model_type, "transformers", None, lambda cls=cls, config=config: cls(config),
                                           why=f"{reason}: {detail[:200]}", recipe=recipe)
                except Exception:  # noqa: BLE001 - the next class
                    continue
        raise NotBuilt(reason, detail)

    def _build(self, cls: type, config: Any, recipe: str) -> Built:
        with contextlib.suppress(Exception):
            config._attn_implementation = "eager"
        with torch.device("meta"):
            probe = cls(config)
        size = parameter_count(probe)
        del probe
        if size > 4 * MAX_RUN_PARAMETERS:
            raise NotBuilt("too large after making it small", f"{cls.__name__}: {size:,} parameters")
        torch.manual_seed(0)
        model = cls(config).eval()
        tried: Exception | None = None
        for inputs in _transformers_inputs(model, config):
            try:
                with torch.no_grad():
                    model(**inputs)  # a recipe counts only when its forward runs
                break
            except Exception as exc:  # noqa: BLE001 - the next inputs, then the next recipe
                tried = tried or exc
        else:
            assert tried is not None
            raise tried
        note = ", ".join(f"{k} {tuple(v.shape)}" for k, v in inputs.items())

        def run() -> Any:
            with torch.no_grad():
                return model(**inputs)

        model_cls = cls.__name__
        generate = None
        if callable(getattr(model, "generate", None)) and ("ForCausalLM" in model_cls or
                                                           "ForConditionalGeneration" in model_cls):
            gen_inputs = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
            gen_config = getattr(model, "generation_config", None)
            if getattr(config, "is_encoder_decoder", False) and gen_config is not None and \
                    getattr(gen_config, "decoder_start_token_id", None) is None and \
                    getattr(gen_config, "bos_token_id", None) is None:
                # a config made from defaults has no start token for the decoder (T5 starts with its pad token)
                gen_inputs["decoder_start_token_id"] = getattr(gen_config, "pad_token_id", None) or 0

            def generate() -> Any:
                with torch.no_grad():
                    return model.generate(**gen_inputs, max_new_tokens=3, min_new_tokens=3, do_sample=False,
                                          num_beams=1)

        def train_step() -> Any:
            from .probe import main_tensor
            model.train()
            try:
                try:
                    out = model(**inputs, use_cache=False)
                except TypeError:
                    out = model(**inputs)
                value = getattr(out, "logits", None)
                value = value if isinstance(value, torch.Tensor) else main_tensor(out)
                if value is None or not value.requires_grad:
                    return None
                value.float().square().mean().backward()
                return out
            finally:
                model.eval()

        return Built(model, inputs, model_cls, recipe, run, generate, train_step, note,
                     info={"config": type(config).__name__, "parameters": parameter_count(model)})
