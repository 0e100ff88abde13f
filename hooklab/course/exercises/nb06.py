"""Exercises of notebook 06 (saved-tensor hooks): count saved bytes, fix the disk hooks, predict who packs.
Anything written to disk goes to a private temporary directory that is removed afterwards."""
from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import save_on_cpu, saved_tensors_hooks

from ..._torch_internals import top_saved_tensors_hooks
from ...ledger import SavedTensorLedger
from ...offload import SaveOnDisk
from . import exercise
from ._support import (
    NotSolved,
    Wrong,
    call_answer,
    collector_sees_only_new_objects,
    expect,
    expect_count,
    fail,
    guarded,
    no_saved_tensor_hooks_left,
    run,
)


@contextmanager
def _last_outputs(model: nn.Sequential) -> Iterator[list[weakref.ref]]:
    """Weak references to the outputs of the model's last layer, recorded while the block runs."""
    refs: list[weakref.ref] = []
    handle = model[-1].register_forward_hook(lambda m, args, out: refs.append(weakref.ref(out)))
    try:
        yield refs
    finally:
        handle.remove()


def _alive(refs: list[weakref.ref]) -> bool:
    """True if an object behind ``refs`` survives a garbage collection (checked cheaply first)."""
    if all(ref() is None for ref in refs):
        return False
    gc.collect()
    return any(ref() is not None for ref in refs)


def _files(directory: str) -> int:
    """Files in ``directory`` once the garbage collector had its chance (only run when some are left)."""
    if os.path.isdir(directory) and os.listdir(directory):
        gc.collect()
    return len(os.listdir(directory)) if os.path.isdir(directory) else 0


# ---- 06.1 bytes of activations saved for backward -------------------------------------------------

_BYTES_MODELS: dict[str, Callable[[], nn.Sequential]] = {
    # ReLU's output is saved twice (by ReLU and by the next Linear); Tanh saves its output
    "relu": lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3), nn.Tanh()),
    # batch norm saves its running statistics (buffers) and small per-channel tensors
    "batchnorm": lambda: nn.Sequential(nn.Linear(5, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 4), nn.Sigmoid()),
    "plain": lambda: nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2)),
}
_BYTES_CASES = [(1, "relu", 7, False), (2, "batchnorm", 9, True), (3, "plain", 5, True)]  # seed, model, batch, x grad


def _bytes_case(seed: int, kind: str, batch: int, input_grad: bool) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(seed)
    model = _BYTES_MODELS[kind]()
    return model, torch.randn(batch, next(model.parameters()).shape[1], requires_grad=input_grad)


