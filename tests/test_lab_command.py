"""`./course lab [--lang zh|en]`: the command line, the one-language copies it serves and the settings it writes."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
    assert plan.lang == "en" and plan.export and plan.root_dir == tmp_path / "build" / "en"
    assert option(plan.argv, "--ServerApp.root_dir") == str(tmp_path / "build" / "en")
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


def test_export_copies_keeps_a_copy_the_learner_edited(tmp_path):
    src_dir = tmp_path / "notebooks"
    src_dir.mkdir()
    source = ROOT / "notebooks" / "00_introduction.ipynb"
    (src_dir / source.name).write_bytes(source.read_bytes())
    out = tmp_path / "build" / "en"
    assert lab.export_copies("en", out, [src_dir / source.name]) == []
    copy = out / source.name
    first = copy.read_text(encoding="utf-8")
    assert json.loads(first)["metadata"]["hooklab_language"] == "en"
    # untouched copy + changed source: refreshed
    nb = json.loads(source.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": "print('new')", "execution_count": None,
                        "outputs": []})
    (src_dir / source.name).write_text(json.dumps(nb), encoding="utf-8")
    assert lab.export_copies("en", out, [src_dir / source.name]) == []
    assert "print('new')" in copy.read_text(encoding="utf-8")
    # the learner edits the copy: kept, with a note
    copy.write_text(copy.read_text(encoding="utf-8").replace("print('new')", "print('mine')"), encoding="utf-8")
    notes = lab.export_copies("en", out, [src_dir / source.name])
    assert len(notes) == 1 and "keeping your edited build/en/00_introduction.ipynb" in notes[0]
    assert "print('mine')" in copy.read_text(encoding="utf-8")
    # deleting it gives a fresh copy
    copy.unlink()
    assert lab.export_copies("en", out, [src_dir / source.name]) == []
    assert "print('new')" in copy.read_text(encoding="utf-8")


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
    assert lines[-1].split()[1] == "lab" and f"--ServerApp.root_dir={ROOT / 'build' / 'zh'}" in lines[-1].split()
    bad = subprocess.run([str(ROOT / "course"), "lab", "--lang", "fr"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--lang must be zh, en or both" in bad.stderr
