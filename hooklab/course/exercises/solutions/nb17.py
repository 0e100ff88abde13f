"""Hints and reference solutions of notebook 17 (the hook behaviour matrix)."""

HINTS = {
    "17.1": ("先跳过 `status` 为 \"n/a\" 的记录；剩下的里，`calls == 0` 且 `error` 为空的就是沉默的格子。最后 `sorted(...)`。",
             "skip the records whose `status` is \"n/a\"; of the others, those with `calls == 0` and no `error` are the "
             "silent ones. `sorted(...)` at the end."),
    "17.2": ("照着第 5 节的上下文写：`rig = h.rig()`、`h.install(rig)`、前向，然后 `for handle in rig.handles: "
             "handle.remove()`，再反向，最后用 `h.fact(...)` 记下这次运行的结果（输出和梯度：检查靠它们判断返回值的作用）。",
             "follow section 5's contexts: `rig = h.rig()`, `h.install(rig)`, the forward, then `for handle in "
             "rig.handles: handle.remove()`, then the backward, and last record what the run produced with "
             "`h.fact(...)` (the output and the gradients: the check judges what a return value does by them)."),
    "17.3": ("第 3.6、4 节：叶子张量的钩子看到求和后的梯度；`model.apply` 按路径访问；检查点在反向时重算（直到反向需要的最后一个张量）。",
             "sections 3.6 and 4: a leaf's hook sees the summed gradient; `model.apply` visits per path; a checkpoint "
             "recomputes in backward (up to the last tensor backward needs)."),
}

# [17.1]
def silent_cells(cells):
    return sorted(key for key, record in cells.items()
                  if record["status"] == "observed" and record["calls"] == 0 and not record["error"])

# [17.2]
def remove_before_backward(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    for handle in rig.handles:          # the handles the family's registration returned
        handle.remove()
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))

# [17.3]
my_calls = {"param-hook@used-twice": 1, "full-backward-hook@used-twice": 2, "forward-hook@apply": 2,
            "forward-hook@checkpoint": 2}
