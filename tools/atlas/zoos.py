"""The four zoos of the atlas: what each one lists, and how one of its models is built small on a CPU, without weights.

Each zoo has ``names()`` (every architecture or model it offers) and ``build(name)``, which returns a :class:`Built`
(the model in eval mode, the inputs, the step, the class and what was changed to make it small) or raises
:class:`NotBuilt` with a reason class (the atlas counts models by it). Nothing is downloaded: ``HF_HUB_OFFLINE=1``,
``weights=None``, ``pretrained=False``; every draw is seeded.

How a model is made small, generically (no per-architecture recipe):

- transformers: each config class's defaults, with every size field the config has set small (layers 2, hidden size
  64, 4 heads and 2 key/value heads, head size 16, intermediate sizes 128, experts 4 with 2 per token, image size 4
  patches, depths at most 2 per stage; per-layer lists cut to the layers kept), recursively in sub-configs;
  the vocabulary is kept (special token ids must stay inside it), and so is every other field;
- diffusers: each model class's ``__init__`` defaults, with channel lists, layer counts and head sizes set small;
- timm: ``timm.create_model(name, pretrained=False)`` as it is (the structure of every model), run only where it
  has at most :data:`MAX_RUN_TIMM` parameters;
- torchvision: ``torchvision.models.get_model(name, weights=None)`` as it is, same limit.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MAX_RUN_PARAMETERS = 40_000_000   # a model bigger than this is described from its structure only (2 shared cores)
MAX_RUN_TIMM = 10_000_000         # timm: about 1,400 models at full size; the small ones run (every family has some)
SEQ = 8                           # tokens of a text input


class NotBuilt(Exception):
    """A model that could not be built (or run); ``reason`` is its class for the atlas's counts."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail[:300]


@dataclass
class Built:
    """A model built small, in eval mode, and the step that runs it."""

    model: nn.Module
    inputs: dict[str, Any]
    cls: str
    recipe: str
    run: Callable[[], Any]
    generate: Callable[[], Any] | None = None        # a few new tokens, where the model generates
    train_step: Callable[[], Any] | None = None      # forward + backward in training mode (checkpointing)
    input_note: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    runnable: bool = True                            # False: structure only (too large to run here)
    output_capture: bool = True                      # transformers' output_hidden_states / output_attentions


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Libraries' warnings, loggers and prints are not the atlas's business."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        levels = {}
        for name in ("transformers", "diffusers", "timm", "torch.utils._pytree", "torchao"):
            logger = logging.getLogger(name)
            levels[name] = logger.level
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


def classify_error(exc: BaseException) -> str:
    """The reason class of a failure to build or run, from the exception."""
    text = f"{type(exc).__name__}: {exc}"
    low = text.lower()
    if "required positional argument" in low or "you have to specify" in low or "must be provided" in low \
            or "_forward_unimplemented" in low or "all labels must be provided" in low:
        return "its inputs are not generic (it needs inputs of its own)"
    if isinstance(exc, (ImportError, ModuleNotFoundError)) or "requires the" in low or "pip install" in low \
            or "is not installed" in low or "requires `" in low:
        return "needs a package that is not installed"
    if "offline" in low or "huggingface.co" in low or "hub" in low and isinstance(exc, OSError) \
            or "connect" in low or "download" in low:
        return "needs a download (weights, a tokenizer, a backbone)"
    if "cuda" in low or "gpu" in low or "flash" in low or "triton" in low:
        return "needs a GPU or a GPU-only kernel"
    if isinstance(exc, NotImplementedError):
        return "not implemented (on a CPU, or for this input)"
    if isinstance(exc, MemoryError) or "out of memory" in low:
        return "too large"
    if isinstance(exc, (ValueError, AssertionError, TypeError, KeyError, AttributeError, IndexError)):
        return "its config does not build when made small" if "config" in low \
            else f"fails to build or run ({type(exc).__name__})"
    return f"fails to build or run ({type(exc).__name__})"


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# =============================================================================================== transformers
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


# =============================================================================================== torchvision, timm
MAX_BUILD_PARAMETERS = 120_000_000  # bigger ones are described from a build on the meta device only


def _images(shape: tuple[int, ...], batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, *shape, generator=torch.Generator().manual_seed(0))


