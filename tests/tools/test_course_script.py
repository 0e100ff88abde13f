"""`course` (the shell script) on a machine that is not Debian: its fallbacks, run with a PATH that has only the tools
a stock macOS has (no sha256sum, flock, apt-get, fc-list, dot or chromium), and `uname` answering Darwin where asked.

The functions are sourced (COURSE_SOURCE_ONLY=1 stops the script before it dispatches a command); nothing is installed.
These tests are all the macOS testing there is: CI runs on Linux.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash")
# what a stock macOS has too (python3: the project needs it anyway); sha256sum, flock, apt-get, fc-list are not here
PORTABLE = ("cat", "cut", "sed", "awk", "grep", "id", "dirname", "basename", "sleep", "env", "uname")


def make_bin(tmp_path: Path, *, uname: str | None = None, uid: int | None = None, extra: dict | None = None) -> Path:
    """A folder of symlinks to the portable tools, plus fakes: `uname -s` answering ``uname``, `id -u` answering
    ``uid``, and ``extra`` {name: shell script body}."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in PORTABLE:
        os.symlink(shutil.which(tool), bin_dir / tool)
    os.symlink(Path(sys.executable).resolve(), bin_dir / "python3")   # the real interpreter, not a shim
    fakes = dict(extra or {})
    if uname is not None:
        fakes["uname"] = f'echo {uname}'
    if uid is not None:
        fakes["id"] = f'echo {uid}'
    for name, body in fakes.items():
        (bin_dir / name).unlink(missing_ok=True)
        (bin_dir / name).write_text(f"#!{BASH}\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def course_functions(script: str, bin_dir: Path, timeout: float = 60, **env) -> subprocess.CompletedProcess:
    """Run ``script`` in bash after sourcing `course`, with PATH = ``bin_dir`` only."""
    return subprocess.run([BASH, "-c", f"COURSE_SOURCE_ONLY=1 source ./course\n{script}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/tmp"), **env})


def test_the_fake_path_really_hides_the_linux_tools(tmp_path):
    bin_dir = make_bin(tmp_path)
    result = course_functions("for t in sha256sum shasum flock apt-get fc-list dot; do command -v $t || true; done",
                              bin_dir)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


