"""baukit: ``nethook.Trace`` / ``TraceDict`` put one forward hook on each traced layer when the object is *built*
(not in ``__enter__``) and remove it in ``__exit__`` / ``close()``; ``edit_output`` and ``stop=True`` act inside that
hook. Read from the source (not on PyPI)."""
from __future__ import annotations

from ..spec import Library

COMMIT = "9d51abd51ebf29769aecc38c4cbef459b731a36e"
SRC = f"https://github.com/davidbau/baukit/blob/{COMMIT}/baukit/nethook.py"
LIBRARY = Library(
    slug="baukit", name="baukit", status="source", category="interpretability and attribution",
    entry="with baukit.nethook.TraceDict(model, ['0', '2'], edit_output=fn, stop=True) as ret: model(x)",
    names=("Trace", "TraceDict", "StopForward", "retain_output", "retain_input", "retain_grad", "edit_output",
           "stop", "clone", "detach", "recursive_copy", "invoke_with_optional_args", "get_module",
           "replace_module", "set_requires_grad", "subsequence"),
    sources=(SRC + "#L50-L97", SRC + "#L99-L108", SRC + "#L129-L186", SRC + "#L189-L202", SRC + "#L205-L229",
             SRC + "#L395-L403"),
    why_source={"en": "baukit is not published on PyPI (installed from its GitHub repository); read at commit "
                      "9d51abd5 of 2024-02-22, the head of its main branch.",
                "zh": "baukit 没有发布到 PyPI（要从 GitHub 仓库安装）；按 2024-02-22 的提交 9d51abd5（main 分支的"
                      "最新提交）阅读源码。"},
    installs=({"where": "each traced layer (`Trace`: one; `TraceDict`: every name in `layers`)", "kind": "forward",
               "what": "`retain_hook`: applies `edit_output`, stores `.input` / `.output` (optionally cloned, "
                       "detached, with `retain_grad`), raises `StopForward` if `stop`, returns the output"},),
    order={"en": "`Trace.__init__` calls `module.register_forward_hook(retain_hook)`, so baukit's hook runs after "
                 "every forward hook already on that layer and before those registered later. Hooks registered "
                 "earlier see the layer's own output; `edit_output` replaces it for later hooks and the rest of "
                 "the model, and `.output` is the edited value. With `stop=True` the hook raises `StopForward` "
                 "after storing: forward hooks registered after baukit's on that layer do not run, nor does any "
                 "later module; `__exit__` swallows the exception. `TraceDict` registers in the order of "
                 "`layers` and removes in reverse.",
           "zh": "`Trace.__init__` 调用 `module.register_forward_hook(retain_hook)`，所以 baukit 的钩子排在该层上"
                 "已有的所有前向钩子之后、之后注册的钩子之前。先注册的钩子看到的是该层自己的输出；`edit_output` "
                 "替换后的值交给后面的钩子和模型其余部分，`.output` 存的也是修改后的值。`stop=True` 时钩子在保存"
                 "之后抛出 `StopForward`：该层上在 baukit 之后注册的前向钩子不会运行，后面的模块也不会运行；"
                 "`__exit__` 会吞掉这个异常。`TraceDict` 按 `layers` 的顺序注册，按相反顺序移除。"},
    words={
        "en": {"summary": "One plain forward hook per traced layer, registered in the constructor and removed by "
                          "`close()`, which `__exit__` calls. A `Trace` built without `with` (or kept after the "
                          "block by calling its constructor earlier) stays on the model until `close()`. "
                          "`edit_output=fn` (called as `fn(output, layer)` or with any subset of `output`, "
                          "`layer`, `inputs`) changes what the rest of the model gets; `retain_grad=True` keeps "
                          "the gradient on `.output` and passes a clone on; `stop=True` ends the forward after "
                          "the (last) traced layer by raising `StopForward`.",
               "remove": "Use it as a context manager, or call `trace.close()` / `trace_dict.close()`: each "
                         "removes its own handle (`registered_hook`). Nothing else is changed on the model.",
               "api": "No callback API of its own: `edit_output` runs inside baukit's forward hook, in the "
                      "layer's registration order against the user's hooks. A `StopForward` raised outside a "
                      "`Trace`/`TraceDict` block with `stop=True` (for example from a `Trace` that was never "
                      "entered) reaches the caller."},
        "zh": {"summary": "每个被追踪的层上挂一个普通的前向钩子，在构造函数里注册，由 `close()` 移除，`__exit__` "
                          "会调用 `close()`。不用 `with` 构造的 `Trace`（或在 `with` 之前就构造好的）会一直留在模型"
                          "上，直到调用 `close()`。`edit_output=fn`（以 `fn(output, layer)` 调用，也可以只接收 "
                          "`output`、`layer`、`inputs` 中的任意几个）改变模型后续部分拿到的值；`retain_grad=True` "
                          "在 `.output` 上保留梯度，并把一个副本传下去；`stop=True` 通过抛出 `StopForward` 在（最后"
                          "一个）被追踪的层之后结束前向。",
               "remove": "当作上下文管理器使用，或调用 `trace.close()` / `trace_dict.close()`：各自移除自己的句柄"
                         "（`registered_hook`）。模型上别的东西都不改。",
               "api": "没有自己的回调 API：`edit_output` 在 baukit 的前向钩子里运行，和用户钩子一样按该层的注册"
                      "顺序排队。在带 `stop=True` 的 `Trace`/`TraceDict` 块之外抛出的 `StopForward`（比如来自一个"
                      "从未进入 `with` 的 `Trace`）会一直传到调用方。"},
    },
)
