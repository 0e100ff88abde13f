"""`./course lab [--lang zh|en|both] [JupyterLab options]`: start JupyterLab on the course, quietly.

- It serves the learner's working copies, never the tracked notebooks (``tools/classroom/workcopies.py``): ``work/zh-en/``
  (``--lang both``, the default) or the one-language copies ``work/zh/`` / ``work/en/`` (``--lang zh|en``; exported as
  ``./course export`` does). Missing copies are made, a copy the learner changed is never overwritten, and the start
  says when the course has a newer version of one (``./course reset NN`` gives a fresh copy, keeping the old one).
  With ``--lang zh|en`` the course's messages (exercise verdicts, hints, solutions) follow the language too: the
  kernels inherit ``HOOKLAB_LANG``.
- A root folder given by the user (``--ServerApp.root_dir=DIR``, ``--notebook-dir=DIR``) replaces the default
  instead of clashing with it ("root_dir only accepts one value").
- Quieter start: kernels get CurveZMQ transport encryption (no "Kernel is running over TCP without
  encryption" warning on every kernel start), the served notebooks are signed as trusted (no "Notebook ... is
  not trusted"; they hold only text and PNG outputs), and JupyterLab's settings defaults (``build/lab/<lang>/config/``,
  read through ``JUPYTER_CONFIG_PATH``) turn off the news pop-up and pick the interface language
  (Chinese with ``--lang zh``, from the language pack in the lock). Two lines of noise are gone from the terminal:
  jupyter_lsp's "Skipped non-installed server(s): ..." (``--LanguageServerManager.autodetect=False``: the course
  installs no language server; pass ``--LanguageServerManager.autodetect=True`` to look for yours), and tornado's
  "The websocket_ping_timeout (90000) cannot be longer than the websocket_ping_interval (30000)" (a logging filter
  in ``jupyter_server_config.py`` next to the settings defaults; see :data:`SERVER_CONFIG`).

``--print-command`` prints the command and the environment variables it sets instead of starting.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .workcopies import copies_dir, move_old_copies, prepare_copies, shown

ROOT = Path(__file__).resolve().parents[2]
LANGS = ("zh", "en", "both")
# JupyterLab locale per course language (None: JupyterLab's own default)
LOCALES = {"zh": "zh_CN", "en": "en", "both": None}
ROOT_OPTIONS = ("--ServerApp.root_dir", "--notebook-dir", "--ServerApp.notebook_dir", "--NotebookApp.notebook_dir",
                "--root-dir")


class UsageError(Exception):
    pass


@dataclass
class LabPlan:
    lang: str
    root_dir: Path                # the folder JupyterLab serves
    argv: list[str]               # the jupyter lab command line
    env: dict[str, str]           # variables set on top of the caller's environment
    copies: bool                  # root_dir is the working copies' folder: make the missing copies first
    settings_dir: Path            # holds labconfig/default_setting_overrides.json
    notes: list[str] = field(default_factory=list)


def split_lang(args: list[str]) -> tuple[str, list[str], bool]:
    """Take ``--lang X`` / ``--lang=X`` and ``--print-command`` out of ``args``."""
    lang, rest, print_only = "both", [], False
    given: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--lang" or arg.startswith("--lang="):
            if arg == "--lang":
                if i + 1 >= len(args):
                    raise UsageError("--lang needs a value: zh, en or both")
                value, i = args[i + 1], i + 1
            else:
                value = arg.split("=", 1)[1]
            if value not in LANGS:
                raise UsageError(f"--lang must be zh, en or both, got {value!r}")
            if given is not None:
                raise UsageError(f"--lang was given twice ({given} and {value}): one lab serves one language; start "
                                 "a second lab for the other")
            lang = given = value
        elif arg == "--print-command":
            print_only = True
        else:
            rest.append(arg)
        i += 1
    return lang, rest, print_only


def user_root(args: list[str]) -> str | None:
    """The root folder the user passed, if any (``--opt=DIR`` or ``--opt DIR``)."""
    for i, arg in enumerate(args):
        for option in ROOT_OPTIONS:
            if arg.startswith(option + "="):
                return arg.split("=", 1)[1]
            if arg == option and i + 1 < len(args):
                return args[i + 1]
    return None


def settings_overrides(lang: str) -> dict:
    """JupyterLab settings defaults for the course (the learner's own settings still win)."""
    overrides: dict = {
        # "Would you like to get notified about official Jupyter news?": no, and no update checks
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    }
    if LOCALES[lang]:
        overrides["@jupyterlab/translation-extension:plugin"] = {"locale": LOCALES[lang]}
    return overrides


def plan(args: list[str], *, root: Path = ROOT, is_root_user: bool | None = None,
         has_curve: bool | None = None) -> tuple[LabPlan, bool]:
    """The command, environment and preparation for ``./course lab ARGS``; also whether to only print it."""
    lang, rest, print_only = split_lang(args)
    given_root = user_root(rest)
    if given_root is not None and lang != "both":
        raise UsageError(f"--lang {lang} serves {shown(copies_dir(root, lang), root)}/; do not also give a root "
                         f"folder ({given_root})")
    copies = given_root is None
    if given_root is not None:
        root_dir = (root / given_root) if not Path(given_root).is_absolute() else Path(given_root)
    else:
        root_dir = copies_dir(root, lang)
    settings_dir = root / "build" / "lab" / lang
    argv = [str(root / ".venv" / "bin" / "jupyter"), "lab"]
    if given_root is None:
        argv.append(f"--ServerApp.root_dir={root_dir}")
    if has_curve is None:
        import zmq
        has_curve = bool(zmq.has("curve"))
    if has_curve:
        argv.append("--KernelManager.transport_encryption=auto")
    argv.append("--LanguageServerManager.autodetect=False")  # no "Skipped non-installed server(s): <19 names>"
    if is_root_user is None:
        is_root_user = hasattr(os, "getuid") and os.getuid() == 0
    if is_root_user and "--allow-root" not in rest:
        argv.append("--allow-root")  # containers and CI machines often run as root
    argv += rest
    config_path = [str(settings_dir / "config")]
    if os.environ.get("JUPYTER_CONFIG_PATH"):
        config_path.append(os.environ["JUPYTER_CONFIG_PATH"])
    env = {"HOOKLAB_LANG": lang, "JUPYTER_CONFIG_PATH": os.pathsep.join(config_path)}
    return LabPlan(lang, root_dir, argv, env, copies, settings_dir), print_only


# Jupyter Server config (Python: a logging filter cannot be given as JSON), read from JUPYTER_CONFIG_PATH.
SERVER_CONFIG = '''\
# Written by tools/classroom/lab.py for ./course lab (rewritten at every start). Your own Jupyter config still applies.
import logging


class DropPingTimeoutWarning(logging.Filter):
    """jupyter_server 2.x hands its websocket ping settings, in milliseconds (30000 / 90000), to tornado, which reads
    seconds and warns once per server that the timeout exceeds the interval (jupyter_server issue #1612). The
    pings work as they always did; only this warning is dropped."""

    def filter(self, record):
        return not record.getMessage().startswith("The websocket_ping_timeout (")


logging.getLogger("tornado.general").addFilter(DropPingTimeoutWarning())
'''


def write_settings(settings_dir: Path, lang: str) -> Path:
    """``labconfig/default_setting_overrides.json`` under ``settings_dir`` (JupyterLab reads it from every
    folder of ``JUPYTER_CONFIG_PATH``), and the server config :data:`SERVER_CONFIG` next to it."""
    path = settings_dir / "config" / "labconfig" / "default_setting_overrides.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings_overrides(lang), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (settings_dir / "config" / "jupyter_server_config.py").write_text(SERVER_CONFIG, encoding="utf-8")
    return path


def trust(notebooks: list[Path]) -> None:
    """Sign the served notebooks in the user's Jupyter signature store, as saving them in the lab would."""
    import nbformat
    from nbformat.sign import NotebookNotary

    notary = NotebookNotary()
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        if not notary.check_signature(nb):
            notary.sign(nb)


def prepare(lab: LabPlan, *, root: Path = ROOT) -> list[str]:
    notes = []
    if lab.copies:
        notes += move_old_copies(lab.lang, root=root)
        notes += prepare_copies(lab.lang, root=root)
    write_settings(lab.settings_dir, lab.lang)
    if lab.root_dir.is_dir():
        try:
            trust(sorted(lab.root_dir.glob("*.ipynb")))
        except Exception as exc:  # a broken signature store must not stop the lab
            notes.append(f"could not mark the notebooks as trusted ({type(exc).__name__}: {exc})")
    return notes


def main(args: list[str]) -> int:
    try:
        lab, print_only = plan(args)
    except UsageError as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 2
    if print_only:
        for name, value in sorted(lab.env.items()):
            print(f"{name}={shlex.quote(value)}")
        print(shlex.join(lab.argv))
        return 0
    if not {"--version", "-h", "--help", "--help-all"} & set(lab.argv):
        try:
            notes = prepare(lab)
        except (OSError, ValueError) as exc:  # a notebook that cannot be read, a folder that cannot be written
            print(f"[course] error: {exc}", file=sys.stderr)
            return 2
        for note in notes:
            print(f"[course] {note}", file=sys.stderr)
        if lab.copies:
            language = {"zh": "Chinese", "en": "English", "both": "Chinese and English"}[lab.lang]
            print(f"[course] serving your working copies in {shown(lab.root_dir, ROOT)}/ ({language}; "
                  f"./course reset NN gives a fresh copy of notebook NN)", file=sys.stderr)
    os.execve(lab.argv[0], lab.argv, {**os.environ, **lab.env})
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
