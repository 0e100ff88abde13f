"""Hints and reference solutions of notebook 06 (saved-tensor hooks)."""
import torch

HINTS = {
    "06.1": ("在 pack 钩子里取 `key = t.untyped_storage().data_ptr()`，跳过参数、缓冲区和 `x` 的存储，"
             "每个新的 key 只加一次 `t.untyped_storage().nbytes()`，最后 `return t.detach()`。",
             "in the pack hook take `key = t.untyped_storage().data_ptr()`, skip the storages of the "
             "parameters, the buffers and `x`, add `t.untyped_storage().nbytes()` once per new key, and "
             "`return t.detach()`."),
    "06.2": ("阈值用 `t.numel() * t.element_size()`（字节）比较；先 `torch.save` 成功，再创建那个会在 `__del__` "
             "里删除文件的对象（或者删除时容忍 `FileNotFoundError`）；解包时只读，不删。",
             "compare `t.numel() * t.element_size()` (bytes) with the threshold; call `torch.save` first and "
             "create the object that deletes the file in `__del__` only once it succeeded (or tolerate "
             "`FileNotFoundError` when deleting); unpack only reads, never deletes."),
    "06.3": ("任何时刻只有最内层的一对钩子生效，而且要看的是运算**执行**时哪一对最靠内；`exp` 保存它的输出，"
             "`sin`、`cos` 保存它们的输入；同一块存储被几个运算保存时，`SaveOnDisk` 只写一次。",
             "only the innermost pair of hooks applies, and what counts is which pair is innermost when the op "
             "**runs**; `exp` saves its output, `sin` and `cos` save their input; `SaveOnDisk` writes a "
             "storage saved by several ops only once."),
}

# [06.1]
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

# [06.2]
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

# [06.3]
my_files = [1, 1, 2, 0]
