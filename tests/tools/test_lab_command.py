"""`./course lab [--lang zh|en]` and `./course reset [NN]`: the command line, the learner's working copies the lab
serves (tools/classroom/workcopies.py) and the settings it writes; no browser, no server."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.classroom import lab, workcopies

ROOT = Path(__file__).resolve().parents[2]


def option(argv, name):
    values = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    assert len(values) <= 1, f"{name} given twice: {argv}"
    return values[0] if values else None


@pytest.fixture(autouse=True)
def default_work_dir(monkeypatch):
    monkeypatch.delenv("COURSE_WORK_DIR", raising=False)


def test_default_serves_the_bilingual_working_copies(tmp_path):
    plan, print_only = lab.plan(["--no-browser"], root=tmp_path, is_root_user=False, has_curve=True)
    assert not print_only and plan.lang == "both" and plan.copies
    assert plan.root_dir == tmp_path / "work" / "zh-en"          # never notebooks/, the tracked files
    assert option(plan.argv, "--ServerApp.root_dir") == str(tmp_path / "work" / "zh-en")
    assert option(plan.argv, "--KernelManager.transport_encryption") == "auto"
    assert "--allow-root" not in plan.argv and plan.argv[-1] == "--no-browser"
    assert plan.env["HOOKLAB_LANG"] == "both"
    assert plan.env["JUPYTER_CONFIG_PATH"].split(":")[0] == str(tmp_path / "build" / "lab" / "both" / "config")


@pytest.mark.parametrize("args", [["--lang", "en"], ["--lang=en"]])
def test_lang_serves_one_language_working_copies_with_messages_in_that_language(tmp_path, args):
    plan, _ = lab.plan(args + ["--port=9999"], root=tmp_path, is_root_user=True, has_curve=False)
    copies = tmp_path / "work" / "en"
    assert plan.lang == "en" and plan.copies and plan.root_dir == copies
    assert option(plan.argv, "--ServerApp.root_dir") == str(copies)
    assert "--lang" not in " ".join(plan.argv) and "--port=9999" in plan.argv and "--allow-root" in plan.argv
    assert option(plan.argv, "--KernelManager.transport_encryption") is None  # no CurveZMQ: not asked for
    assert plan.env["HOOKLAB_LANG"] == "en"


def test_course_work_dir_moves_the_working_copies(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_WORK_DIR", str(tmp_path / "elsewhere"))
    plan, _ = lab.plan(["--lang", "zh"], root=tmp_path, is_root_user=False, has_curve=True)
    assert plan.root_dir == tmp_path / "elsewhere" / "zh"


@pytest.mark.parametrize("given", [["--ServerApp.root_dir=build/en"], ["--notebook-dir=build/en"],
                                   ["--ServerApp.root_dir", "build/en"]])
def test_a_root_folder_given_by_the_user_replaces_the_default(tmp_path, given):
    """Today's "root_dir only accepts one value, got 2" came from adding ours next to the user's."""
    plan, _ = lab.plan(given, root=tmp_path, is_root_user=False, has_curve=True)
    roots = [a for a in plan.argv if a.startswith(lab.ROOT_OPTIONS)]
    assert len(roots) == 1 and plan.argv[-len(given):] == given
    assert plan.root_dir == tmp_path / "build" / "en" and not plan.copies   # served as given: no copies made


@pytest.mark.parametrize("args, message", [
    (["--lang", "fr"], "--lang must be zh, en or both, got 'fr'"),
    (["--lang"], "--lang needs a value"),
    (["--lang", "en", "--notebook-dir=x"], "do not also give a root folder"),
    # review round 3: the last of two silently won
    (["--lang", "zh", "--lang", "en"], r"--lang was given twice \(zh and en\): one lab serves one language"),
    (["--lang=en", "--lang", "en"], r"--lang was given twice \(en and en\)"),
])
def test_bad_arguments_are_refused(tmp_path, args, message):
    with pytest.raises(lab.UsageError, match=message):
        lab.plan(args, root=tmp_path, is_root_user=False, has_curve=True)


@pytest.mark.parametrize("args, message", [
    (["00", "--lang"], "--lang needs a value: zh, en or both"),  # review round 3: it said "got None"
    (["--lang=", "00"], "--lang must be zh, en or both, got ''"),
    (["00", "--lang", "fr"], "--lang must be zh, en or both, got 'fr'"),
    (["00", "--force"], "unknown option '--force'"),
])
def test_reset_refuses_bad_arguments_clearly_and_changes_nothing(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setenv("COURSE_WORK_DIR", str(tmp_path / "work"))
    assert workcopies.reset_main(args, root=tmp_path) == 2
    error = capsys.readouterr().err
    assert error.startswith("[course] error: ") and message in error and "None" not in error, error
    assert not (tmp_path / "work").exists()


def test_settings_turn_off_the_news_and_pick_the_interface_language(tmp_path):
    for lang_, locale in [("zh", "zh_CN"), ("en", "en"), ("both", None)]:
        path = lab.write_settings(tmp_path / lang_, lang_)
        assert path == tmp_path / lang_ / "config" / "labconfig" / "default_setting_overrides.json"
        settings = json.loads(path.read_text(encoding="utf-8"))
        assert settings["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false",
                                                                          "checkForUpdates": False}
        assert settings.get("@jupyterlab/translation-extension:plugin", {}).get("locale") == locale


def test_settings_match_the_installed_jupyterlab_schemas():
    """Each overridden setting exists in the schema JupyterLab ships, with an allowed value."""
    schemas = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"
    for plugin, values in lab.settings_overrides("zh").items():
        package, name = plugin.split(":")
        schema = json.loads((schemas / package / f"{name}.json").read_text(encoding="utf-8"))
        for key, value in values.items():
            prop = schema["properties"][key]
            allowed = [choice["const"] for choice in prop.get("oneOf", [])]
            assert not allowed or value in allowed, (plugin, key, value, allowed)
            assert isinstance(value, {"string": str, "boolean": bool}[prop["type"]])


def test_chinese_language_pack_is_installed():
    from importlib.metadata import entry_points
    packs = {ep.name for ep in entry_points(group="jupyterlab.languagepack")}
    assert "zh_CN" in packs


def course_copy(tmp_path):
    """A checkout in tmp_path with notebook 00 in notebooks/; returns (the real notebook, the tmp one)."""
    src_dir = tmp_path / "notebooks"
    src_dir.mkdir()
    source = ROOT / "notebooks" / "00_introduction.ipynb"
    (src_dir / source.name).write_bytes(source.read_bytes())
    return source, src_dir / source.name


def change_tracked(src):
    """What a `git pull` that changes the notebook does."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": "print('new')", "execution_count": None,
                        "outputs": []})
    src.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def learner_edits(copy, text="print('mine')"):
    nb = json.loads(copy.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": text, "execution_count": None, "outputs": []})
    copy.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return copy.read_bytes()


def test_the_first_start_copies_the_notebooks_and_never_touches_the_tracked_ones(tmp_path):
    source, src = course_copy(tmp_path)
    tracked = src.read_bytes()
    notes = workcopies.prepare_copies("both", root=tmp_path)
    copy = tmp_path / "work" / "zh-en" / source.name
    made, committed = json.loads(copy.read_bytes()), json.loads(tracked)
    # the bilingual copy: the notebook, with the language_info the course's kernel reports (ipykernel's own)
    from ipykernel.ipkernel import IPythonKernel
    assert made["metadata"].pop("language_info") == IPythonKernel.language_info
    assert committed["metadata"].pop("language_info") == {"name": "python"}
    assert made == committed
    assert notes == ["copied 00_introduction.ipynb into work/zh-en/: your working copies, yours to change "
                     "(notebooks/ stays as the course ships it; ./course reset NN gives a fresh copy)"]
    assert workcopies.prepare_copies("both", root=tmp_path) == []   # second start: nothing to say
    en = workcopies.prepare_copies("en", root=tmp_path)
    assert en[0].startswith("copied 00_introduction.ipynb into work/en/")
    nb = json.loads((tmp_path / "work" / "en" / source.name).read_text(encoding="utf-8"))
    assert nb["metadata"]["hooklab_language"] == "en"          # the one-language export
    assert src.read_bytes() == tracked
    assert sorted(p.name for p in copy.parent.iterdir()) == [".hooklab-export.json", source.name]  # no temp files


@pytest.mark.parametrize("lang, command", [("both", "./course reset 00"), ("en", "./course reset 00 --lang en")])
def test_a_copy_the_learner_changed_is_never_overwritten_and_a_newer_version_is_announced(tmp_path, lang, command):
    import datetime

    _, src = course_copy(tmp_path)
    workcopies.prepare_copies(lang, root=tmp_path)
    copy = workcopies.copies_dir(tmp_path, lang) / src.name
    mine = learner_edits(copy)
    assert workcopies.prepare_copies(lang, root=tmp_path) == []     # changed, course unchanged: nothing to say
    change_tracked(src)                                             # git pull brings a new version
    for _ in range(2):                                              # said at every start, until the reset
        notes = workcopies.prepare_copies(lang, root=tmp_path)
        assert notes == [f"00 has a newer version: {command} gives a fresh copy (your copy is kept as "
                         f"00_introduction.bak-{datetime.date.today().isoformat()}.ipynb)"]
        assert copy.read_bytes() == mine


def test_an_untouched_copy_follows_the_course(tmp_path):
    _, src = course_copy(tmp_path)
    workcopies.prepare_copies("both", root=tmp_path)
    copy = tmp_path / "work" / "zh-en" / src.name
    change_tracked(src)
    assert workcopies.prepare_copies("both", root=tmp_path) == [
        "00 has a newer version, and you had not changed your copy: work/zh-en/00_introduction.ipynb is the new "
        "version now"]
    assert copy.read_bytes() == workcopies.fresh_copy("both", src)


def jupyterlab_saves(copy, *, run=False):
    """What opening, (running) and saving does to a copy without the learner editing a cell: JupyterLab writes the
    kernel's language_info (here a different Python's) and its own metadata; running rewrites outputs and counts."""
    nb = json.loads(copy.read_text(encoding="utf-8"))
    nb["metadata"]["language_info"] = {**nb["metadata"]["language_info"], "version": "3.99.0"}
    nb["metadata"]["widgets"] = {}
    for n, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        if run:
            cell["execution_count"] = n + 41
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["run again\n"]}]
    copy.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return copy.read_bytes()


