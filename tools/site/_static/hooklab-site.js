// The course website's language switch (中文 / English / both) and per-page "open in JupyterLab" link.
// Cells carry the notebook's lang-* tags as CSS classes (tag_lang-zh / tag_lang-en); hooklab-site.css hides
// the other language according to <html data-hooklab-lang="...">. The choice is remembered in localStorage.
(function () {
  "use strict";
  var KEY = "hooklab-lang";
  var MODES = [["zh", "中文"], ["en", "English"], ["both", "中文 + English"]];
  var CJK = /[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]/;

  function stored() {
    try { return localStorage.getItem(KEY); } catch (e) { return null; }
  }
  function setLang(mode) {
    if (["zh", "en", "both"].indexOf(mode) < 0) { mode = "both"; }
    document.documentElement.setAttribute("data-hooklab-lang", mode);
    try { localStorage.setItem(KEY, mode); } catch (e) { /* private mode: not remembered */ }
    var buttons = document.querySelectorAll(".hooklab-lang-switch button");
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].setAttribute("aria-pressed", buttons[i].getAttribute("data-lang") === mode ? "true" : "false");
    }
  }
  // ?lang=zh|en|both in the address wins over the remembered choice
  var fromUrl = new URLSearchParams(window.location.search).get("lang");
  setLang(fromUrl || stored() || "both");

  function meta(name) {
    var el = document.querySelector('meta[name="' + name + '"]');
    return el ? el.getAttribute("content") : "";
  }

  // Table-of-contents entries: a heading of one language gets its entry hidden with it.
  function markTocEntries() {
    var links = document.querySelectorAll(".bd-toc a[href^='#'], .bd-sidebar-secondary a[href^='#']");
    for (var i = 0; i < links.length; i++) {
      var target = document.getElementById(decodeURIComponent(links[i].getAttribute("href").slice(1)));
      if (!target) { continue; }
      var heading = /^H[1-6]$/.test(target.tagName) ? target : target.querySelector("h1, h2, h3, h4, h5, h6");
      if (!heading) { continue; }
      var item = links[i].closest("li") || links[i];
      ["tag_lang-zh", "tag_lang-en"].forEach(function (cls) {
        if (heading.classList.contains(cls)) { item.classList.add(cls); }
      });
    }
  }

  // hooklab.check / hint print a message twice, "[01.2] 中文…" then "[01.2] English…": tag each line.
  function markCheckerOutput() {
    var blocks = document.querySelectorAll(".cell_output pre, .output pre");
    for (var i = 0; i < blocks.length; i++) {
      var pre = blocks[i];
      if (pre.children.length || !/^(# )?\[\d+\.\d+\] /m.test(pre.textContent)) { continue; }
      var lines = pre.textContent.split("\n");
      var html = [];
      for (var j = 0; j < lines.length; j++) {
        var line = lines[j], next = lines[j + 1];
        var m1 = /^\[(\d+\.\d+)\] /.exec(line), m2 = next !== undefined && /^\[(\d+\.\d+)\] /.exec(next);
        if (m1 && m2 && m1[1] === m2[1] && CJK.test(line) && !CJK.test(next)) {
          html.push(span("tag_lang-zh", line) + span("tag_lang-en", next));
          j++;
        } else {
          html.push(escape(line) + (j < lines.length - 1 ? "\n" : ""));
        }
      }
      pre.innerHTML = html.join("");
    }
  }
  function escape(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function span(cls, line) {
    return '<span class="' + cls + ' hooklab-line">' + escape(line) + "\n</span>";
  }

  function buildBar() {
    var bar = document.createElement("div");
    bar.className = "hooklab-bar";
    var group = document.createElement("div");
    group.className = "hooklab-lang-switch";
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", "语言 / Language");
    MODES.forEach(function (pair) {
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = pair[1];
      button.setAttribute("data-lang", pair[0]);
      button.addEventListener("click", function () { setLang(pair[0]); });
      group.appendChild(button);
    });
    bar.appendChild(group);
    var notebook = meta("hooklab-notebook");
    if (notebook) {
      var link = document.createElement("a");
      link.className = "hooklab-open-lab";
      link.href = meta("hooklab-lab-url") + notebook;
      link.textContent = "在 JupyterLab 中打开 / Open in JupyterLab";
      link.title = "先在仓库里运行 ./course lab / run ./course lab in the repository first";
      bar.appendChild(link);
    }
    var where = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
    where.insertBefore(bar, where.firstChild);
    setLang(document.documentElement.getAttribute("data-hooklab-lang"));
  }

  document.addEventListener("DOMContentLoaded", function () {
    markCheckerOutput();
    markTocEntries();
    buildBar();
  });
})();
