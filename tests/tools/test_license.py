"""The licenses: MIT for the code (LICENSE, as pyproject.toml says), CC BY 4.0 for the prose and figures
(LICENSE-prose.md, in both languages), and both files ship in hooklab's wheel (pyproject.toml's SPDX ``license``
and ``license-files``, PEP 639)."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
CC_BY = "https://creativecommons.org/licenses/by/4.0/"


def test_code_is_mit_as_pyproject_says():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the hooklab authors\n")
    assert "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE", "LICENSE-prose.md"]


def test_prose_and_figures_are_cc_by_in_both_languages():
    text = (ROOT / "LICENSE-prose.md").read_text(encoding="utf-8")
    english, chinese = text.split("\n---\n")
    assert "Creative Commons Attribution 4.0 International License (CC BY 4.0)" in english
    assert "知识共享署名 4.0 国际许可协议（CC BY 4.0）" in chinese
    for part in (english, chinese):
        assert f"<{CC_BY}>" in part and f"<{CC_BY}legalcode>" in part and "`LICENSE`" in part


def test_the_wheel_carries_both_license_files(tmp_path):
    source = tmp_path / "src"
    (source / "docs").mkdir(parents=True)
    for name in ("pyproject.toml", "docs/pypi.md", "LICENSE", "LICENSE-prose.md"):  # docs/pypi.md: the readme
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "hooklab", source / "hooklab", ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.build_wheel(sys.argv[1]))", str(tmp_path / "dist")],
                           cwd=source, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = tmp_path / "dist" / build.stdout.strip().splitlines()[-1]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    info = f"hooklab-{version}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"{info}/METADATA").decode()
    assert {f"{info}/licenses/LICENSE", f"{info}/licenses/LICENSE-prose.md"} <= set(names)
    assert "License-File: LICENSE\n" in metadata and "License-File: LICENSE-prose.md\n" in metadata
    assert "License-Expression: MIT\n" in metadata and "License :: " not in metadata
