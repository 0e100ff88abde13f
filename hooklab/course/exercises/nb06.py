"""Exercises of notebook 06 (saved-tensor hooks): count saved bytes, fix the disk hooks, predict who packs.

Every checker builds tiny seeded models, computes the truth itself (with its own recording hooks or
``SavedTensorLedger``), runs the learner's answer on them and says what differs; anything written to
disk goes to a private temporary directory that is removed in ``finally``. Each check takes a few
tens of milliseconds on a CPU.
"""
from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
import weakref
from typing import Any, Callable

import torch
from torch import nn
from torch.autograd.graph import save_on_cpu, saved_tensors_hooks

from ..._torch_internals import saved_tensor_attrs
from ...inventory import hook_inventory
from ...ledger import SavedTensorLedger
from ...offload import SaveOnDisk
from . import SAVED_HOOKS_LEFT_ACTIVE, NotSolved, Wrong, call_answer, exercise, no_hooks_left, require_callable


# ---- shared checks ----------------------------------------------------------------------------

def saved_tensor_hooks_left() -> bool:
    """True when a ``saved_tensors_hooks`` context is still active (entered and never exited)."""
    return any(e.kind == "saved_tensors" for e in hook_inventory(None))


def no_saved_tensor_hooks_left() -> None:
    """Stop the check at once (before the truth is computed under the answer's hooks) if a context was left."""
    if saved_tensor_hooks_left():
        raise Wrong(*SAVED_HOOKS_LEFT_ACTIVE)


def _still_alive(refs: list[weakref.ref]) -> bool:
    """True if an object behind ``refs`` survives a garbage collection (checked cheaply first)."""
    if all(ref() is None for ref in refs):
        return False
    gc.collect()
    return any(ref() is not None for ref in refs)


def _files_left(directory: str) -> int:
    """Files in ``directory`` once the garbage collector had its chance (only run when some are left)."""
    if _files(directory):
        gc.collect()
    return _files(directory)


def _graph_nodes(root: Any) -> list[Any]:
    nodes, seen, stack = [], set(), [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        stack.extend(fn for fn, _ in node.next_functions)
    return nodes


def _read_saved_tensors(loss: torch.Tensor) -> None:
    """Read every ``grad_fn._saved_*`` of the graph once (each read runs the unpack hook)."""
    for node in _graph_nodes(loss.grad_fn):
        for attr in saved_tensor_attrs(node):
            getattr(node, attr)


# ---- 06.1 bytes of activations saved for backward -------------------------------------------------

def _bytes_case(seed: int, kind: str, batch: int, input_grad: bool) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    if kind == "relu":       # ReLU's output is saved twice (by ReLU and by the next Linear); Tanh saves its output
        model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3), nn.Tanh())
    elif kind == "batchnorm":  # batch norm saves its running statistics (buffers) and small per-channel tensors
        model = nn.Sequential(nn.Linear(5, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 4), nn.Sigmoid())
    else:
        model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))
    return model, torch.randn(batch, model[0].in_features, requires_grad=input_grad)


@exercise("06.1",
          hint=("在 pack 钩子里取 `key = t.untyped_storage().data_ptr()`，跳过参数、缓冲区和 `x` 的存储，"
                "每个新的 key 只加一次 `t.untyped_storage().nbytes()`，最后 `return t.detach()`。",
                "in the pack hook take `key = t.untyped_storage().data_ptr()`, skip the storages of the "
                "parameters, the buffers and `x`, add `t.untyped_storage().nbytes()` once per new key, and "
                "`return t.detach()`."),
          solution='''
def saved_activation_bytes(model, x):
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    seen = set()
    total = 0

    def pack(t):
        nonlocal total
        key = t.untyped_storage().data_ptr()
        if key not in skip and key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total
''')
def saved_activation_bytes(answer: Any) -> None:
    require_callable(answer, "saved_activation_bytes")
    for seed, kind, batch, input_grad in [(1, "relu", 7, False), (2, "batchnorm", 9, True), (3, "plain", 5, True)]:
        model, x = _bytes_case(seed, kind, batch, input_grad)
        with SavedTensorLedger(model) as ledger:  # the truth: the ledger's activations (input and parameters apart)
            model(x)
        truth = ledger.activation_bytes
        model, x = _bytes_case(seed, kind, batch, input_grad)  # a fresh copy for the learner
        outputs: list[weakref.ref] = []
        spy = model[-1].register_forward_hook(lambda m, args, out: outputs.append(weakref.ref(out)))
        try:
            with no_hooks_left(model):
                result = call_answer(answer, model, x)
        finally:
            spy.remove()
        no_saved_tensor_hooks_left()
        if _still_alive(outputs):
            raise Wrong("函数返回后，模型最后一层的输出仍然活着：pack 钩子返回了张量本身。保存自己输出的运算（如 "
                        "`Tanh`、`Sigmoid`）会因此形成 `y → grad_fn → y` 的引用环（勘误 3）；返回 `t.detach()`。",
                        "the output of the model's last layer is still alive after your function returned: the "
                        "pack hook returns the tensor itself. An op that saves its own output (`Tanh`, `Sigmoid`) "
                        "then makes the cycle `y -> grad_fn -> y` (correction 3); return `t.detach()`.")
        if isinstance(result, torch.Tensor) and result.numel() == 1 and not result.is_floating_point():
            result = int(result)
        if not isinstance(result, int) or isinstance(result, bool):
            raise Wrong(f"应返回整数字节数，收到的是 {type(result).__name__}。",
                        f"return the number of bytes as an int, not a {type(result).__name__}.")
        if result != truth:
            grad = "需要梯度" if input_grad else "不需要梯度"
            raise Wrong(f"对一个新模型（{kind}，batch {batch}，输入{grad}），一次前向保存的激活值共 {truth} 字节"
                        f"（每块存储只算一次，不算参数、缓冲区和输入 `x`），你的函数返回 {result}。",
                        f"on a fresh model ({kind}, batch {batch}, input "
                        f"{'requiring' if input_grad else 'not requiring'} grad) one forward pass saves {truth} "
                        f"bytes of activations (each storage once; parameters, buffers and the input `x` not "
                        f"counted); your function returned {result}.")