def _built_vision(model: nn.Module, name: str, candidates: list[Callable[[], tuple[tuple, str]]],
                  recipe: str, zoo: str) -> Built:
    """The first input that runs (a batch of 2: BatchNorm in training mode needs more than one value)."""
    model.eval()
    failure: Exception | None = None
    chosen: tuple[tuple, str] | None = None
    for make in candidates:  # the first input that runs in eval and in training mode, else the first in eval
        args, note = make()
        try:
            with torch.no_grad():
                model(*args)
        except Exception as exc:  # noqa: BLE001 - the next input size
            failure = failure or exc
            continue
        chosen = chosen or (args, note)
        try:
            model.train()
            with torch.no_grad():
                model(*args)
        except Exception:  # noqa: BLE001 - training needs another input (or targets)
            continue
        finally:
            model.eval()
        chosen = (args, note)
        break
    if chosen is not None:
        args, note = chosen

        def run(args: tuple = args) -> Any:
            with torch.no_grad():
                return model(*args)

        return Built(model, {}, type(model).__name__, recipe, run, None, None, note,
                     info={"parameters": parameter_count(model), "zoo": zoo}, output_capture=False)
    assert failure is not None
    raise failure


class Torchvision:
    """Every model of ``torchvision.models.list_models()``, built with ``weights=None``."""

    zoo = "torchvision"

    def names(self) -> list[str]:
        import torchvision
        return sorted(torchvision.models.list_models())

    def build(self, name: str) -> Built:
        import torchvision
        from torchvision import models

        kind = next((k for k in ("detection", "segmentation", "video", "optical_flow", "quantization")
                     if name in models.list_models(module=getattr(models, k))), "classification")
        options: dict[str, Any] = {"weights": None}
        if kind in ("detection", "segmentation"):
            options["weights_backbone"] = None  # else the backbone's ImageNet weights are downloaded
        if kind == "detection" and "ssd" not in name:
            options.update(min_size=128, max_size=160)  # the detectors resize every image to 800 pixels otherwise

        def make() -> nn.Module:
            return models.get_model(name, **options)
        try:
            with torch.device("meta"):
                probe = make()
            size = parameter_count(probe)
            del probe
        except Exception:  # noqa: BLE001 - a builder that computes with tensors (regnet): measure a real build
            size = 0
        if size > MAX_BUILD_PARAMETERS:
            return _structure_only(name, "torchvision", size, make)
        torch.manual_seed(0)
        model = make()
        if kind == "detection":
            candidates = [lambda: ((list(_images((3, 128, 128), 1)),), "a list of 1 image (3, 128, 128)")]
        elif kind == "video":
            candidates = [lambda: ((_images((3, 4, 64, 64)),), "videos (2, 3, 4, 64, 64)"),
                          lambda: ((_images((3, 16, 224, 224), 1),), "a video (1, 3, 16, 224, 224)")]
        elif kind == "optical_flow":
            candidates = [lambda: ((_images((3, 128, 128)), _images((3, 128, 128))), "two image batches (2, 3, 128, "
                                   "128)")]
        else:
            candidates = [lambda: ((_images((3, 64, 64)),), "images (2, 3, 64, 64)"),
                          lambda: ((_images((3, 224, 224)),), "images (2, 3, 224, 224)"),
                          lambda: ((_images((3, 299, 299)),), "images (2, 3, 299, 299)")]
        del torchvision
        built = _built_vision(model, name, candidates, f"get_model({name!r}, " + ", ".join(
            f"{k}={v!r}" for k, v in options.items()) + ")", "torchvision")
        built.info["kind"] = kind
        return built


def _structure_only(name: str, zoo: str, size: int | None, make: Callable[[], nn.Module], *,
                    why: str | None = None, recipe: str = "") -> Built:
    """A model built on the meta device: its structure (the block stacks) without a run. ``why``: the reason it was
    not run (default: too large to run here)."""
    with torch.device("meta"):
        model = make()
    size = parameter_count(model) if size is None else size
    why = why or f"too large to run here ({size:,} parameters)"

    def refuse() -> Any:
        raise NotBuilt("not run", why)
    return Built(model, {}, type(model).__name__, (recipe + ", " if recipe else "") + "built on the meta device "
                 "(structure only)", refuse, info={"parameters": size, "zoo": zoo, "not_run": why}, runnable=False,
                 output_capture=False)


