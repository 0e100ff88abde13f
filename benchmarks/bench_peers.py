"""hooklab against the tools a practitioner would pick instead: plain hooks, nnsight and TransformerLens, one run.

The same GPT-2 (built from a config, random weights, no dropout) and the same three tasks for every tool:
cache every block's output in one forward; patch one block's output at one position with the clean run's
(activation patching); add a steering vector to one block's output under ``generate()`` (greedy, a fixed
number of new tokens, KV cache). Each row's result is compared with plain hooks' (bit-identical, close, or
different) and timed in interleaved rounds on the process's CPU clock, as a ratio to the model without hooks
in the same round: median [min-max] over the rounds. Everything runs under ``torch.no_grad()``, one thread.

nnsight and TransformerLens are not dependencies of the course (TransformerLens may pin another transformers),
so they are not in ``uv.lock``. They go in a side environment that reuses the project's exact pins as
constraints (torch and transformers stay the project's versions; uv's cache links them, no second download)::

    uv venv build/peers --python .venv/bin/python          # uv: the project's copy is .tools/bin/uv
    uv export --frozen --no-hashes --no-emit-project --all-groups > build/peers-constraints.txt
    uv pip install --python build/peers/bin/python -c build/peers-constraints.txt \\
        nnsight==0.8.1 transformer-lens==4.3.0 -e .
    build/peers/bin/python -m benchmarks.bench_peers                 # 2 layers, width 256, batch 8 x 128 tokens
    build/peers/bin/python -m benchmarks.bench_peers --size tiny     # batch 1 x 8 tokens: the tools' fixed costs
    build/peers/bin/python -m benchmarks.bench_peers --size gpt2     # GPT-2 small's shape (slow on a CPU)

Run without them, the script says so and prints these commands. It is not part of ``./course test``.
Besides the tables it checks, in the same run, what the peers do to a model (printed as "verified:" lines).
"""
from __future__ import annotations

import argparse
import copy
import importlib.metadata
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the model and the tokenizer are made here

import torch  # noqa: E402
from torch import nn  # noqa: E402

if __package__ in (None, ""):  # run as a file (python benchmarks/x.py); python -m benchmarks.x needs no help
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hooklab  # noqa: E402
from benchmarks.ratios import Spread, load  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEERS = {"nnsight": "0.8.1", "transformer-lens": "4.3.0"}  # the releases this script was written and run against
SETUP = """\
  uv venv build/peers --python .venv/bin/python
  uv export --frozen --no-hashes --no-emit-project --all-groups > build/peers-constraints.txt
  uv pip install --python build/peers/bin/python -c build/peers-constraints.txt \\
      nnsight==0.8.1 transformer-lens==4.3.0 -e .
  build/peers/bin/python -m benchmarks.bench_peers
(uv: the project's copy is .tools/bin/uv)"""

SIZES = {  # layers, width, heads, vocabulary, batch, tokens, new tokens, rounds, steps per round
    "tiny": (2, 256, 4, 2048, 1, 8, 5, 9, 20),
    "small": (2, 256, 4, 2048, 8, 128, 20, 9, 3),
    "gpt2": (12, 768, 12, 50257, 8, 128, 20, 4, 1),
}


def locked_versions(*names: str) -> dict[str, str]:
    """The versions uv.lock pins for ``names``."""
    text = (ROOT / "uv.lock").read_text(encoding="utf-8")
    found = {}
    for name in names:
        m = re.search(rf'^name = "{re.escape(name)}"\nversion = "([^"]+)"', text, re.M)
        if m:
            found[name] = m.group(1)
    return found


def check_environment() -> dict[str, str]:
    """The peers' versions; refuse, with the commands that make the side environment, when they are missing or
    when this environment's torch / transformers are not the project's."""
    versions = {}
    for name in PEERS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            sys.exit(f"bench_peers needs nnsight and transformer-lens, which are kept out of uv.lock (not course "
                     f"dependencies; TransformerLens may pin another transformers). {name} is not installed in "
                     f"{sys.prefix}. Make the side environment (it reuses the project's torch and transformers) "
                     f"and run the benchmark there:\n{SETUP}")
    locked = locked_versions("torch", "transformers")
    for name, pinned in locked.items():
        here = importlib.metadata.version(name)
        if here.split("+")[0] != pinned:
            sys.exit(f"bench_peers compares the tools on the project's {name} {pinned} (uv.lock), but this "
                     f"environment has {name} {here}: make the side environment with the project's pins as "
                     f"constraints:\n{SETUP}")
    return versions