@exercise("06.1", answer="saved_activation_bytes")
@collector_sees_only_new_objects()  # _alive's collections look at the checker's objects, not at the whole process
def saved_activation_bytes(answer: Any) -> None:
    for case in _BYTES_CASES:
        model, x = _bytes_case(*case)
        with SavedTensorLedger(model) as ledger:  # the truth: the ledger's activations (input and parameters apart)
            model(x)
        model, x = _bytes_case(*case)  # a fresh copy for the learner
        hooks_seen: list = []  # the (pack, unpack) pair active at each call of the first layer (None: none)
        seeing = model[0].register_forward_pre_hook(lambda m, args: hooks_seen.append(top_saved_tensors_hooks()))
        try:
            with _last_outputs(model) as outputs:
                result = run(answer, model, x, leak_free=(model,))
        finally:
            seeing.remove()
        no_saved_tensor_hooks_left()
        _check_round_trip(next((pair for pair in hooks_seen if pair is not None), None))
        outside = bool(hooks_seen) and all(pair is None for pair in hooks_seen)
        hooks_seen.clear()  # the learner's hooks, and what they hold, must be free to go
        expect(not _alive(outputs), "reference-cycle",
               "函数返回后，模型最后一层的输出仍然活着：pack 钩子返回了张量本身。保存自己输出的运算（如 "
               "`Tanh`、`Sigmoid`）会因此形成 `y → grad_fn → y` 的引用环（勘误 3）；返回 `t.detach()`。",
               "the output of the model's last layer is still alive after your function returned: the pack hook "
               "returns the tensor itself. An op that saves its own output (`Tanh`, `Sigmoid`) then makes the "
               "cycle `y -> grad_fn -> y` (correction 3); return `t.detach()`.")
        if isinstance(result, torch.Tensor) and result.numel() == 1 and not result.is_floating_point():
            result = int(result)
        expect_count(result, ("整数字节数", "the number of bytes as an int"))
        _, kind, batch, input_grad = case
        expect(result == ledger.activation_bytes or not outside, "forward-outside-hooks",
               f"你的函数返回 {result}：运行 `model(x)` 时，没有任何 `saved_tensors_hooks` 处于生效状态，pack 钩子一次也没"
               "被调用。前向要写在 `with saved_tensors_hooks(pack, unpack):` 块的里面，而不是块结束之后。",
               f"your function returned {result}: no `saved_tensors_hooks` was active while `model(x)` ran, so the "
               "pack hook never saw a tensor. Run the forward pass inside the `with saved_tensors_hooks(pack, "
               "unpack):` block, not after it.")
        expect(result != ledger.activation_bytes + ledger.parameter_bytes or not ledger.parameter_bytes,
               "parameters-counted",
               f"你的函数返回 {result}，正好是激活值的 {ledger.activation_bytes} 字节加上参数的 "
               f"{ledger.parameter_bytes} 字节：参数没有被排除。pack 钩子收到的往往不是参数对象本身，而是它的视图"
               "（`nn.Linear` 保存的是 `weight.t()`），所以 `t is p` 认不出来；按存储比较："
               "`t.untyped_storage().data_ptr()`。",
               f"your function returned {result}, exactly the {ledger.activation_bytes} bytes of activations plus "
               f"{ledger.parameter_bytes} bytes of parameters: the parameters were not left out. The pack hook often "
               "gets a view of a parameter rather than the parameter object (`nn.Linear` saves `weight.t()`), which "
               "`t is p` does not recognise; compare storages: `t.untyped_storage().data_ptr()`.")
        expect(result == ledger.activation_bytes, "byte-count",
               f"对一个新模型（{kind}，batch {batch}，输入{'需要梯度' if input_grad else '不需要梯度'}），一次前向保存的"
               f"激活值共 {ledger.activation_bytes} 字节（每块存储只算一次，不算参数、缓冲区和输入 `x`），你的函数返回 {result}。",
               f"on a fresh model ({kind}, batch {batch}, input {'requiring' if input_grad else 'not requiring'} grad) "
               f"one forward pass saves {ledger.activation_bytes} bytes of activations (each storage once; parameters, "
               f"buffers and the input `x` not counted); your function returned {result}.")


def _check_round_trip(pair: tuple[Callable, Callable] | None) -> None:
    """The learner's (pack, unpack) pair gives back a tensor for a tensor it packed (what backward reads)."""
    if pair is None:
        return
    probe = torch.randn(3, 4)
    try:
        back = pair[1](pair[0](probe))
    except Exception:  # the pair may not work outside its forward pass: only what it returns is judged here
        return
    expect(isinstance(back, torch.Tensor), "unpack-not-tensor",
           f"你的 unpack 钩子还回来的是 {type(back).__name__}，不是张量：反向传播（以及读 `grad_fn._saved_*`）用的就是 "
           "unpack 的返回值，它必须是原来那个张量。pack 若存了一个元组，unpack 要从中取出张量再返回。",
           f"your unpack hook gives back a {type(back).__name__}, not a tensor: what unpack returns is what backward "
           "(and a read of `grad_fn._saved_*`) uses, so it must be the tensor that was packed. If pack keeps a "
           "tuple, unpack takes the tensor out of it and returns that.")


# ---- 06.2 disk hooks with a byte threshold that clean up after themselves --------------------------