@pytest.mark.parametrize("run", [False, True])
def test_a_copy_opened_saved_or_run_without_an_edited_cell_stays_the_courses(tmp_path, run):
    """Saving is not editing: a copy the lab saved (autosave, language_info, outputs of a run) still follows the
    course, and until the course changes it is left as it is."""
    _, src = course_copy(tmp_path)
    workcopies.prepare_copies("en", root=tmp_path)
    copy = tmp_path / "work" / "en" / src.name
    saved = jupyterlab_saves(copy, run=run)
    assert workcopies.prepare_copies("en", root=tmp_path) == [] and copy.read_bytes() == saved  # kept, no note
    change_tracked(src)
    assert workcopies.prepare_copies("en", root=tmp_path) == [
        "00 has a newer version, and you had not changed your copy: work/en/00_introduction.ipynb is the new "
        "version now"]
    assert copy.read_bytes() == workcopies.fresh_copy("en", src)
    # an edited cell is the learner's, saved by the lab or not
    mine = learner_edits(copy)
    jupyterlab_saves(copy)
    change_tracked(src)
    notes = workcopies.prepare_copies("en", root=tmp_path)
    assert len(notes) == 1 and notes[0].startswith("00 has a newer version: ./course reset 00 --lang en")
    assert json.loads(copy.read_bytes())["cells"][-1]["source"] == json.loads(mine)["cells"][-1]["source"]