# --------------------------------------------------------------------------------------------- model
@dataclass
class Bench:
    model: nn.Module
    tokenizer: Any
    clean: torch.Tensor
    corrupt: torch.Tensor
    prompt: torch.Tensor
    new_tokens: int
    layers: int
    block: int  # the block patched and steered
    position: int
    steer: torch.Tensor
    description: str
    copies: dict[str, nn.Module] = field(default_factory=dict)


def make_tokenizer(vocab: int) -> Any:
    """A word-level tokenizer over ``t0 .. t{vocab-1}`` made in memory (TransformerLens wants a tokenizer whose
    ``init_kwargs`` carry ``name_or_path`` and ``add_bos_token``, or it reloads one from the Hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t1"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=words, bos_token="t0", eos_token="t0", unk_token="t1",
                                   pad_token="t0", name_or_path="synthetic-gpt2", add_bos_token=True)


def make_bench(size: str) -> Bench:
    from transformers import GPT2Config, GPT2LMHeadModel

    layers, width, heads, vocab, batch, tokens, new, _, _ = SIZES[size]
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=tokens + new,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = None  # every run makes exactly `new` tokens
    model.generation_config.pad_token_id = 0
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(1, vocab, (batch, tokens), generator=g)
    corrupt = clean.clone()
    corrupt[:, tokens // 2] = torch.randint(1, vocab, (batch,), generator=g)
    steer = torch.randn(width, generator=g) * 4
    block = layers // 2
    return Bench(model, make_tokenizer(vocab), clean, corrupt, clean, new, layers, block, tokens // 2, steer,
                 f"GPT-2 from a config: {layers} layers, width {width}, {heads} heads, vocabulary {vocab}; "
                 f"batch {batch} x {tokens} tokens, {new} new tokens under generate; block {block} patched at "
                 f"position {tokens // 2} and steered")


# -------------------------------------------------------------------------------------- the three tasks
Row = tuple[str, Callable[[], Any]]


def cache_rows(b: Bench, nn_model: Any, bridge: Any) -> list[Row]:
    model, ids, n = b.model, b.clean, b.layers
    names = [f"transformer.h.{i}" for i in range(n)]

    def baseline() -> Any:
        return model(ids).logits

    def plain() -> list[torch.Tensor]:
        cache: dict[int, torch.Tensor] = {}
        handles = [model.transformer.h[i].register_forward_hook(
            lambda m, args, out, i=i: cache.__setitem__(i, out.detach())) for i in range(n)]
        try:
            model(ids)
        finally:
            for h in handles:
                h.remove()
        return [cache[i] for i in range(n)]

    def with_hooklab() -> list[torch.Tensor]:
        with hooklab.capture(model, names) as store:
            model(ids)
        return [store[name] for name in names]

    def with_nnsight() -> list[torch.Tensor]:
        import nnsight
        with nn_model.trace(ids):
            outs = nnsight.save([nn_model.transformer.h[i].output for i in range(n)])
        return list(outs)

    def with_lens() -> list[torch.Tensor]:
        _, cache = bridge.run_with_cache(ids, names_filter=lambda name: name.endswith("hook_resid_post"))
        return [cache[f"blocks.{i}.hook_resid_post"] for i in range(n)]

    return [("HF model, no hooks (baseline)", baseline), ("plain register_forward_hook", plain),
            ("hooklab.capture", with_hooklab), ("nnsight trace + save", with_nnsight),
            ("TL bridge run_with_cache (resid_post)", with_lens), ("TL bridge, no hooks", lambda: bridge(ids))]


def patch_rows(b: Bench, nn_model: Any, bridge: Any, clean_cache: list[torch.Tensor]) -> list[Row]:
    model, ids, k, pos = b.model, b.corrupt, b.block, b.position
    source = clean_cache[k][:, pos]

    def baseline() -> Any:
        return model(ids).logits

    def plain() -> torch.Tensor:
        def hook(m: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
            out = out.clone()
            out[:, pos] = source
            return out
        handle = model.transformer.h[k].register_forward_hook(hook)
        try:
            return model(ids).logits
        finally:
            handle.remove()

    def with_hooklab() -> torch.Tensor:
        def edit(h: torch.Tensor, call: Any) -> torch.Tensor:
            h = h.clone()
            h[:, pos] = source
            return h
        with hooklab.intervene(model, {f"transformer.h.{k}": edit}):
            return model(ids).logits

    def with_nnsight() -> torch.Tensor:
        with nn_model.trace(ids):
            nn_model.transformer.h[k].output[:, pos] = source
            logits = nn_model.output.logits.save()
        return logits

    def with_lens() -> torch.Tensor:
        def hook(t: torch.Tensor, hook: Any) -> torch.Tensor:
            t[:, pos] = source
            return t
        return bridge.run_with_hooks(ids, fwd_hooks=[(f"blocks.{k}.hook_resid_post", hook)])

    return [("HF model, no hooks (baseline)", baseline), ("plain register_forward_hook", plain),
            ("hooklab.intervene", with_hooklab), ("nnsight trace", with_nnsight),
            ("TL bridge run_with_hooks", with_lens), ("TL bridge, no hooks", lambda: bridge(ids))]


def steer_rows(b: Bench, lm: Any, bridge: Any) -> list[Row]:
    model, prompt, k, new, v = b.model, b.prompt, b.block, b.new_tokens, b.steer
    greedy = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False)

    def baseline() -> torch.Tensor:
        return model.generate(prompt, **greedy)

    def plain() -> torch.Tensor:
        handle = model.transformer.h[k].register_forward_hook(lambda m, args, out: out + v)
        try:
            return model.generate(prompt, **greedy)
        finally:
            handle.remove()

    def with_hooklab() -> torch.Tensor:
        with hooklab.intervene(model, {f"transformer.h.{k}": lambda h, call: h + v}):
            return model.generate(prompt, **greedy)

    def with_nnsight() -> torch.Tensor:
        with lm.generate(prompt, **greedy) as tracer:
            for _ in tracer.iter[:new]:
                lm.transformer.h[k].output = lm.transformer.h[k].output + v
            out = tracer.result.save()
        return out

    def lens_generate() -> torch.Tensor:
        return bridge.generate(prompt, max_new_tokens=new, do_sample=False, stop_at_eos=False, verbose=False,
                               return_type="tokens")

    def with_lens() -> torch.Tensor:
        with bridge.hooks(fwd_hooks=[(f"blocks.{k}.hook_resid_post", lambda t, hook: t + v)]):
            return lens_generate()

    return [("HF generate, no hooks (baseline)", baseline), ("plain register_forward_hook", plain),
            ("hooklab.intervene", with_hooklab), ("nnsight generate", with_nnsight),
            ("TL bridge hooks() + generate", with_lens), ("TL bridge generate, no hooks", lens_generate)]


# ------------------------------------------------------------------------------------------ measuring
def compare(result: Any, reference: Any) -> str:
    """How a row's result compares with plain hooks'."""
    if reference is None or result is None:
        return ""
    a = result if isinstance(result, list) else [result]
    r = reference if isinstance(reference, list) else [reference]
    if len(a) != len(r) or any(x.shape != y.shape for x, y in zip(a, r, strict=True)):
        return "DIFFERENT (shapes)"
    if all(torch.equal(x, y) for x, y in zip(a, r, strict=True)):
        return "bit-identical"
    if any(not x.is_floating_point() for x in a):
        return "DIFFERENT tokens"
    diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(a, r, strict=True))
    return f"{'close' if diff < 1e-3 else 'DIFFERENT'}: max |diff| {diff:.1e}"


def time_rows(rows: list[Row], rounds: int, repeats: int) -> list[list[float]]:
    """CPU seconds per call of every row, per round, rows interleaved (each round starts one row later)."""
    for _, fn in rows:  # warm-up
        fn()
    times: list[list[float]] = [[] for _ in rows]
    for r in range(rounds):
        k = r % len(rows)
        for i in list(range(k, len(rows))) + list(range(k)):
            start = time.process_time()
            for _ in range(repeats):
                rows[i][1]()
            times[i].append((time.process_time() - start) / repeats)
    return times


def report(title: str, rows: list[Row], results: list[Any], times: list[list[float]],
           print_fn: Callable[[str], Any]) -> list[tuple[str, Spread, str]]:
    reference = results[1]
    base = times[0]
    out = []
    print_fn(f"-- {title}")
    print_fn(f"{'row':<40} {'x baseline (cpu) [min-max]':>28}  result vs plain hooks")
    for (name, _), result, ts in zip(rows, results, times, strict=True):
        spread = Spread.of([t / b for t, b in zip(ts, base, strict=True)])
        shown = f"1 ({statistics.median(base) * 1e3:.1f} ms)" if ts is base else str(spread)
        verdict = "" if ts is base or "no hooks" in name else ("(the reference)" if result is reference
                                                                else compare(result, reference))
        print_fn(f"{name:<40} {shown:>28}  {verdict}")
        out.append((name, spread, verdict))
    return out


def verify_peers(b: Bench, print_fn: Callable[[str], Any]) -> None:
    """What the peers do to a model, checked here (the course's descriptions of them must follow)."""
    import nnsight
    from transformer_lens.model_bridge import TransformerBridge

    try:
        from transformer_lens import HookedTransformer  # noqa: F401
        print_fn("verified: transformer_lens still exports HookedTransformer")
    except ImportError as error:
        print_fn(f"verified: TransformerLens {importlib.metadata.version('transformer-lens')} has no "
                 f"HookedTransformer: {str(error).split('.')[0]}.")
    copy_for_lens = copy.deepcopy(b.model)
    before = copy_for_lens.config._attn_implementation
    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=copy_for_lens, tokenizer=b.tokenizer)
    print_fn(f"verified: TransformerBridge.boot_transformers rewrites the model it is given: attention "
             f"{before} -> {copy_for_lens.config._attn_implementation}, {len(bridge.hook_dict)} hook points")
    wrapped = copy.deepcopy(b.model)
    nn_model = nnsight.NNsight(wrapped)
    patched = sum("forward" in m.__dict__ for m in wrapped.modules())
    seen: list[int] = []

    def count(m: nn.Module, args: Any) -> None:
        seen.append(len(m._forward_hooks) + len(m._forward_pre_hooks))
    handles = [m.register_forward_pre_hook(count) for m in wrapped.modules()]
    with torch.no_grad(), nn_model.trace(b.clean[:1, :4]):
        nnsight.save(nn_model.transformer.h[0].output)
    for h in handles:
        h.remove()
    print_fn(f"verified: nnsight.NNsight(model) puts its own forward into the instance __dict__ of {patched} of "
             f"{len(list(wrapped.modules()))} modules (kept by a deep copy); inside a trace the modules carry "
             f"{max(seen) - 1} hooks of nnsight's (counted beside this script's one); importing nnsight gives every "
             f"object .save: {hasattr(object(), 'save') or hasattr(object, 'save')}")