# seed, batch, hidden, min_bytes. Case 1: ReLU's output (saved twice) is exactly min_bytes, 800 bytes in 200
# elements, so a threshold in elements or with `>` misses it; case 3 has a Sigmoid output above the threshold
_DISK_CASES = [(1, 5, 40, 800), (2, 4, 24, 500), (3, 8, 16, 100)]


def _disk_step(seed: int, batch: int, hidden: int) -> tuple[nn.Sequential, Callable[[], torch.Tensor]]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, hidden), nn.ReLU(), nn.Linear(hidden, 6), nn.Sigmoid())
    x = torch.randn(batch, 10)
    return model, lambda: model(x).square().sum()


def _hook_pair(answer: Callable, directory: str, min_bytes: int) -> tuple[Callable, Callable]:
    hooks = call_answer(answer, directory, min_bytes)
    expect(isinstance(hooks, (tuple, list)) and len(hooks) == 2 and all(callable(h) for h in hooks), "not-a-pair",
           "`make_disk_hooks` 应返回两个函数 `(pack_hook, unpack_hook)`。",
           "`make_disk_hooks` must return two functions, `(pack_hook, unpack_hook)`.")
    return hooks[0], hooks[1]


@contextmanager
def _ignored_in_del() -> Iterator[list[str]]:
    """The exceptions raised (and ignored) in ``__del__`` / finalizers while the block runs, and in a collection after."""
    caught: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda info: caught.append(f"{type(info.exc_value).__name__}: {info.exc_value}")
    try:
        yield caught
        gc.collect()
    finally:
        sys.unraisablehook = previous


_PACK = ("前向传播（pack 钩子）", "the forward pass (your pack hook)")


@contextmanager
def _saves_outside(directory: str) -> Iterator[list[str]]:
    """The paths outside ``directory`` that ``torch.save`` writes to while the block runs."""
    outside: list[str] = []
    inside = os.path.abspath(directory) + os.sep
    save = torch.save

    def recording(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)) and not os.path.abspath(os.fspath(f)).startswith(inside):
            outside.append(os.fspath(f))
        return save(obj, f, *args, **kwargs)
    torch.save = recording
    try:
        yield outside
    finally:
        torch.save = save


def _check_files_written(written: int, sizes: list[tuple[int, int]], min_bytes: int, outside: list[str]) -> None:
    """One file per saved tensor of at least ``min_bytes`` bytes (``sizes``: their elements and bytes); ``outside``:
    the files ``torch.save`` wrote elsewhere."""
    expected = sum(nbytes >= min_bytes for _, nbytes in sizes)
    if written == expected:
        return
    zh = (f"min_bytes={min_bytes} 时，这次前向保存的张量中有 {expected} 个不小于阈值，应在 `directory` 里各写一个文件；"
          f"目录里实际有 {written} 个。")
    en = (f"with min_bytes={min_bytes}, {expected} of the tensors this forward pass saves are at least that large "
          f"and should each be written to a file in `directory`; the directory holds {written}.")
    where = os.path.dirname(outside[0]) if outside else ""
    expect(not outside, "wrong-directory",
           zh + f"你的 pack 钩子把 {len(outside)} 个文件写到了别处（`{where}`）：文件路径要用传进来的 `directory` 拼出来，"
           "例如 `os.path.join(directory, ...)`。",
           en + f" Your pack hook wrote {len(outside)} files somewhere else (`{where}`): build each path from the "
           "`directory` you were given, e.g. `os.path.join(directory, ...)`.")
    expect(written != sum(numel >= min_bytes for numel, _ in sizes), "threshold-in-elements",
           zh + "看起来阈值比较的是元素个数，而不是字节数。", en + " It looks like the threshold compares elements, not bytes.")
    expect(written != sum(nbytes > min_bytes for _, nbytes in sizes), "threshold-strict",
           zh + "恰好 `min_bytes` 字节的张量也要写到磁盘（`>=`，不是 `>`）。",
           en + " A tensor of exactly `min_bytes` bytes goes to disk too (`>=`, not `>`).")
    fail("file-count", zh, en)