def test_copies_stamped_before_the_content_digest_keep_their_meaning(tmp_path):
    """Stamps written by an earlier version (the sha256 of the bytes only): an untouched copy is brought up to date
    quietly, and a changed one is not announced as a newer version while the course has not changed."""
    from hooklab.course.notebook import sha256_hex
    _, src = course_copy(tmp_path)
    folder = tmp_path / "work" / "zh-en"
    folder.mkdir(parents=True)
    (folder / src.name).write_bytes(src.read_bytes())        # the old copy: byte for byte
    (folder / ".hooklab-export.json").write_text(json.dumps({src.name: sha256_hex(src.read_bytes())}),
                                                 encoding="utf-8")
    assert workcopies.prepare_copies("both", root=tmp_path) == []
    assert (folder / src.name).read_bytes() == workcopies.fresh_copy("both", src)  # now with the kernel's info
    learner_edits(folder / src.name)
    (folder / ".hooklab-export.json").write_text(json.dumps({src.name: sha256_hex(src.read_bytes())}),
                                                 encoding="utf-8")
    assert workcopies.prepare_copies("both", root=tmp_path) == []


def test_reset_keeps_the_learners_copy_and_gives_a_fresh_one(tmp_path):
    import datetime

    _, src = course_copy(tmp_path)
    workcopies.prepare_copies("both", root=tmp_path)
    copy = tmp_path / "work" / "zh-en" / src.name
    mine = learner_edits(copy)
    change_tracked(src)
    day = datetime.date(2026, 3, 1)
    assert workcopies.reset("both", ["00"], root=tmp_path, today=day) == [
        "work/zh-en/00_introduction.ipynb: fresh copy; yours is kept as "
        "work/zh-en/00_introduction.bak-2026-03-01.ipynb"]
    assert copy.read_bytes() == workcopies.fresh_copy("both", src)
    assert (copy.parent / "00_introduction.bak-2026-03-01.ipynb").read_bytes() == mine
    assert workcopies.prepare_copies("both", root=tmp_path) == []   # fresh: no "newer version" any more
    assert workcopies.reset("both", [], root=tmp_path, today=day) == [
        "work/zh-en/00_introduction.ipynb: already a fresh copy"]
    again = learner_edits(copy, "print('again')")                  # a second reset the same day: a second backup
    assert workcopies.reset("both", ["00_introduction.ipynb"], root=tmp_path, today=day)[0].endswith(
        "yours is kept as work/zh-en/00_introduction.bak-2026-03-01-2.ipynb")
    assert (copy.parent / "00_introduction.bak-2026-03-01.ipynb").read_bytes() == mine
    assert (copy.parent / "00_introduction.bak-2026-03-01-2.ipynb").read_bytes() == again