def run(size: str = "small", *, rounds: int | None = None, repeats: int | None = None,
        print_fn: Callable[[str], Any] = print) -> dict[str, list[tuple[str, Spread, str]]]:
    versions = check_environment()
    import nnsight
    import transformers
    from nnsight.modeling.transformers import TransformersModel
    from transformer_lens.model_bridge import TransformerBridge

    torch.set_num_threads(1)
    *_, default_rounds, default_repeats = SIZES[size]
    rounds, repeats = rounds or default_rounds, repeats or default_repeats
    b = make_bench(size)
    print_fn(f"torch {torch.__version__.split('+')[0]}, transformers {transformers.__version__}, hooklab "
             f"{hooklab.__version__}, nnsight {versions['nnsight']}, transformer-lens {versions['transformer-lens']}; "
             "1 thread, CPU clock, no_grad")
    print_fn(b.description)
    print_fn(f"{rounds} interleaved rounds x {repeats} call(s); {load()} at the start")
    with torch.no_grad():
        verify_peers(b, print_fn)
        # each peer gets its own deep copy (same weights): nnsight and TransformerLens change the model they wrap
        nn_model = nnsight.NNsight(copy.deepcopy(b.model))
        lm = TransformersModel(copy.deepcopy(b.model), tokenizer=b.tokenizer)
        bridge = TransformerBridge.boot_transformers("gpt2", hf_model=copy.deepcopy(b.model), tokenizer=b.tokenizer)
        tasks: dict[str, list[Row]] = {}
        tasks["cache every block's output (one forward)"] = rows = cache_rows(b, nn_model, bridge)
        clean_cache = rows[1][1]()
        tasks[f"patch block {b.block}'s output at position {b.position} with the clean run's"] = patch_rows(
            b, nn_model, bridge, clean_cache)
        tasks[f"steer block {b.block} under generate ({b.new_tokens} new tokens, greedy, KV cache)"] = steer_rows(
            b, lm, bridge)
        out = {}
        for title, rows in tasks.items():
            results = [fn() for _, fn in rows]
            times = time_rows(rows, rounds, repeats)
            out[title] = report(title, rows, results, times, print_fn)
        print_fn(f"{load()} at the end")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=tuple(SIZES), default="small",
                        help="tiny: batch 1 x 8 tokens (fixed costs); small (default): 2 layers, width 256, batch 8 x "
                             "128; gpt2: GPT-2 small's shape (slow on a CPU)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds")
    parser.add_argument("--repeats", type=int, help="calls per row per round")
    args = parser.parse_args(argv)
    for name in ("rounds", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be a positive integer, got {value}")
    run(args.size, rounds=args.rounds, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