def _check_disk_case(answer: Callable, root: str, seed: int, batch: int, hidden: int, min_bytes: int) -> None:
    model, step = _disk_step(seed, batch, hidden)
    sizes: list[tuple[int, int]] = []  # (elements, bytes) of every tensor the forward pass saves

    def record(t: torch.Tensor) -> torch.Tensor:
        sizes.append((t.numel(), t.numel() * t.element_size()))
        return t.detach()
    with saved_tensors_hooks(record, lambda t: t):
        loss = step()
    reference = torch.autograd.grad(loss, list(model.parameters()))
    directory = tempfile.mkdtemp(dir=root)
    pack, unpack = _hook_pair(answer, directory, min_bytes)
    with _ignored_in_del() as ignored:
        with guarded("pack-raised", *_PACK), _saves_outside(directory) as outside, saved_tensors_hooks(pack, unpack):
            loss = step()
        _check_files_written(len(os.listdir(directory)), sizes, min_bytes, outside)
        with guarded("unpack-raised", "第一次解包（`torch.autograd.grad(..., retain_graph=True)`）",
                     "unpacking (in `torch.autograd.grad(..., retain_graph=True)`)"):
            torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
        with guarded("second-unpack", "第二次解包（反向传播）", "unpacking a second time (in backward)"):
            loss.backward()  # unpack may run more than once
        # a tolerance, not torch.equal: a right answer may save a compact copy of a transposed view (W.T), and a
        # matrix multiply in the copy's layout can differ in the last bits on some CPUs (notebook 06, the offload_wrapper cell)
        expect(all(p.grad is not None and torch.allclose(r, p.grad, rtol=1e-5, atol=1e-6)
                   for r, p in zip(reference, model.parameters())),
               "gradients-differ",
               "经过你的钩子，梯度与不用钩子时不同：`unpack` 必须还原出原来的张量。",
               "through your hooks the gradients differ from those without hooks: `unpack` must give back the "
               "original tensor.")
        del loss
        left = _files(directory)
        expect(not left, "files-left-after-backward",
               f"反向传播之后 `directory` 里还剩 {left} 个文件：文件应在图释放保存的对象时被删除。",
               f"{left} files are left in `directory` after backward: a file must be deleted when the graph frees "
               "the saved object.")
        with _last_outputs(model) as outputs, guarded("pack-raised", *_PACK), saved_tensors_hooks(pack, unpack):
            loss = step()  # a graph dropped without backward frees its files, and the model's output, too
        del loss
        expect(not _alive(outputs), "reference-cycle",
               "图被丢弃后，模型的输出（`Sigmoid` 保存了它）仍然活着：小于阈值时 pack 钩子返回了张量本身，形成引用环（勘误 3）；"
               "返回 `t.detach()`。",
               "after the graph was dropped the model's output (saved by `Sigmoid`) is still alive: below the "
               "threshold your pack hook returns the tensor itself, which makes a reference cycle (correction 3); "
               "return `t.detach()`.")
        left = _files(directory)
        expect(not left, "files-left-after-drop", f"没有反向传播、图被直接丢弃后，`directory` 里还剩 {left} 个文件。",
               f"{left} files are left in `directory` after the graph was dropped without backward.")
    first = (ignored or [""])[0]
    expect(not ignored, "del-raised", f"有异常在 `__del__` 里被抛出又被忽略：{first}。",
           f"an exception was raised in `__del__` and ignored: {first}.")