# ---- 06.2 disk hooks with a byte threshold that clean up after themselves --------------------------

def _disk_model(seed: int, batch: int, hidden: int) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, hidden), nn.ReLU(), nn.Linear(hidden, 6), nn.Sigmoid()), torch.randn(batch, 10)


def _step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).square().sum()


def _hook_pair(answer: Callable, directory: str, min_bytes: int) -> tuple[Callable, Callable]:
    hooks = call_answer(answer, directory, min_bytes)
    if (not isinstance(hooks, (tuple, list)) or len(hooks) != 2 or not all(callable(h) for h in hooks)):
        raise Wrong("`make_disk_hooks` 应返回两个函数 `(pack_hook, unpack_hook)`。",
                    "`make_disk_hooks` must return two functions, `(pack_hook, unpack_hook)`.")
    return hooks[0], hooks[1]


def _files(directory: str) -> int:
    return len(os.listdir(directory)) if os.path.isdir(directory) else 0


def _run_hooks(what_zh: str, what_en: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        raise Wrong(f"{what_zh}时出错：{type(exc).__name__}: {exc}",
                    f"{what_en} failed: {type(exc).__name__}: {exc}") from exc


class _Unraisable:
    """Catch exceptions raised (and ignored) in ``__del__`` / finalizers while the block runs."""

    def __init__(self, collect: bool = False) -> None:
        self.collect = collect

    def __enter__(self) -> list[str]:
        self.caught: list[str] = []
        self.previous = sys.unraisablehook
        sys.unraisablehook = lambda info: self.caught.append(f"{type(info.exc_value).__name__}: {info.exc_value}")
        return self.caught

    def __exit__(self, *exc_info: Any) -> None:
        if self.collect:
            gc.collect()
        sys.unraisablehook = self.previous


def _check_disk_case(answer: Callable, root: str, seed: int, batch: int, hidden: int, min_bytes: int) -> None:
    model, x = _disk_model(seed, batch, hidden)
    sizes: list[tuple[int, int]] = []  # (elements, bytes) of every tensor the forward pass saves
    with saved_tensors_hooks(lambda t: sizes.append((t.numel(), t.numel() * t.element_size())) or t.detach(),
                             lambda t: t):
        loss = _step(model, x)
    loss.backward()
    reference = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    expected = sum(nbytes >= min_bytes for _, nbytes in sizes)
    directory = tempfile.mkdtemp(dir=root)
    pack, unpack = _hook_pair(answer, directory, min_bytes)
    with _Unraisable() as ignored:
        # 1. forward: one file per saved tensor of at least min_bytes bytes
        with saved_tensors_hooks(pack, unpack):
            loss = _run_hooks("前向传播（pack 钩子）", "the forward pass (your pack hook)", lambda: _step(model, x))
        written = _files(directory)
        if written != expected:
            by_elements = sum(numel >= min_bytes for numel, _ in sizes)
            strictly = sum(nbytes > min_bytes for _, nbytes in sizes)
            why_zh, why_en = "", ""
            if written == by_elements:
                why_zh, why_en = "看起来阈值比较的是元素个数，而不是字节数。", " It looks like the threshold compares elements, not bytes."
            elif written == strictly:
                why_zh, why_en = ("恰好 `min_bytes` 字节的张量也要写到磁盘（`>=`，不是 `>`）。",
                                  " A tensor of exactly `min_bytes` bytes goes to disk too (`>=`, not `>`).")
            raise Wrong(f"min_bytes={min_bytes} 时，这次前向保存的张量中有 {expected} 个不小于阈值，应在 `directory` 里"
                        f"各写一个文件；目录里实际有 {written} 个。{why_zh}",
                        f"with min_bytes={min_bytes}, {expected} of the tensors this forward pass saves are at least "
                        f"that large and should each be written to a file in `directory`; the directory holds "
                        f"{written}.{why_en}")
        # 2. unpack may run more than once: read every saved tensor, then backward reads them again
        _run_hooks("读取 `grad_fn._saved_*`（unpack 钩子）", "reading `grad_fn._saved_*` (your unpack hook)",
                   lambda: _read_saved_tensors(loss))
        _run_hooks("第二次解包（反向传播）", "unpacking a second time (in backward)", loss.backward)
        if not all(torch.equal(r, p.grad) for r, p in zip(reference, model.parameters())):
            raise Wrong("经过你的钩子，梯度与不用钩子时不同：`unpack` 必须还原出原来的张量。",
                        "through your hooks the gradients differ from those without hooks: `unpack` must give "
                        "back the original tensor.")
        del loss
        left = _files_left(directory)
        if left:
            raise Wrong(f"反向传播之后 `directory` 里还剩 {left} 个文件：文件应在图释放保存的对象时被删除。",
                        f"{left} files are left in `directory` after backward: a file must be deleted when "
                        "the graph frees the saved object.")
        # 3. a graph dropped without backward frees its files, and the model's output, too
        outputs: list[weakref.ref] = []
        spy = model[-1].register_forward_hook(lambda m, args, out: outputs.append(weakref.ref(out)))
        try:
            with saved_tensors_hooks(pack, unpack):
                loss = _run_hooks("前向传播（pack 钩子）", "the forward pass (your pack hook)", lambda: _step(model, x))
        finally:
            spy.remove()
        del loss
        if _still_alive(outputs):
            raise Wrong("图被丢弃后，模型的输出（`Sigmoid` 保存了它）仍然活着：小于阈值时 pack 钩子返回了张量本身，"
                        "形成引用环（勘误 3）；返回 `t.detach()`。",
                        "after the graph was dropped the model's output (saved by `Sigmoid`) is still alive: below "
                        "the threshold your pack hook returns the tensor itself, which makes a reference cycle "
                        "(correction 3); return `t.detach()`.")
        left = _files_left(directory)
        if left:
            raise Wrong(f"没有反向传播、图被直接丢弃后，`directory` 里还剩 {left} 个文件。",
                        f"{left} files are left in `directory` after the graph was dropped without backward.")
    if ignored:
        raise Wrong(f"有异常在 `__del__` 里被抛出又被忽略：{ignored[0]}。",
                    f"an exception was raised in `__del__` and ignored: {ignored[0]}.")


def _check_failed_write(answer: Callable, root: str) -> None:
    model, x = _disk_model(4, 6, 30)
    missing = os.path.join(root, "deleted")  # as if someone removed the directory: every torch.save fails
    pack, unpack = _hook_pair(answer, missing, 0)
    with _Unraisable(collect=True) as ignored:
        try:
            with saved_tensors_hooks(pack, unpack):
                loss = _step(model, x)
            loss.backward()  # a learner may fall back to memory: then it must still work
            del loss
        except Exception:
            pass  # the failed write may raise: that is the caller's to handle
    if ignored:
        raise Wrong(f"写文件失败后，有异常在 `__del__` 里被抛出又被忽略：{ignored[0]}。文件没写成时，"
                    "不要留下一个会去删除它的对象（或者在删除时容忍文件不存在）。",
                    f"after a failed write, an exception was raised in `__del__` and ignored: {ignored[0]}. When "
                    "the file was never written, leave no object that will try to delete it (or tolerate a "
                    "missing file when deleting).")
    left = _files_left(missing)
    if left:
        raise Wrong(f"写文件失败之后还剩 {left} 个文件。", f"{left} files are left after the failed write.")


@exercise("06.2",
          hint=("阈值用 `t.numel() * t.element_size()`（字节）比较；先 `torch.save` 成功，再创建那个会在 `__del__` "
                "里删除文件的对象（或者删除时容忍 `FileNotFoundError`）；解包时只读，不删。",
                "compare `t.numel() * t.element_size()` (bytes) with the threshold; call `torch.save` first and "
                "create the object that deletes the file in `__del__` only once it succeeded (or tolerate "
                "`FileNotFoundError` when deleting); unpack only reads, never deletes."),
          solution='''
def make_disk_hooks(directory, min_bytes):
    import os
    import uuid

    class SelfDeletingTempFile:
        def __init__(self, name):
            self.name = name

        def __del__(self):
            os.remove(self.name)

    def pack(t):
        if t.numel() * t.element_size() < min_bytes:
            return t.detach()
        name = os.path.join(directory, str(uuid.uuid4()))
        torch.save(t.detach(), name)       # if this fails, nothing exists yet that would delete the file
        return SelfDeletingTempFile(name)  # from here on, the file lives exactly as long as this object

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return torch.load(packed.name, weights_only=True)

    return pack, unpack
''')
def make_disk_hooks(answer: Any) -> None:
    require_callable(answer, "make_disk_hooks")
    root = tempfile.mkdtemp(prefix="hooklab-exercise-")
    failure: tuple[type, str, str] | None = None
    previous = sys.unraisablehook
    # a wrong answer's objects may die when its error is dropped; what their __del__ raises then is not the
    # learner's output (the checks that look for it install their own hook)
    sys.unraisablehook = lambda info: None
    try:
        try:
            # case 1: ReLU's output (saved twice) is exactly min_bytes, 800 bytes in 200 elements, so a threshold
            # in elements or with `>` misses it; case 3 has a Sigmoid output above the threshold
            for seed, batch, hidden, min_bytes in [(1, 5, 40, 800), (2, 4, 24, 500), (3, 8, 16, 100)]:
                _check_disk_case(answer, root, seed, batch, hidden, min_bytes)
            _check_failed_write(answer, root)
        except Wrong as why:  # keep only the message: its traceback would keep the learner's graphs (and files) alive
            failure = type(why), why.zh, why.en
        if failure is not None:
            gc.collect()
    finally:
        sys.unraisablehook = previous
        shutil.rmtree(root, ignore_errors=True)
    if failure is not None:
        kind, zh, en = failure
        raise kind(zh, en)


# ---- 06.3 who packs: predict how many files SaveOnDisk writes ---------------------------------------

def _snippets(root: str) -> list[int]:
    counts = []
    graphs = []  # keep every graph alive until all four counts are read
    torch.manual_seed(0)
    x = torch.randn(1000, requires_grad=True)
    with SaveOnDisk(directory=root) as d:         # a
        with save_on_cpu():
            y = x.exp()
        z = y.sin()
    counts.append(d.files_alive)
    graphs.append(z)
    with save_on_cpu():                           # b
        with SaveOnDisk(directory=root) as d:
            y = x.exp()
        z = y.sin()
    counts.append(d.files_alive)
    graphs.append(z)
    with SaveOnDisk(directory=root) as d:         # c
        z = x.exp().sin().cos()
    counts.append(d.files_alive)
    graphs.append(z)
    with SaveOnDisk(directory=root) as d:         # d
        with save_on_cpu():
            z = x.exp().sin()
    counts.append(d.files_alive)
    graphs.append(z)
    return counts


def _recorded_files() -> list[int]:
    """Run the four snippets of the exercise and return ``d.files_alive`` right after each."""
    root = tempfile.mkdtemp(prefix="hooklab-exercise-")
    try:
        return _snippets(root)
    finally:
        gc.collect()
        shutil.rmtree(root, ignore_errors=True)


_SNIPPETS = "abcd"


@exercise("06.3",
          hint=("任何时刻只有最内层的一对钩子生效，而且要看的是运算**执行**时哪一对最靠内；`exp` 保存它的输出，"
                "`sin`、`cos` 保存它们的输入；同一块存储被几个运算保存时，`SaveOnDisk` 只写一次。",
                "only the innermost pair of hooks applies, and what counts is which pair is innermost when the op "
                "**runs**; `exp` saves its output, `sin` and `cos` save their input; `SaveOnDisk` writes a "
                "storage saved by several ops only once."),
          solution='''
my_files = [1, 1, 2, 0]
''')
def predict_files(answer: Any) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把四个预测（a、b、c、d 各一个整数）按顺序填进 `my_files`。",
                        "put your four predictions (one int each for a, b, c, d) into `my_files`, in order.")
    if (not isinstance(answer, (list, tuple)) or len(answer) != 4
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in answer)):
        raise Wrong("`my_files` 应是 4 个整数组成的列表，依次对应 a、b、c、d。",
                    "`my_files` must be a list of 4 ints, for a, b, c and d in that order.")
    truth = _recorded_files()
    wrong = [(name, said, real) for name, said, real in zip(_SNIPPETS, answer, truth) if said != real]
    if wrong:
        name, said, real = wrong[0]
        raise Wrong(f"{len(wrong)} 个预测不对；例如片段 {name}：块结束时 `d.files_alive` 是 {real}，你预测的是 {said}。"
                    "把这个片段运行一次，打印 `d.files_alive` 和 `d.stats` 看看。",
                    f"{len(wrong)} of 4 predictions wrong; for example snippet {name}: right after the block "
                    f"`d.files_alive` is {real}, you predicted {said}. Run that snippet and print `d.files_alive` "
                    "and `d.stats`.")
