"""torchaudio: registers no hook; ``Wav2Vec2Model.extract_features`` returns each transformer layer's output by
running the layers itself (``Transformer.get_intermediate_outputs``), which differs from what forward hooks on the
layers see during ``forward``. Read from the source: no torchaudio release imports beside torch 2.15."""
from __future__ import annotations

from ..spec import Library

SRC = "https://github.com/pytorch/audio/blob/34c52a67e8941bbd8e6adaca0eb0b9eabec11d78/src/torchaudio/models/wav2vec2/"
LIBRARY = Library(
    slug="torchaudio", name="torchaudio", status="source", category="model libraries",
    entry="torchaudio.models.wav2vec2_base().extract_features(waveforms, num_layers=None)",
    names=("wav2vec2_base", "Wav2Vec2Model", "extract_features", "get_intermediate_outputs", "Transformer",
           "Encoder", "layer_drop", "encoder_layer_drop", "layer_norm_first", "num_layers", "aux"),
    sources=(SRC + "model.py#L45-L85", SRC + "model.py#L87-L120", SRC + "components.py#L430-L463",
             SRC + "components.py#L503-L510", SRC + "model.py#L392-L437"),
    why_source={"en": "torchaudio 2.11.0, the newest release on PyPI, installs beside torch 2.15.0 but does not "
                      "import: it checks that it was built for the same CUDA as torch (13.0 against 13.2) and "
                      "raises. Read at the commit that release was built from (34c52a67).",
                "zh": "PyPI 上最新的 torchaudio 2.11.0 能装在 torch 2.15.0 旁边，但导入失败：它会检查自己和 torch "
                      "是否用同一版本的 CUDA 编译（13.0 对 13.2），不一致就报错。按该版本构建时的提交（34c52a67）"
                      "阅读源码。"},
    installs=(),
    order={"en": "`extract_features(waveforms, num_layers=k)` runs the feature extractor, the encoder's "
                 "preprocessing, then calls each transformer layer in turn (your forward hooks on a layer fire "
                 "there as in `forward`) and stops after `k` layers. Unlike `forward`, it never skips a layer "
                 "(`forward` in `train()` drops each layer with probability `layer_drop`, 0.1 for "
                 "`wav2vec2_base`, and a dropped layer's hooks do not fire), applies no final `layer_norm` "
                 "(`wav2vec2_base` has `layer_norm_first=False`, so `forward` normalises after the last layer) "
                 "and runs no `aux` head.",
           "zh": "`extract_features(waveforms, num_layers=k)` 先跑特征提取器和编码器的预处理，再依次调用各个 "
                 "transformer 层（层上的前向钩子照样触发，和 `forward` 里一样），跑完 `k` 层就停。与 `forward` "
                 "不同的是：它从不跳层（`forward` 在 `train()` 模式下以 `layer_drop` 的概率丢弃每一层，"
                 "`wav2vec2_base` 是 0.1，被丢弃的层的钩子不会触发），最后不做 `layer_norm`（`wav2vec2_base` 的 "
                 "`layer_norm_first=False`，`forward` 会在最后一层之后再归一化一次），也不经过 `aux` 输出头。"},
    words={
        "en": {"summary": "Registers no hook. `Wav2Vec2Model.extract_features` is the library's way to get each "
                          "transformer layer's output: a list, one tensor per layer, equal to what a forward hook "
                          "on `model.encoder.transformer.layers[i]` returns (the first element of its tuple "
                          "output). Its last element is not the encoder output of `forward` (no final "
                          "`layer_norm`), and in `train()` mode `forward` may skip layers while "
                          "`extract_features` never does. The `_get_feature_extractor` / `_get_encoder` functions "
                          "are model builders, not hook helpers.",
               "remove": "Nothing to remove; use `extract_features(..., num_layers=k)` instead of hooks when "
                         "you want layer outputs, or call `model.eval()` before relying on forward hooks on the "
                         "layers.",
               "api": "No hook API: `extract_features(waveforms, lengths=None, num_layers=None)` returns "
                      "`(list_of_layer_outputs, lengths)`."},
        "zh": {"summary": "不注册钩子。`Wav2Vec2Model.extract_features` 是这个库取各 transformer 层输出的办法："
                          "返回一个列表，每层一个张量，等于挂在 `model.encoder.transformer.layers[i]` 上的前向钩子"
                          "拿到的输出（其元组输出的第一个元素）。列表最后一个元素并不是 `forward` 里编码器的输出"
                          "（少了最后的 `layer_norm`）；在 `train()` 模式下 `forward` 可能跳过某些层，而 "
                          "`extract_features` 从不跳。`_get_feature_extractor` / `_get_encoder` 是搭建模型的函数，"
                          "与钩子无关。",
               "remove": "没有要移除的；想要各层输出就用 `extract_features(..., num_layers=k)` 代替钩子，"
                         "或者在依赖层上的前向钩子之前先调用 `model.eval()`。",
               "api": "没有钩子 API：`extract_features(waveforms, lengths=None, num_layers=None)` 返回 "
                      "`(各层输出的列表, lengths)`。"},
    },
    surprises=(
        {"fact": "source: " + SRC + "components.py#L430-L463",
         "en": "The last tensor of `extract_features` is not the encoder output of `forward` for `wav2vec2_base`: "
               "the final `layer_norm` is left out.",
         "zh": "对 `wav2vec2_base` 来说，`extract_features` 的最后一个张量并不是 `forward` 中编码器的输出："
               "少了最后那次 `layer_norm`。"},
    ),
)