@pytest.mark.parametrize("name", ["00", "0", "00_introduction", "notebooks/00_introduction.ipynb"])
def test_reset_understands_a_notebook_number_or_name(tmp_path, name):
    _, src = course_copy(tmp_path)
    assert workcopies.pick([name], [src]) == [src]


def test_reset_refuses_an_unknown_notebook_and_changes_nothing(tmp_path):
    _, src = course_copy(tmp_path)
    workcopies.prepare_copies("both", root=tmp_path)
    copy = tmp_path / "work" / "zh-en" / src.name
    mine = learner_edits(copy)
    with pytest.raises(workcopies.UsageError, match=r"no notebook '99': give its number, 00 to 00"):
        workcopies.reset("both", ["00", "99"], root=tmp_path)
    assert copy.read_bytes() == mine and len(list(copy.parent.glob("*.bak-*"))) == 0


def test_a_copy_cut_short_is_replaced_and_kept_aside(tmp_path):
    _, src = course_copy(tmp_path)
    workcopies.prepare_copies("zh", root=tmp_path)
    copy = tmp_path / "work" / "zh" / src.name
    broken = copy.read_bytes()[:5000]
    copy.write_bytes(broken)
    notes = workcopies.prepare_copies("zh", root=tmp_path)
    assert len(notes) == 1 and notes[0].startswith("work/zh/00_introduction.ipynb was not valid JSON")
    assert json.loads(copy.read_text(encoding="utf-8"))["metadata"]["hooklab_language"] == "zh"
    backup, = copy.parent.glob("00_introduction.bak-*.ipynb")
    assert backup.read_bytes() == broken


