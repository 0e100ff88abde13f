"""tools/launch/pinned_links.py: links go to the pinned release's documentation and source (docs.pytorch.org/docs/2.15/,
github.com/pytorch/pytorch/blob/v2.15.0/), not to docs/stable or main, which move on to other versions."""
from __future__ import annotations

import json

from tools.launch import pinned_links

PINS = {"torch": "2.15.0", "torchvision": "0.29.2"}


def test_no_link_in_the_course_points_to_a_moving_version():
    found = {str(path): links for path in pinned_links.files() if (links := pinned_links.pin_file(path, PINS,
                                                                                                 write=False))}
    assert not found, f"{found}\n(python -m tools.launch.pinned_links fix pins them)"
    assert len(pinned_links.files()) > 40  # the notebooks, the README, the site's data, hooklab's modules


def test_the_pins_are_the_course_environments():
    assert pinned_links.pins() == PINS


def test_moving_links_are_pinned_and_stated_versions_left_alone():
    text = ("[a](https://pytorch.org/docs/stable/notes/autograd.html#backward-hooks-execution) "
            "https://docs.pytorch.org/docs/main/generated/torch.Tensor.register_hook.html "
            "https://pytorch.org/docs/master/x.html https://docs.pytorch.org/docs/2.9/old.html "
            "https://pytorch.org/vision/stable/models.html https://pytorch.org/tutorials/intermediate/x.html "
            "https://github.com/pytorch/pytorch/tree/main/torch/distributed https://github.com/pytorch/vision/blob/main/v.py")
    assert pinned_links.pin_text(text, PINS) == (
        "[a](https://docs.pytorch.org/docs/2.15/notes/autograd.html#backward-hooks-execution) "
        "https://docs.pytorch.org/docs/2.15/generated/torch.Tensor.register_hook.html "
        "https://docs.pytorch.org/docs/2.15/x.html https://docs.pytorch.org/docs/2.9/old.html "
        "https://docs.pytorch.org/vision/0.29/models.html https://pytorch.org/tutorials/intermediate/x.html "
        "https://github.com/pytorch/pytorch/tree/v2.15.0/torch/distributed "
        "https://github.com/pytorch/vision/blob/v0.29.2/v.py")
    assert pinned_links.moving_links(text)[0] == ("https://pytorch.org/docs/stable/notes/autograd.html"
                                                  "#backward-hooks-execution")
    assert len(pinned_links.moving_links(text)) == 6


def test_a_notebooks_markdown_is_pinned_and_its_code_and_outputs_are_not(tmp_path):
    link = "https://pytorch.org/docs/stable/autograd.html"
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": [f"See [autograd]({link}).\n", "More."]},
                    {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": [f"print('{link}')"],
                     "outputs": [{"output_type": "stream", "name": "stdout", "text": [link + "\n"]}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "99_x.ipynb"
    path.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    assert pinned_links.pin_file(path, PINS, write=True) == [link]
    after = json.loads(path.read_text(encoding="utf-8"))
    assert after["cells"][0]["source"] == ["See [autograd](https://docs.pytorch.org/docs/2.15/autograd.html).\n",
                                           "More."]
    assert after["cells"][1] == nb["cells"][1]  # nbval compares outputs: code and outputs stay as they are
    assert pinned_links.pin_file(path, PINS, write=False) == []
