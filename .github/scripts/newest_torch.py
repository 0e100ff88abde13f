"""The torch / torchvision pair for the scheduled ``./course matrix`` run, as GitHub step outputs.

    python -m pip install packaging
    python .github/scripts/newest_torch.py >> "$GITHUB_OUTPUT"     # prints torch=X and vision=Y

"The newest PyTorch": the newest torch release on PyPI that the newest torchvision release accepts (its
``requires_dist`` names torch with an exact pin in some releases, a lower bound in others), with that torchvision.
``TORCH`` and ``VISION`` in the environment (the workflow's manual-run inputs) name a pair instead; given both,
PyPI is not asked.
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

PYPI = "https://pypi.org/pypi/{}/json"


def torch_requirement(requires_dist: list[str] | None) -> Requirement | None:
    """torchvision's requirement on torch (not one that only an extra needs).

    >>> str(torch_requirement(["numpy", "torch==2.9.0", "pillow!=8.3.*,>=5.3.0"]).specifier)
    '==2.9.0'
    >>> str(torch_requirement(["torch (>=2.14.0)", "scipy ; extra == 'scipy'"]).specifier)
    '>=2.14.0'
    """
    for line in requires_dist or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name == "torch" and "extra" not in str(requirement.marker or ""):
            return requirement
    return None


def releases(pypi_json: dict) -> list[Version]:
    """The final (not pre-release, not yanked) versions in PyPI's JSON for a project."""
    found = []
    for text, files in pypi_json.get("releases", {}).items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if not version.is_prerelease and files and not all(f.get("yanked") for f in files):
            found.append(version)
    return found


def newest_pair(torchvision_json: dict, torch_json: dict) -> tuple[str, str]:
    """(torch, torchvision): the newest torchvision, and the newest torch it accepts.

    >>> vision = {"info": {"version": "0.29.2", "requires_dist": ["numpy", "torch>=2.14.0"]}}
    >>> torch = {"releases": {"2.14.0": [{}], "2.15.0": [{}], "2.16.0rc1": [{}], "2.15.1": [{"yanked": True}]}}
    >>> newest_pair(vision, torch)
    ('2.15.0', '0.29.2')
    >>> newest_pair({"info": {"version": "0.20.1", "requires_dist": ["torch (==2.5.1)"]}}, torch)
    ('2.5.1', '0.20.1')
    """
    info = torchvision_json["info"]
    requirement = torch_requirement(info.get("requires_dist"))
    if requirement is None:
        raise ValueError(f"torchvision {info['version']} on PyPI names no torch requirement; run the workflow "
                         "by hand with both inputs")
    pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
    if pins:
        return pins[0], info["version"]
    accepted = [v for v in releases(torch_json) if requirement.specifier.contains(v)]
    if not accepted:
        raise ValueError(f"no torch release on PyPI satisfies torchvision {info['version']}'s {requirement}")
    return str(max(accepted)), info["version"]


def fetch(project: str) -> dict:
    with urllib.request.urlopen(PYPI.format(project), timeout=60) as response:
        return json.load(response)


def main() -> int:
    torch, vision = os.environ.get("TORCH", "").strip(), os.environ.get("VISION", "").strip()
    if bool(torch) != bool(vision):
        print("error: give both TORCH and VISION, or neither (then the newest pair on PyPI is used)", file=sys.stderr)
        return 2
    if not torch:
        try:
            torch, vision = newest_pair(fetch("torchvision"), fetch("torch"))
        except (OSError, ValueError) as exc:
            print(f"error: could not find the newest torch / torchvision pair on PyPI: {exc}", file=sys.stderr)
            return 1
    print(f"torch={torch}")
    print(f"vision={vision}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