class Timm:
    """Every model name of ``timm.list_models()``, built with ``pretrained=False`` as timm defines it; run at its
    default input size where it has at most :data:`MAX_RUN_TIMM` parameters (structure only above)."""

    zoo = "timm"

    def names(self) -> list[str]:
        import timm
        return sorted(timm.list_models())

    def build(self, name: str) -> Built:
        import timm

        try:
            with torch.device("meta"):
                probe = timm.create_model(name, pretrained=False)
        except Exception:  # noqa: BLE001 - a model that computes with tensors while it is built: a real build
            probe = timm.create_model(name, pretrained=False)
        size = parameter_count(probe)
        shape = tuple(probe.pretrained_cfg.get("input_size", (3, 224, 224)))
        del probe
        if size > MAX_RUN_TIMM:
            built = _structure_only(name, "timm", size, lambda: timm.create_model(name, pretrained=False))
        else:
            torch.manual_seed(0)
            model = timm.create_model(name, pretrained=False)
            candidates = [lambda: ((_images(shape),), f"images (2, {', '.join(map(str, shape))})")]
            built = _built_vision(model, name, candidates, f"timm.create_model({name!r}, pretrained=False)", "timm")
        built.info["family"] = timm.models.get_pretrained_cfg_value(name, "architecture") if hasattr(
            timm.models, "get_pretrained_cfg_value") else name.split(".")[0]
        return built


# =============================================================================================== diffusers
def _shrink_diffusers(defaults: dict[str, Any]) -> dict[str, Any]:
    """Small values for a diffusers model's ``__init__`` arguments (the module docstring's rules)."""
    out: dict[str, Any] = {}
    for key, value in defaults.items():
        if isinstance(value, bool) or value is None:
            continue
        if key in ("block_out_channels", "decoder_block_out_channels", "encoder_block_out_channels") and \
                isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            out[key] = tuple(32 * (i + 1) for i in range(len(value)))
        elif key in ("layers_per_block", "num_layers", "num_single_layers", "transformer_layers_per_block",
                     "num_refiner_layers", "num_layers_per_block", "depth") and isinstance(value, int):
            out[key] = min(value, 1 if "per_block" in key else 2)
        elif key in ("attention_head_dim",) and isinstance(value, int):
            out[key] = min(value, 8)
        elif key in ("num_attention_heads", "num_heads") and isinstance(value, int):
            out[key] = min(value, 2)
        elif key in ("cross_attention_dim", "joint_attention_dim", "caption_projection_dim", "pooled_projection_dim",
                     "text_embed_dim", "caption_channels", "encoder_hid_dim") and isinstance(value, int):
            out[key] = min(value, 32)
        elif key == "sample_size" and isinstance(value, int):
            out[key] = min(value, 16)
        elif key == "norm_num_groups" and isinstance(value, int):
            out[key] = min(value, 8)
    heads = out.get("num_attention_heads", defaults.get("num_attention_heads"))
    head_dim = out.get("attention_head_dim", defaults.get("attention_head_dim"))
    if isinstance(heads, int) and isinstance(head_dim, int) and "caption_projection_dim" in out:
        out["caption_projection_dim"] = heads * head_dim  # SD3: the caption projection is the inner width
    return out