def test_the_lab_moves_its_earlier_copies_into_work_once(tmp_path):
    """`./course lab --lang en` kept its copies in build/lab/en/notebooks/ before (stamps included)."""
    from hooklab.course.export import export_folder

    _, src = course_copy(tmp_path)
    old = tmp_path / "build" / "lab" / "en" / "notebooks"
    export_folder("en", old, [src], stamp=True)                     # as the lab did before
    mine = learner_edits(old / src.name)
    assert workcopies.move_old_copies("en", root=tmp_path) == [
        "moved your copies from build/lab/en/notebooks/ to work/en/, where your working copies live now"]
    new = tmp_path / "work" / "en"
    assert not old.exists() and (new / src.name).read_bytes() == mine
    assert workcopies.prepare_copies("en", root=tmp_path) == []     # still the learner's: kept, nothing newer
    assert (new / src.name).read_bytes() == mine
    assert workcopies.move_old_copies("en", root=tmp_path) == []    # once


def test_export_leaves_the_working_copies_alone(tmp_path, monkeypatch, capsys):
    """`./course export --lang en` writes build/en/; pointed at the working copies, it keeps the edited ones.
    (`python -m hooklab.course export` runs in this process: tests/course/test_export.py starts the real command.)"""
    from hooklab.course.__main__ import main as course_command

    _, src = course_copy(tmp_path)
    workcopies.prepare_copies("en", root=tmp_path)
    copy = tmp_path / "work" / "en" / src.name
    mine = learner_edits(copy)
    monkeypatch.chdir(tmp_path)
    command = ["export", "--lang", "en"]
    assert course_command(command + [str(src)]) == 0
    assert capsys.readouterr().out.strip() == str(Path("build") / "en" / src.name)
    assert course_command(command + ["--out", str(copy.parent), str(src)]) == 0
    assert "you edited it in the lab" in capsys.readouterr().err
    assert copy.read_bytes() == mine


def test_work_is_ignored_by_git():
    result = subprocess.run(["git", "check-ignore", "-q", "work/zh-en/00_introduction.ipynb"], cwd=ROOT,
                            timeout=30)
    assert result.returncode == 0, "work/ (the learners' working copies) must be in .gitignore"


def run_course(args, work, timeout=120):
    return subprocess.run([str(ROOT / "course"), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COURSE_WORK_DIR": str(work)})


def test_course_reset_from_the_shell(tmp_path, monkeypatch, capsys):
    """The `reset` line of `course`: fresh copies of the real notebooks into COURSE_WORK_DIR, the old one kept.
    The refused reset runs the real command (`course` hands its arguments and exit status through); the two that
    copy run tools/classroom/workcopies.py's command line in this process (a real one spends seconds importing torch)."""
    work = tmp_path / "work"
    monkeypatch.setenv("COURSE_WORK_DIR", str(work))
    assert workcopies.reset_main(["03"]) == 0
    first = capsys.readouterr().err
    copy = work / "zh-en" / "03_module_forward_hooks.ipynb"
    assert f"[course] {copy}: fresh copy" in first.splitlines()
    assert copy.read_bytes() == workcopies.fresh_copy("both", ROOT / "notebooks" / copy.name)
    mine = learner_edits(copy)
    assert workcopies.reset_main(["3", "--lang", "both"]) == 0
    second = capsys.readouterr().err
    backup, = copy.parent.glob("03_module_forward_hooks.bak-*.ipynb")
    assert backup.read_bytes() == mine and f"yours is kept as {backup}" in second
    bad = run_course(["reset", "42"], work)
    assert bad.returncode == 2 and "no notebook '42'" in bad.stderr
    bad = run_course(["reset", "00", "--lang"], work)  # review round 3: "got None"
    assert bad.returncode == 2 and "[course] error: --lang needs a value: zh, en or both" in bad.stderr, bad.stderr
    # review round 3: the last --lang silently won (--print-command: refused before anything would start)
    bad = run_course(["lab", "--lang", "zh", "--lang", "en", "--print-command"], work)
    assert bad.returncode == 2 and "[course] error: --lang was given twice (zh and en)" in bad.stderr, bad.stderr
    assert sorted(p.name for p in copy.parent.iterdir()) == sorted([copy.name, backup.name, ".hooklab-export.json"])


def test_trust_signs_the_served_notebooks(tmp_path, monkeypatch):
    import nbformat
    from nbformat.sign import NotebookNotary

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))  # a signature store of this test's own
    path = tmp_path / "01.ipynb"
    path.write_bytes((ROOT / "notebooks" / "01_tensor_hooks.ipynb").read_bytes())
    assert not NotebookNotary().check_signature(nbformat.read(path, as_version=4))
    lab.trust([path])
    assert NotebookNotary().check_signature(nbformat.read(path, as_version=4))


