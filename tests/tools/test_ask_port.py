"""The site's port of course.ask (tools/site/_static/hooklab-ask.js), run by Node.js on the site's copy of the index
(tools/site/ask_index.py), without building the site: it reads a learner's words as course.ask does, full-width Latin
(a Chinese input method's full-width mode) folded to ASCII. tests/tools/test_browser.py checks the same port in a
browser on the built site, for every learner query."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from hooklab.course.asking import LEARNER_KINDS, ask

pytestmark = pytest.mark.tools

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
# hooklab-ask.js expects a browser's window, URL and fetch: fetch answers with the index file
RANK = r"""
const fs = require("fs"), vm = require("vm");
const [script, indexFile, queriesFile] = process.argv.slice(2);
const text = fs.readFileSync(indexFile, "utf8");
const context = { window: { location: { href: "http://localhost/" } }, URL,
                  fetch: async () => ({ json: async () => JSON.parse(text) }) };
vm.createContext(context);
vm.runInContext(fs.readFileSync(script, "utf8"), context);
const queries = JSON.parse(fs.readFileSync(queriesFile, "utf8"));
context.window.hooklabAsk.load("./").then((index) => {
  console.log(JSON.stringify(queries.map((q) => (context.window.hooklabAsk.rank(index, q)[0] || {}).title || null)));
});
"""


def _full_width(text: str) -> str:
    return "".join("\u3000" if c == " " else chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


@pytest.mark.skipif(NODE is None, reason="needs Node.js (node) to run the site's script")
def test_the_sites_port_folds_full_width_latin_as_course_ask_does(tmp_path):
    from tools.site import ask_index

    words = ["backward hook", "forward hook not called", "my hook is never called after torch.compile"]
    queries = words + [_full_width(q) for q in words]
    index, listed = tmp_path / "hooklab-ask.json", tmp_path / "queries.json"
    index.write_text(json.dumps(ask_index.site_index("en"), ensure_ascii=False), encoding="utf-8")
    listed.write_text(json.dumps(queries, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "rank.js").write_text(RANK, encoding="utf-8")
    done = subprocess.run([NODE, str(tmp_path / "rank.js"), str(ROOT / "tools" / "site" / "_static" / "hooklab-ask.js"),
                           str(index), str(listed)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    firsts = json.loads(done.stdout)
    python = [ask(q, k=1, kinds=LEARNER_KINDS, lang="en")[0].title("en") for q in queries]
    assert firsts == python and firsts[len(words):] == firsts[:len(words)] and None not in firsts