def _diffusers_inputs(model: nn.Module) -> list[tuple[dict[str, Any], str]]:
    """Candidate inputs from the forward's parameter names and the config (4-D latents first, then tokens)."""
    config = dict(getattr(model, "config", {}) or {})
    params = inspect.signature(model.forward).parameters
    g = torch.Generator().manual_seed(0)
    channels = int(config.get("in_channels") or config.get("latent_channels") or 4)
    size = int(config.get("sample_size") or 16) if isinstance(config.get("sample_size"), int) else 16
    cross = config.get("cross_attention_dim") or config.get("joint_attention_dim") or 32
    cross = int(cross[0] if isinstance(cross, (list, tuple)) else cross)
    common: dict[str, Any] = {}
    if "timestep" in params:
        common["timestep"] = torch.tensor([10])
    if "encoder_hidden_states" in params:
        common["encoder_hidden_states"] = torch.randn(1, 8, cross, generator=g)
    if "pooled_projections" in params and config.get("pooled_projection_dim"):
        common["pooled_projections"] = torch.randn(1, int(config["pooled_projection_dim"]), generator=g)
    if "class_labels" in params and getattr(model, "class_embedding", True) is not None:  # not where none is built
        common["class_labels"] = torch.tensor([1])
    for ids, n in (("img_ids", 16), ("txt_ids", 8)):
        if ids in params:
            common[ids] = torch.zeros(n, 3)
    if "guidance" in params and config.get("guidance_embeds"):
        common["guidance"] = torch.tensor([1.0])
    main = "sample" if "sample" in params else "hidden_states" if "hidden_states" in params else \
        "x" if "x" in params else None
    if main is None:
        raise NotBuilt("its inputs are not generic (it needs inputs of its own)", type(model).__name__)
    return [({**common, main: torch.randn(1, channels, size, size, generator=g)},
             f"{main} (1, {channels}, {size}, {size})"),
            ({**common, main: torch.randn(1, channels, 4, size, size, generator=g)},
             f"{main} (1, {channels}, 4, {size}, {size})"),
            ({**common, main: torch.randn(1, 16, channels, generator=g)}, f"{main} (1, 16, {channels})")]


class Diffusers:
    """Every model class of diffusers (``ModelMixin`` subclasses), built from its ``__init__`` defaults made small."""

    zoo = "diffusers"

    def names(self) -> list[str]:
        import diffusers
        found = []
        for name in dir(diffusers):
            if name.startswith("_"):
                continue
            try:
                obj = getattr(diffusers, name)
            except Exception:  # noqa: BLE001 - a class whose optional dependency is missing
                continue
            if inspect.isclass(obj) and issubclass(obj, diffusers.ModelMixin) and obj is not diffusers.ModelMixin:
                found.append(name)
        return sorted(found)

    def build(self, name: str) -> Built:
        import diffusers
        cls = getattr(diffusers, name)
        defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
                    if p.default is not inspect.Parameter.empty}
        failures: list[tuple[str, BaseException]] = []
        for recipe, kwargs in (("__init__ defaults, made small", _shrink_diffusers(defaults)),
                               ("__init__ defaults", {})):
            try:
                with torch.device("meta"):
                    probe = cls(**kwargs)
                size = parameter_count(probe)
                del probe
                if size > MAX_BUILD_PARAMETERS:
                    raise NotBuilt("too large after making it small", f"{size:,} parameters")
                torch.manual_seed(0)
                model = cls(**kwargs).eval()
                for inputs, note in _diffusers_inputs(model):
                    try:
                        with torch.no_grad():
                            model(**inputs)
                    except Exception as exc:  # noqa: BLE001 - the next input shape
                        failures.append((f"{recipe} {note}", exc))
                        continue

                    def run(inputs: dict[str, Any] = inputs, model: nn.Module = model) -> Any:
                        with torch.no_grad():
                            return model(**inputs)

                    def train_step(inputs: dict[str, Any] = inputs, model: nn.Module = model) -> Any:
                        from .probe import main_tensor
                        model.train()
                        try:
                            value = main_tensor(model(**inputs))
                            if value is not None and value.requires_grad:
                                value.float().square().mean().backward()
                        finally:
                            model.eval()
                    return Built(model, inputs, name, recipe, run, None, None, note,
                                 info={"parameters": size, "zoo": "diffusers"}, output_capture=False)
            except Exception as exc:  # noqa: BLE001 - the next recipe
                failures.append((recipe, exc))
        what, first = failures[0]
        reason = first.reason if isinstance(first, NotBuilt) else classify_error(first)
        detail = " | ".join(f"{w}: {type(e).__name__}: {str(e)[:120]}" for w, e in failures[:3])
        try:  # not run: its structure, built on the meta device
            return _structure_only(name, "diffusers", None, lambda: cls(**_shrink_diffusers(defaults)),
                                   why=f"{reason}: {detail[:200]}", recipe="__init__ defaults, made small")
        except Exception:  # noqa: BLE001 - not even that
            raise NotBuilt(reason, detail) from None