@pytest.mark.parametrize("tool", ["shasum", "python3"])
def test_sha256_without_sha256sum(tmp_path, tool):
    """macOS has shasum (Perl); without it too, Python computes the same hash."""
    log = tmp_path / "used"
    extra = {}
    if tool == "shasum":
        real = shutil.which("shasum")
        if real is None:
            pytest.skip("this machine has no shasum to stand in for macOS's")
        extra["shasum"] = f'echo shasum >> "{log}"; exec {real} "$@"'
    bin_dir = make_bin(tmp_path, extra=extra)
    data = "hooklab 钩子\n" * 1000
    result = course_functions(f"printf '%s' '{data}' | sha256_stdin", bin_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == hashlib.sha256(data.encode()).hexdigest()
    assert log.exists() == (tool == "shasum")


def environment_section() -> bytes:
    text = (ROOT / "course").read_bytes()
    start = text.index(b"\n# >>> environment") + 1
    end = text.index(b"\n", text.index(b"\n# <<< environment") + 1) + 1
    return text[start:end]


def test_the_stamp_is_the_same_whichever_tool_hashes(tmp_path):
    """The .venv stamp: uv.lock, pyproject.toml and the script's environment section; a Mac computes the same one
    (so an unchanged environment is not rebuilt), and an edit outside the section does not change it."""
    expected = hashlib.sha256((ROOT / "uv.lock").read_bytes() + (ROOT / "pyproject.toml").read_bytes()
                              + environment_section()).hexdigest()
    assert b"uv sync --locked" in environment_section() and b"UV_VERSION=" in environment_section()
    no_tools = course_functions("stamp_now", make_bin(tmp_path))
    assert no_tools.returncode == 0, no_tools.stderr
    assert no_tools.stdout.strip() == expected
    linux = subprocess.run([BASH, "-c", "COURSE_SOURCE_ONLY=1 source ./course; stamp_now"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert linux.stdout.strip() == expected


def test_without_dot_on_macos_it_says_what_to_install_with_homebrew(tmp_path):
    result = course_functions("ensure_dot; echo not reached", make_bin(tmp_path, uname="Darwin", uid=501))
    assert result.returncode == 1 and "not reached" not in result.stdout
    assert "graphviz's 'dot' program is missing. Install it with Homebrew" in result.stderr
    assert "    brew install graphviz" in result.stderr and "apt-get" not in result.stderr


def test_without_root_apt_get_is_never_run_and_the_message_names_each_system(tmp_path):
    called = tmp_path / "apt-called"
    bin_dir = make_bin(tmp_path, uname="Linux", uid=1000, extra={"apt-get": f'touch "{called}"'})
    result = course_functions("ensure_dot", bin_dir)
    assert result.returncode == 1 and not called.exists()
    for line in ("Debian/Ubuntu: sudo apt-get install graphviz", "Fedora:        sudo dnf install graphviz",
                 "macOS:         brew install graphviz"):
        assert line in result.stderr


def test_as_root_with_apt_get_it_installs_graphviz(tmp_path):
    log = tmp_path / "apt"
    bin_dir = make_bin(tmp_path, uname="Linux", uid=0, extra={"apt-get": f'echo "$*" >> "{log}"'})
    result = course_functions("ensure_dot && echo ok", bin_dir)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq graphviz"]


def test_an_old_python3_is_refused_with_a_homebrew_hint_on_macos(tmp_path):
    """macOS's own /usr/bin/python3 is 3.9: say what to do instead of letting uv fail on it."""
    bin_dir = make_bin(tmp_path, uname="Darwin", uid=501)
    (bin_dir / "python3").unlink()
    (bin_dir / "python3").write_text(f'#!{BASH}\n[ "$1" = --version ] && {{ echo "Python 3.9.6"; exit 0; }}; exit 1\n')
    (bin_dir / "python3").chmod(0o755)
    result = course_functions("ensure_python; echo not reached", bin_dir)
    assert result.returncode == 1 and "not reached" not in result.stdout
    assert "python3 is Python 3.9.6; the course needs 3.11 or newer:" in result.stderr
    assert "brew install python@3.12" in result.stderr
    (tmp_path / "real").mkdir()
    assert course_functions("ensure_python && echo ok", make_bin(tmp_path / "real")).stdout.strip() == "ok"


def test_as_root_with_apt_get_it_installs_the_browser_and_a_cjk_font(tmp_path):
    log = tmp_path / "apt"
    bin_dir = make_bin(tmp_path, uname="Linux", uid=0, extra={"apt-get": f'echo "$*" >> "{log}"'})
    result = course_functions(f'BROWSERS=("{tmp_path}/none"); ensure_browser; echo "chromium=$HOOKLAB_CHROMIUM"',
                              bin_dir)
    assert result.returncode == 0 and result.stdout.strip() == "chromium=/usr/bin/chromium", result.stderr
    assert log.read_text().splitlines() == ["update -qq",
                                            "install -y -qq --no-install-recommends chromium fonts-noto-cjk"]


def test_browser_tests_on_macos_without_chromium_are_skipped_with_a_homebrew_hint(tmp_path):
    result = course_functions(f'BROWSERS=("{tmp_path}/no-such-app"); ensure_browser; '
                              'echo "chromium=${HOOKLAB_CHROMIUM:-}"', make_bin(tmp_path, uname="Darwin", uid=501))
    assert result.returncode == 0 and result.stdout.strip() == "chromium="
    assert "the browser tests will be skipped" in result.stderr and "brew install --cask chromium" in result.stderr


def test_a_browser_named_by_hooklab_chromium_is_used_and_exported(tmp_path):
    browser = tmp_path / "Chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    result = course_functions('ensure_browser; echo "chromium=$HOOKLAB_CHROMIUM"',
                              make_bin(tmp_path, uname="Darwin", uid=501), HOOKLAB_CHROMIUM=str(browser))
    assert result.returncode == 0 and result.stdout.strip() == f"chromium={browser}" and result.stderr == ""


def test_without_flock_two_builds_still_take_turns(tmp_path):
    """macOS has no flock(1): Python takes the same lock on the shell's fd 9, which stays held until the shell
    exits. A second `course` started meanwhile waits for it."""
    bin_dir = make_bin(tmp_path)
    log = tmp_path / "log"
    work = tmp_path / "checkout"
    work.mkdir()
    os.symlink(ROOT / "course", work / "course")   # the lock file .course.lock is made next to the script's cwd
    script = ('cd "{work}"; lock_env_build; echo "{name} locked $(python3 -c "import time; print(time.time())")" '
              '>> "{log}"; sleep {hold}; echo "{name} done" >> "{log}"')
    env = {"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/tmp")}

    def start(name, hold):
        return subprocess.Popen([BASH, "-c", "COURSE_SOURCE_ONLY=1 source ./course\n"
                                 + script.format(work=work, name=name, log=log, hold=hold)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = start("first", 2)
    deadline = time.monotonic() + 30
    while not (log.exists() and "first locked" in log.read_text()):
        assert first.poll() is None and time.monotonic() < deadline, "the first shell never took the lock"
        time.sleep(0.05)
    second = start("second", 0)
    try:
        assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0, second.stderr.read()
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    events = [line.split()[:2] for line in log.read_text().splitlines()]
    assert events == [["first", "locked"], ["first", "done"], ["second", "locked"], ["second", "done"]]


def test_help_lists_every_command():
    script = (ROOT / "course").read_text(encoding="utf-8")
    dispatch = script[script.index('case "$cmd" in'):]
    commands = [c for label in re.findall(r"^    ([a-z][a-z |-]*)\)$", dispatch, re.MULTILINE)
                for c in label.replace(" ", "").split("|") if not c.startswith("-") and c != "help"]
    assert {"lab", "reset", "test", "regen", "export", "site", "slides", "handout", "rerun", "matrix"} <= set(commands)
    shown = subprocess.run([str(ROOT / "course"), "help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and not shown.stdout.startswith("#!")
    for command in set(commands) - set(OLD_NAMES):
        assert f"./course {command} " in shown.stdout, command
    for old in OLD_NAMES:  # an old name is told as the new one's old name, and not offered
        assert f"`./course {old}`, its name before, still runs it" in shown.stdout
    unknown = subprocess.run([str(ROOT / "course"), "frobnicate"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
    assert unknown.returncode == 1 and "unknown command 'frobnicate'" in unknown.stderr
    assert all(command in unknown.stderr for command in set(commands) - set(OLD_NAMES))
    assert not any(re.search(rf"\b{old}\b", unknown.stderr) for old in OLD_NAMES)


OLD_NAMES = {"matrix": "rerun"}  # a command's name before this release -> its name now (kept for one release)


UV_VERSION = re.search(r"^UV_VERSION=(\S+)$", (ROOT / "course").read_text(encoding="utf-8"), re.MULTILINE).group(1)


def fake_uv(checkout: Path) -> Path:
    """``checkout/.tools/bin/uv``, answering ``--version`` as the script's uv does."""
    uv = checkout / ".tools" / "bin" / "uv"
    uv.parent.mkdir(parents=True, exist_ok=True)
    uv.write_text(f'#!{BASH}\necho "uv {UV_VERSION}"\n')
    uv.chmod(0o755)
    return uv


def current_checkout(tmp_path: Path, extra: dict | None = None) -> tuple[Path, dict]:
    """A copy of the project's environment files in ``tmp_path`` with a fake .venv (its python prints what it was
    asked to run) and a current stamp, so nothing is built; and the environment to run its ./course in (PATH: the
    portable tools, a `dot`, ``extra``)."""
    for name in ("course", "uv.lock", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!{BASH}\necho "python $*"\n')
    python.chmod(0o755)
    bin_dir = make_bin(tmp_path, extra={"dot": "exit 0", **(extra or {})})
    os.symlink(BASH, bin_dir / "bash")  # ./course through its #!/usr/bin/env bash
    env = {"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/tmp")}
    stamp = subprocess.run([BASH, "-c", "COURSE_SOURCE_ONLY=1 source ./course; stamp_now"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60, env=env)
    (tmp_path / ".venv" / ".course-stamp").write_text(stamp.stdout)
    return tmp_path, env


def pip_standing_in(log: Path, *, fails: bool = False) -> str:
    """A python3 that runs everything with the real interpreter but ``-m venv`` and ``-m pip``, which it logs: the
    venv is a folder, the pip install of uv puts a fake uv there (or fails, with ``fails``)."""
    real, mkdir, cp = Path(sys.executable).resolve(), shutil.which("mkdir"), shutil.which("cp")
    uv = fake_uv(log.parent / "uv-to-install")
    install = "exit 1" if fails else f'{cp} "{uv}" .tools/bin/uv'
    return (f'case "$1 $2" in\n'
            f'  "-m venv") echo "venv" >> "{log}"; {mkdir} -p .tools/bin ;;\n'
            f'  "-m pip") echo "pip $*" >> "{log}"; {install} ;;\n'
            f'  *) exec {real} "$@" ;;\n'
            f'esac')


@pytest.mark.parametrize("command, args", [("rerun", ["--torch", "2.15.0"]), ("profiles", ["--with", "peft==0.15.0"])])
def test_a_command_that_runs_uv_installs_it_where_the_environment_is_current_but_uv_is_missing(tmp_path, command,
                                                                                              args):
    """ensure_env installs uv only when it builds .venv: with a current stamp and no .tools/bin/uv, ./course rerun
    and ./course profiles install it (their side environments need it), once, and then run."""
    log = tmp_path / "installed"
    checkout, env = current_checkout(tmp_path, extra={"python3": pip_standing_in(log),
                                                      "rm": f'exec {shutil.which("rm")} "$@"'})
    ran = subprocess.run([str(checkout / "course"), command, *args], cwd=checkout, capture_output=True, text=True,
                         timeout=60, env=env)
    assert ran.returncode == 0, ran.stderr
    assert f"installing uv {UV_VERSION} into .tools/" in ran.stderr and "building" not in ran.stderr
    assert log.read_text().splitlines() == ["venv", f"pip -m pip --python .tools/bin/python install -q uv=={UV_VERSION}"]
    assert (checkout / ".tools" / "bin" / "uv").exists()
    assert ran.stdout.strip() == f"python -m tools.{command} {' '.join(args)}"
    again = subprocess.run([str(checkout / "course"), command, *args], cwd=checkout, capture_output=True, text=True,
                           timeout=60, env=env)
    assert again.returncode == 0 and again.stderr == "" and len(log.read_text().splitlines()) == 2


def test_where_uv_cannot_be_installed_the_command_is_told_so_and_goes_on(tmp_path):
    """Offline, say: the warning names what failed; the command goes on (a re-run's --report-only needs no uv) and
    says what is missing where it needs uv (tools/rerun/command.py's needs_uv)."""
    checkout, env = current_checkout(tmp_path, extra={"python3": pip_standing_in(tmp_path / "log", fails=True),
                                                      "rm": f'exec {shutil.which("rm")} "$@"'})
    ran = subprocess.run([str(checkout / "course"), "rerun", "--torch", "2.15.0", "--report-only"], cwd=checkout,
                         capture_output=True, text=True, timeout=60, env=env)
    assert ran.returncode == 0, ran.stderr
    assert "error: could not install uv" in ran.stderr
    assert f"warning: uv {UV_VERSION} could not be installed into .tools/ (see above): ./course rerun stops where it " \
           "needs uv" in ran.stderr
    assert ran.stdout.strip() == "python -m tools.rerun --torch 2.15.0 --report-only"


@pytest.mark.parametrize("old, new", OLD_NAMES.items())
def test_an_old_command_name_says_the_new_one_and_runs_it(tmp_path, old, new):
    """In a copy of the project's environment files with a fake .venv (its python prints what it was asked to run),
    a current stamp and uv, so nothing is installed: the old name prints a note naming the new one, then runs it."""
    checkout, env = current_checkout(tmp_path)
    fake_uv(checkout)
    ran = subprocess.run([str(tmp_path / "course"), old, "--torch", "2.15.0"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env=env)
    assert ran.returncode == 0, ran.stderr
    assert f"'./course {old}' is now './course {new}'" in ran.stderr and "building" not in ran.stderr
    assert ran.stdout.strip() == f"python -m tools.{new} --torch 2.15.0"
