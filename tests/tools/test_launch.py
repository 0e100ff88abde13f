"""tools/launch.py: the launch copies that leave the repository (the site's download button, Colab, Binder) start
with a cell that installs hooklab where it is missing. Here: what the cell and the launch branch's tree hold; the
cell itself runs in a fresh environment in tests/tools/test_package.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tomllib

from tools import launch

ROOT = Path(__file__).resolve().parents[2]

URL = "https://github.com/example-owner/hooklab"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_pins_are_the_course_environments_exact_versions():
    group = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["dependency-groups"]["course"]
    pins = launch.pins()
    assert pins == [spec for name in launch.RUNTIME for spec in group if spec.split("==")[0] == name]
    assert "torch==2.15.0" in pins and all("==" in p for p in pins)


def test_a_pyproject_without_an_exact_pin_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[dependency-groups]\ncourse = ["torch>=2.3"]\n', encoding="utf-8")
    with pytest.raises(launch.LaunchError, match="pins no exact version of torch, torchvision"):
        launch.pins(tmp_path / "pyproject.toml")


def test_requirement_names_the_repository_at_the_commit():
    assert launch.requirement(URL, COMMIT) == f"hooklab[course] @ git+{URL}@{COMMIT}"
    assert launch.requirement(URL, None) == f"hooklab[course] @ git+{URL}"
    assert launch.requirement(None, COMMIT) is None
    with pytest.raises(launch.LaunchError, match="git commit id"):
        launch.requirement(URL, "main; rm -rf /")


@pytest.mark.parametrize("lang, words", [("zh", "已经能导入 hooklab 时"), ("en", "Installs nothing where hooklab")])
def test_install_cell_says_what_it_does_in_the_notebooks_language(lang, words):
    cell = launch.install_cell(f"hooklab[course] @ git+{URL}@{COMMIT}", ["torch==2.15.0"], lang)
    source = cell["source"]
    assert cell["cell_type"] == "code" and cell["metadata"]["tags"] == ["hooklab-install", "remove-cell"]
    assert source.startswith("# ") and words in source
    assert f'HOOKLAB = "hooklab[course] @ git+{URL}@{COMMIT}"' in source and 'PINS = ["torch==2.15.0"]' in source
    assert '"-m", "pip", "install"' in source and "is installed already: nothing to install" in source
    compile(source, "<install cell>", "exec")  # valid Python
    without = launch.install_cell(None, ["torch==2.15.0"], lang)["source"]
    assert "pip install -e \\\".[course]\\\"" in without and '"-m", "pip"' not in without
    namespace: dict = {}
    with pytest.raises(ModuleNotFoundError, match=r"hooklab is not installed\. From a clone"):
        exec(without.replace('find_spec("hooklab")', 'find_spec("hooklab_not_here")'), namespace)
    assert namespace["HOOKLAB"] is None


def test_launch_copy_puts_the_cell_before_the_first_code_cell_once():
    nb = {"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-both"]}, "source": "# 01 · Title"},
                    {"cell_type": "code", "metadata": {}, "source": "import hooklab", "outputs": []}],
          "metadata": {"kernelspec": {"name": "hooklab", "display_name": "Python 3 (hooklab)"}}}
    copy = launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins())
    assert [c["cell_type"] for c in copy["cells"]] == ["markdown", "code", "code"]
    assert copy["cells"][1]["id"] == "hooklab-install" and copy["cells"][2]["source"] == "import hooklab"
    assert copy["metadata"]["kernelspec"]["name"] == "python3"
    assert nb["metadata"]["kernelspec"]["name"] == "hooklab" and len(nb["cells"]) == 2  # the input is untouched
    again = launch.launch_copy(copy, "en", launch.requirement(URL, None), launch.pins())
    assert len(again["cells"]) == 3 and f"git+{URL}\"" in again["cells"][1]["source"]  # replaced, not stacked


def test_launch_branch_tree_holds_the_copies_and_what_binder_builds(tmp_path):
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    for name in ("environment.yml", "postBuild", "pyproject.toml", "LICENSE", "LICENSE-prose.md"):
        shutil.copy2(ROOT / name, root / name)
    shutil.copytree(ROOT / "hooklab", root / "hooklab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "notebooks" / "01_tensor_hooks.ipynb", root / "notebooks")
    out = tmp_path / "launch"
    written = launch.write_tree(out, repository=URL, commit=COMMIT, root=root)
    assert sorted(p.relative_to(out).as_posix() for p in written) == ["en/01_tensor_hooks.ipynb",
                                                                      "zh/01_tensor_hooks.ipynb"]
    for lang in ("zh", "en"):
        nb = json.loads((out / lang / "01_tensor_hooks.ipynb").read_text(encoding="utf-8"))
        assert nb["metadata"]["hooklab_language"] == lang
        first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
        assert f"git+{URL}@{COMMIT}" in first_code["source"]
    assert "-e ." in (out / "environment.yml").read_text(encoding="utf-8")  # Binder installs this tree's hooklab
    assert (out / "hooklab" / "course" / "assets" / "induction_lm" / "model.safetensors").is_file()
    assert not (out / ".github").exists() and not (out / "notebooks").exists()  # no workflow runs on the branch
    assert COMMIT in (out / "README.md").read_text(encoding="utf-8")


def test_command_line_refuses_a_url_that_is_not_a_repository(tmp_path, capsys):
    assert launch.main([str(tmp_path / "out"), "--repository-url", "github.com/x"]) == 1
    assert "--repository-url should be https://HOST/OWNER/REPO" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