def test_course_lab_print_command(monkeypatch):
    monkeypatch.delenv("COURSE_WORK_DIR", raising=False)
    result = subprocess.run([str(ROOT / "course"), "lab", "--lang", "zh", "--print-command", "--no-browser"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "HOOKLAB_LANG=zh" in lines
    assert lines[-1].split()[1] == "lab"
    assert f"--ServerApp.root_dir={ROOT / 'work' / 'zh'}" in lines[-1].split()
    bad = subprocess.run([str(ROOT / "course"), "lab", "--lang", "fr"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--lang must be zh, en or both" in bad.stderr


def test_the_shell_scripts_register_the_kernel_tools_and_notebooks_name():
    """tools/notebooks/kernelspec.py is the one definition; `course` and postBuild (shell) repeat it and must agree."""
    from tools.notebooks import kernelspec
    course = (ROOT / "course").read_text(encoding="utf-8")
    assert f"\nKERNEL={kernelspec.NAME}\n" in course
    assert f'--name "$KERNEL" \\\n        --display-name "{kernelspec.DISPLAY_NAME}"' in course
    post_build = (ROOT / "postBuild").read_text(encoding="utf-8")
    assert f'--name {kernelspec.NAME} --display-name "{kernelspec.DISPLAY_NAME}"' in post_build


def test_the_lab_leaves_out_two_lines_of_terminal_noise(tmp_path):
    """jupyter_lsp's "Skipped non-installed server(s): <19 names>" and tornado's warning about jupyter_server's
    websocket ping settings (seen in a real lab: tests/tools/test_lab.py); a user's own option still wins."""
    import logging

    plan, _ = lab.plan(["--LanguageServerManager.autodetect=True"], root=tmp_path, is_root_user=False, has_curve=True)
    assert plan.argv.index("--LanguageServerManager.autodetect=False") < \
        plan.argv.index("--LanguageServerManager.autodetect=True")   # traitlets: the last one given wins
    lab.write_settings(tmp_path / "both", "both")
    config = tmp_path / "both" / "config" / "jupyter_server_config.py"
    logger = logging.getLogger("tornado.general")
    before = list(logger.filters)
    try:
        exec(compile(config.read_text(encoding="utf-8"), str(config), "exec"), {"c": None})
        added, = [f for f in logger.filters if f not in before]

        def record(message):
            return logging.LogRecord("tornado.general", logging.WARNING, __file__, 1, message, None, None)
        assert not added.filter(record("The websocket_ping_timeout (90000) cannot be longer than the "
                                       "websocket_ping_interval (30000).\nSetting websocket_ping_timeout=30000"))
        assert added.filter(record("Malformed HTTP message from 127.0.0.1"))  # every other warning still shows
    finally:
        logger.filters[:] = before
