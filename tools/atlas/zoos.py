"""The four zoos of the atlas: what each one lists, and how one of its models is built small on a CPU, without weights.
This module holds what they share and the torchvision, timm and diffusers zoos; the transformers zoo, the largest, is
:mod:`tools.atlas.transformers_zoo`.

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
