"""pyproject.toml's promises, checked against uv.lock: ``pip install "hooklab[course]"`` gets at most the versions the
course is verified on, and the Python versions stated anywhere are the ones the locked torch has builds for."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LOCK = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))

pytestmark = pytest.mark.timeout(60)


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(name: str) -> list[Version]:
    return [Version(p["version"]) for p in LOCK["package"] if normal(p["name"]) == normal(name)]


def newer_than(version: Version) -> list[Version]:
    """Releases just past ``version``: a post-release, the next patch, minor and major."""
    major, minor, micro = (list(version.release) + [0, 0])[:3]
    return [Version(f"{version.base_version}.post1"), Version(f"{major}.{minor}.{micro + 1}"),
            Version(f"{major}.{minor + 1}.0"), Version(f"{major + 1}.0.0")]


EXTRAS = [(extra, Requirement(spec)) for extra, specs in PROJECT["project"]["optional-dependencies"].items()
          for spec in specs]


@pytest.mark.parametrize("extra, requirement", EXTRAS, ids=[f"{e}-{r.name}" for e, r in EXTRAS])
def test_each_extra_allows_the_locked_version_and_nothing_newer(extra, requirement):
    versions = locked(requirement.name)
    assert len(versions) == 1, f"uv.lock pins {requirement.name} {versions}: one version is what was verified"
    verified = versions[0]
    assert requirement.specifier.contains(verified), f"hooklab[{extra}]'s {requirement} refuses the verified {verified}"
    newer = [str(v) for v in newer_than(verified) if requirement.specifier.contains(v, prereleases=True)]
    assert not newer, f"hooklab[{extra}]'s {requirement} allows {', '.join(newer)}, newer than the verified {verified}"


def test_every_locked_course_package_of_the_extra_is_in_it():
    # the extra names the packages hooklab.course imports; each of them, and torch, is bounded above (above)
    course = {normal(Requirement(s).name) for s in PROJECT["project"]["optional-dependencies"]["course"]}
    assert {"torch", "torchvision", "transformers", "safetensors", "peft", "matplotlib", "nbformat",
            "nbconvert"} <= course
    hooklab, = [p for p in LOCK["package"] if p["name"] == "hooklab"]
    locked_extra = {normal(d["name"]) for d in hooklab["optional-dependencies"]["course"]}
    assert locked_extra == course, "uv.lock is older than pyproject.toml: run .tools/bin/uv lock"


def test_a_bound_that_lets_a_newer_release_in_fails_here():
    # the check above can fail: transformers' old bound (`>=5.0`) let pip pick 5.24.0
    old = Requirement("transformers>=5.0")
    assert [str(v) for v in newer_than(Version("5.23.0")) if old.specifier.contains(v)] == [
        "5.23.0.post1", "5.23.1", "5.24.0", "6.0.0"]


def python_versions_with_a_torch_wheel() -> list[tuple[int, int]]:
    torch, = [p for p in LOCK["package"] if p["name"] == "torch"]
    tags = [re.search(r"-cp3(\d+)-cp3\1-", w["url"]) for w in torch["wheels"]]
    return sorted({(3, int(t.group(1))) for t in tags if t})


def test_supported_pythons_are_those_the_locked_torch_has_builds_for():
    wheels = python_versions_with_a_torch_wheel()
    requires = PROJECT["project"]["requires-python"]
    assert requires == f">={wheels[0][0]}.{wheels[0][1]}", f"torch's oldest build is for {wheels[0]}"
    classified = sorted(tuple(map(int, c.rsplit(" ", 1)[1].split("."))) for c in PROJECT["project"]["classifiers"]
                        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    # the classifiers: every Python with a torch build that the lock resolves for (tool.uv's environments)
    upper = int(re.search(r"python_full_version < '3\.(\d+)'", PROJECT["tool"]["uv"]["environments"][0]).group(1))
    assert classified == [v for v in wheels if v[1] < upper], (classified, wheels)
    assert (3, 10) not in wheels


def test_every_page_that_states_a_python_version_states_the_same_one():
    oldest = PROJECT["project"]["requires-python"].removeprefix(">=")
    sentences = {
        "tools/site/landing/en.md": rf"with Python {re.escape(oldest)} or newer",
        "tools/site/landing/zh.md": rf"Python {re.escape(oldest)} 或更新",
        "README.md": rf"Python {re.escape(oldest)}\+",
        "docs/pypi.md": rf"Python {re.escape(oldest)} or newer",
    }
    for path, sentence in sentences.items():
        text = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(sentence, text), f"{path} should say {sentence!r}"
        stale = re.findall(r"Python 3\.(?:[0-9]|10)(?!\d)\b[^\n]{0,20}", text)
        assert not stale, f"{path} still names an older Python: {stale}"