def _check_failed_write(answer: Callable, root: str) -> None:
    model, step = _disk_step(4, 6, 30)
    missing = os.path.join(root, "deleted")  # as if someone removed the directory: every torch.save fails
    pack, unpack = _hook_pair(answer, missing, 0)
    with _ignored_in_del() as ignored, suppress(Exception):  # the failed write may raise: that is the caller's to handle
        with saved_tensors_hooks(pack, unpack):
            loss = step()
        loss.backward()  # a learner may fall back to memory: then it must still work
        del loss
    first = (ignored or [""])[0]
    expect(not ignored, "del-after-failed-write",
           f"写文件失败后，有异常在 `__del__` 里被抛出又被忽略：{first}。文件没写成时，不要留下一个会去删除它的对象"
           "（或者在删除时容忍文件不存在）。",
           f"after a failed write, an exception was raised in `__del__` and ignored: {first}. When the file "
           "was never written, leave no object that will try to delete it (or tolerate a missing file when deleting).")
    left = _files(missing)
    expect(not left, "files-left-after-failed-write", f"写文件失败之后还剩 {left} 个文件。",
           f"{left} files are left after the failed write.")


@exercise("06.2", answer="make_disk_hooks")
def make_disk_hooks(answer: Any) -> None:
    root = tempfile.mkdtemp(prefix="hooklab-exercise-")
    failure: Wrong | None = None
    try:
        # the collections below (what the learner's objects leave behind) look at the checker's objects only;
        # a wrong answer's objects may die when its error is dropped; what their __del__ raises then is not the
        # learner's output (the checks that look for it catch it themselves)
        with collector_sees_only_new_objects(), _ignored_in_del():
            try:
                for case in _DISK_CASES:
                    _check_disk_case(answer, root, *case)
                _check_failed_write(answer, root)
            except Wrong as why:  # a copy without the traceback, which would keep the learner's graphs (and files) alive
                failure = type(why)(why.zh, why.en, reason=why.reason)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if failure is not None:
        raise failure


# ---- 06.3 who packs: predict how many files SaveOnDisk writes ---------------------------------------

def _snippets(root: str, x: torch.Tensor) -> list[int]:
    """The four snippets of the exercise; ``d.files_alive`` right after each (every graph kept until the end)."""
    counts, graphs = [], []
    with SaveOnDisk(directory=root) as d:         # a
        with save_on_cpu():
            y = x.exp()
        graphs.append(y.sin())
    counts.append(d.files_alive)
    with save_on_cpu():                           # b
        with SaveOnDisk(directory=root) as d:
            y = x.exp()
        graphs.append(y.sin())
    counts.append(d.files_alive)
    with SaveOnDisk(directory=root) as d:         # c
        graphs.append(x.exp().sin().cos())
    counts.append(d.files_alive)
    with SaveOnDisk(directory=root) as d:         # d
        with save_on_cpu():
            graphs.append(x.exp().sin())
    counts.append(d.files_alive)
    return counts


@exercise("06.3", answer="my_files", data=True)
def predict_files(answer: Any) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把四个预测（a、b、c、d 各一个整数）按顺序填进 `my_files`。",
                        "put your four predictions (one int each for a, b, c, d) into `my_files`, in order.")
    expect(isinstance(answer, (list, tuple)) and len(answer) == 4
           and all(isinstance(n, int) and not isinstance(n, bool) for n in answer), "not-four-ints",
           "`my_files` 应是 4 个整数组成的列表，依次对应 a、b、c、d。",
           "`my_files` must be a list of 4 ints, for a, b, c and d in that order.")
    root = tempfile.mkdtemp(prefix="hooklab-exercise-")
    with collector_sees_only_new_objects():
        try:
            torch.manual_seed(0)
            truth = _snippets(root, torch.randn(1000, requires_grad=True))
        finally:
            gc.collect()
            shutil.rmtree(root, ignore_errors=True)
    wrong = [(name, said, real) for name, said, real in zip("abcd", answer, truth) if said != real]
    name, said, real = (wrong or [("", 0, 0)])[0]
    expect(not wrong, "prediction",
           f"{len(wrong)} 个预测不对；例如片段 {name}：块结束时 `d.files_alive` 是 {real}，你预测的是 {said}。"
           "把这个片段运行一次，打印 `d.files_alive` 和 `d.stats` 看看。",
           f"{len(wrong)} of 4 predictions wrong; for example snippet {name}: right after the block `d.files_alive` "
           f"is {real}, you predicted {said}. Run that snippet and print `d.files_alive` and `d.stats`.")
