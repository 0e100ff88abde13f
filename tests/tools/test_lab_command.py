"""`./course lab [--lang zh|en]`: the command line, the one-language copies it serves and the settings it writes."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("course_lab", ROOT / "tools" / "lab.py")
lab = importlib.util.module_from_spec(spec)
sys.modules["course_lab"] = lab
spec.loader.exec_module(lab)


def option(argv, name):
    values = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    assert len(values) <= 1, f"{name} given twice: {argv}"
    return values[0] if values else None


def test_default_serves_the_bilingual_notebooks(tmp_path):
    plan, print_only = lab.plan(["--no-browser"], root=tmp_path, is_root_user=False, has_curve=True)
    assert not print_only and plan.lang == "both" and not plan.export
    assert option(plan.argv, "--ServerApp.root_dir") == str(tmp_path / "notebooks")
    assert option(plan.argv, "--KernelManager.transport_encryption") == "auto"
    assert "--allow-root" not in plan.argv and plan.argv[-1] == "--no-browser"
    assert plan.env["HOOKLAB_LANG"] == "both"
    assert plan.env["JUPYTER_CONFIG_PATH"].split(":")[0] == str(tmp_path / "build" / "lab" / "both" / "config")


@pytest.mark.parametrize("args", [["--lang", "en"], ["--lang=en"]])
def test_lang_serves_build_copies_with_messages_in_that_language(tmp_path, args):
    plan, _ = lab.plan(args + ["--port=9999"], root=tmp_path, is_root_user=True, has_curve=False)
    copies = tmp_path / "build" / "lab" / "en" / "notebooks"   # the lab's own folder: ./course export writes build/en
    assert plan.lang == "en" and plan.export and plan.root_dir == copies
    assert option(plan.argv, "--ServerApp.root_dir") == str(copies)
    assert "--lang" not in " ".join(plan.argv) and "--port=9999" in plan.argv and "--allow-root" in plan.argv
    assert option(plan.argv, "--KernelManager.transport_encryption") is None  # no CurveZMQ: not asked for
    assert plan.env["HOOKLAB_LANG"] == "en"


@pytest.mark.parametrize("given", [["--ServerApp.root_dir=build/en"], ["--notebook-dir=build/en"],
                                   ["--ServerApp.root_dir", "build/en"]])
def test_a_root_folder_given_by_the_user_replaces_the_default(tmp_path, given):
    """Today's "root_dir only accepts one value, got 2" came from adding ours next to the user's."""
    plan, _ = lab.plan(given, root=tmp_path, is_root_user=False, has_curve=True)
    roots = [a for a in plan.argv if a.startswith(lab.ROOT_OPTIONS)]
    assert len(roots) == 1 and plan.argv[-len(given):] == given
    assert plan.root_dir == tmp_path / "build" / "en"


@pytest.mark.parametrize("args, message", [
    (["--lang", "fr"], "--lang must be zh, en or both, got 'fr'"),
    (["--lang"], "--lang needs a value"),
    (["--lang", "en", "--notebook-dir=x"], "do not also give a root folder"),
])
def test_bad_arguments_are_refused(tmp_path, args, message):
    with pytest.raises(lab.UsageError, match=message):
        lab.plan(args, root=tmp_path, is_root_user=False, has_curve=True)


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
    src_dir = tmp_path / "notebooks"
    src_dir.mkdir()
    source = ROOT / "notebooks" / "00_introduction.ipynb"
    (src_dir / source.name).write_bytes(source.read_bytes())
    return source, src_dir / source.name


def test_export_copies_keeps_a_copy_the_learner_edited(tmp_path):
    source, src = course_copy(tmp_path)
    out = lab.copies_dir(tmp_path, "en")
    assert lab.export_copies("en", out, [src], root=tmp_path) == []
    copy = out / source.name
    first = copy.read_text(encoding="utf-8")
    assert json.loads(first)["metadata"]["hooklab_language"] == "en"
    # untouched copy + changed source: refreshed
    nb = json.loads(source.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": "print('new')", "execution_count": None,
                        "outputs": []})
    src.write_text(json.dumps(nb), encoding="utf-8")
    assert lab.export_copies("en", out, [src], root=tmp_path) == []
    assert "print('new')" in copy.read_text(encoding="utf-8")
    # the learner edits the copy: kept, with a note
    copy.write_text(copy.read_text(encoding="utf-8").replace("print('new')", "print('mine')"), encoding="utf-8")
    notes = lab.export_copies("en", out, [src], root=tmp_path)
    assert notes == ["keeping your edited build/lab/en/notebooks/00_introduction.ipynb (delete it to get a fresh copy)"]
    assert "print('mine')" in copy.read_text(encoding="utf-8")
    # deleting it gives a fresh copy
    copy.unlink()
    assert lab.export_copies("en", out, [src], root=tmp_path) == []
    assert "print('new')" in copy.read_text(encoding="utf-8")
    assert sorted(p.name for p in out.iterdir()) == [".hooklab-export.json", source.name]  # no temporary files


def test_a_copy_cut_short_is_not_the_learners_and_is_replaced(tmp_path, monkeypatch):
    """A write that stops half-way (disk full, killed) leaves the old copy whole; a copy that is not valid JSON
    anyway (written before writes were atomic) is not "edited by the learner": it is replaced."""
    from hooklab.course import export

    source, src = course_copy(tmp_path)
    out = lab.copies_dir(tmp_path, "en")
    lab.export_copies("en", out, [src], root=tmp_path)
    copy = out / source.name
    whole = copy.read_bytes()
    nb = json.loads(source.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": "print('new')", "execution_count": None,
                        "outputs": []})
    src.write_text(json.dumps(nb), encoding="utf-8")

    real_fdopen = export.os.fdopen

    class DiskFull:
        def __init__(self, fd, *args, **kwargs):
            self.file = real_fdopen(fd, *args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, text):
            self.file.write(text[:1000])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(export.os, "fdopen", DiskFull)
    with pytest.raises(OSError, match="could not write .*00_introduction.ipynb: No space left on device "
                                      r"\(nothing was left half-written\)"):
        lab.export_copies("en", out, [src], root=tmp_path)
    monkeypatch.undo()
    assert copy.read_bytes() == whole                    # the old copy, whole
    assert sorted(p.name for p in out.iterdir()) == [".hooklab-export.json", source.name]

    copy.write_bytes(whole[:16384])                      # as a non-atomic write cut short left it
    notes = lab.export_copies("en", out, [src], root=tmp_path)
    assert notes == ["replaced build/lab/en/notebooks/00_introduction.ipynb, which was not valid JSON "
                     "(a write cut short)"]
    assert "print('new')" in copy.read_text(encoding="utf-8")


def test_the_lab_moves_its_copies_out_of_the_export_folder_once(tmp_path):
    """The lab kept its copies in build/<lang>/ before, where ./course export writes."""
    source, src = course_copy(tmp_path)
    old = tmp_path / "build" / "en"
    lab.export_copies("en", old, [src], root=tmp_path)    # as the lab did before
    (old / source.name).write_text((old / source.name).read_text(encoding="utf-8").replace("Introduction", "Mine"),
                                   encoding="utf-8")
    notes = lab.move_old_copies("en", root=tmp_path)
    assert notes == ["moved your copies from build/en/ to build/lab/en/notebooks/, the lab's own folder now "
                     "(build/en/ is left to ./course export)"]
    new = lab.copies_dir(tmp_path, "en")
    assert not old.exists() and "Mine" in (new / source.name).read_text(encoding="utf-8")
    assert lab.export_copies("en", new, [src], root=tmp_path) == [
        "keeping your edited build/lab/en/notebooks/00_introduction.ipynb (delete it to get a fresh copy)"]
    # once: an export folder of ./course export's (no stamps) is not moved, nor a second time
    from hooklab.course import export_notebooks
    export_notebooks("en", old, [src])
    assert lab.move_old_copies("en", root=tmp_path) == [] and (old / source.name).exists()


def test_export_does_not_overwrite_the_labs_edited_copies(tmp_path):
    """`./course export --lang en` and `./course lab --lang en` no longer share a folder; and an export pointed at
    the lab's folder keeps the copies the learner edited (--force overwrites them)."""
    source, src = course_copy(tmp_path)
    out = lab.copies_dir(tmp_path, "en")
    lab.export_copies("en", out, [src], root=tmp_path)
    copy = out / source.name
    copy.write_text(copy.read_text(encoding="utf-8").replace("Introduction", "Mine"), encoding="utf-8")
    command = [sys.executable, "-m", "hooklab.course", "export", "--lang", "en"]
    default = subprocess.run(command + [str(src)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert default.returncode == 0 and default.stdout.strip() == str(Path("build") / "en" / source.name)
    assert "Mine" in copy.read_text(encoding="utf-8")
    into_lab = subprocess.run(command + ["--out", str(out), str(src)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
    assert into_lab.returncode == 0 and into_lab.stdout == ""
    assert f"note: kept {copy}: you edited it in the lab (--force overwrites it)" in into_lab.stderr
    assert "Mine" in copy.read_text(encoding="utf-8")
    forced = subprocess.run(command + ["--out", str(out), "--force", str(src)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert forced.returncode == 0 and forced.stdout.strip() == str(copy)
    assert "Mine" not in copy.read_text(encoding="utf-8")
    assert lab.export_copies("en", out, [src], root=tmp_path) == []  # its stamp was updated: not "edited"


def test_trust_signs_the_served_notebooks(tmp_path, monkeypatch):
    import nbformat
    from nbformat.sign import NotebookNotary

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))  # a signature store of this test's own
    path = tmp_path / "01.ipynb"
    path.write_bytes((ROOT / "notebooks" / "01_tensor_hooks.ipynb").read_bytes())
    assert not NotebookNotary().check_signature(nbformat.read(path, as_version=4))
    lab.trust([path])
    assert NotebookNotary().check_signature(nbformat.read(path, as_version=4))


def test_course_lab_print_command():
    result = subprocess.run([str(ROOT / "course"), "lab", "--lang", "zh", "--print-command", "--no-browser"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "HOOKLAB_LANG=zh" in lines
    assert lines[-1].split()[1] == "lab"
    assert f"--ServerApp.root_dir={ROOT / 'build' / 'lab' / 'zh' / 'notebooks'}" in lines[-1].split()
    bad = subprocess.run([str(ROOT / "course"), "lab", "--lang", "fr"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--lang must be zh, en or both" in bad.stderr


def test_the_shell_scripts_register_the_kernel_tools_and_notebooks_name():
    """tools/kernelspec.py is the one definition; `course` and postBuild (shell) repeat it and must agree."""
    import kernelspec
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
