/* The course website's search page (tools/site/_templates/search.html loads it; tools/site.py writes the index).

   The index is Pagefind's (https://pagefind.app), written after Sphinx by its extended binary, which segments Chinese
   into words; in the browser Pagefind segments a Chinese query with Intl.Segmenter, stems English, matches every
   word as a prefix (FSDP finds FSDP2) and ranks by BM25 with headings weighted. This script asks it and orders what
   it finds for the two kinds of query a learner types:

   - a few words (梯度累积, 混合精度钩子, hook order): the pages whose text holds the words as typed (each Chinese run
     whole, the English words in order), found by Pagefind or by reading every page's text (Pagefind 1.5's Chinese
     segmentation at indexing and in the browser can differ, and qualified names such as hooklab.HookScope are indexed
     as their parts), the page built around them first (the words in its title, then in a section's heading), then
     Pagefind's order; after them, under a line of their own, Pagefind's pages that hold the words apart;
   - a pasted message (four or more words: an error or a warning as the learner's run printed it, with their own
     names, shapes and numbers): every word is also looked up alone, pages are scored by the words they hold
     (rarer words count more), and the pages holding the longest run of the message's words in a row come first:
     the variable parts break a run, the fixed text of the message does not.

   Each result links into its page: for a pasted message, to the innermost element with an id that holds the run (a
   symptom row, the cell showing the message; the page is read for it); for a few words, to the element with an id
   before the place where Pagefind found them densest (a section). tests/tools/search_cases.py measures it. */
(() => {
  const ZH = (document.documentElement.lang || "").toLowerCase().startsWith("zh");
  const TEXT = ZH ? {
    searching: "正在搜索……",
    found: (n) => `找到 ${n} 个页面。`,
    none: "没有找到包含这些词的页面。请检查拼写，或者换一个词试试。",
    more: "其他含有这些词（但不连在一起）的页面：",
    failed: "搜索索引没有加载（用 file:// 打开时搜索不可用，请通过网页服务器打开网站）。",
  } : {
    searching: "Searching…",
    found: (n) => (n === 1 ? "Found 1 page." : `Found ${n} pages.`),
    none: "No page holds these words. Check the spelling, or try another word.",
    more: "Other pages that hold these words (not together):",
    failed: "The search index did not load (search needs the site served over http, not opened as file://).",
  };
  const HAN = /[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]/;
  const TOKEN = /[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[\p{L}\p{N}_]+/gu;
  const STOP = new Set(["a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "of", "on", "or", "so", "that", "the", "this", "to", "was", "were", "with"]);
  const MESSAGE_WORDS = 4;   // a query of this many words or more is also searched word by word
  const LOADED = 40;         // a pasted message: the pages whose text is read to order them (the best-scored ones)
  const SHOWN_PLACES = 8;    // a pasted message: the first results, linked to the place in their page

  const tokens = (text) => (text.toLowerCase().match(TOKEN) || []);
  const escape = (s) => s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;",
    "'": "&#39;" })[c]);

  /* The words of a query that a pasted message is looked up by: English words and identifiers (not numbers or
     the query's stop words), each Chinese run whole. */
  const messageWords = (query) => {
    const words = [];
    for (const part of query.match(/[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[\p{L}\p{N}_]+/gu) || []) {
      const word = part.toLowerCase();
      if (HAN.test(word) || (!STOP.has(word) && !/^\d+$/.test(word) && word.length > 1)) words.push(word);
    }
    return [...new Set(words)];
  };

  /* Where the query stands in a page's text as typed: each Chinese run whole and the English words in this order
     (a plural s, es or a trailing number allowed: FSDP finds FSDP2). */
  const phraseTest = (query) => {
    const parts = query.trim().replace(/^"(.*)"$/, "$1").match(
      /[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[\p{L}\p{N}_.]+/gu) || [];
    if (!parts.length) return null;
    const latin = parts.filter((p) => !HAN.test(p)).map((p) => p.replace(/\.+$/, "").toLowerCase());
    const han = parts.filter((p) => HAN.test(p));
    const words = latin.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("[\\s\\-]+");
    const latinRe = words ? new RegExp(`(?<![\\p{L}\\p{N}_])${words}(?:s|es)?\\d*(?![\\p{L}\\p{N}_])`, "u") : null;
    return (text) => han.every((run) => text.includes(run)) && (!latinRe || latinRe.test(text));
  };

  /* The tokens of a page's text, in order. */
  const textTokens = (data) => tokens(data.content);

  /* The longest run of the query's tokens, in the query's order, that the page has in a row: [length, start]. */
  const longestRun = (queryTokens, list) => {
    const positions = new Map();
    list.forEach((t, i) => { if (!positions.has(t)) positions.set(t, []); positions.get(t).push(i); });
    let best = [0, -1];
    for (let i = 0; i < queryTokens.length; i++) {
      for (const p of positions.get(queryTokens[i]) || []) {
        let n = 1;
        while (i + n < queryTokens.length && list[p + n] === queryTokens[i + n]) n++;
        if (n > best[0]) best = [n, i];
      }
    }
    return best;
  };

  /* Where in the page the matched words are densest (Pagefind's word locations): the location starting the window of
     ``width`` words that holds the most weight. */
  const densest = (data, width) => {
    const spots = (data.weighted_locations || []).slice().sort((a, b) => a.location - b.location);
    const value = (spot) => spot.balanced_score;
    let best = null, weight = -1;
    for (let i = 0, j = 0, sum = 0; i < spots.length; i++) {
      while (j < spots.length && spots[j].location < spots[i].location + width) sum += value(spots[j++]);
      if (sum > weight) { weight = sum; best = spots[i].location; }
      sum -= value(spots[i]);
    }
    return best;
  };

  /* The nearest element with an id at or before word ``location`` (a symptom row, a cell, a section), and the
     section it is in (its anchor, derived from the heading's text: tools/site.py's heading_id). */
  const anchorBefore = (data, location) => {
    let found = null, section = null;
    for (const anchor of data.anchors || []) {
      if (anchor.location > location || !anchor.id) continue;
      if (!found || anchor.location >= found.location) found = anchor;
      if (anchor.element === "section" && (!section || anchor.location >= section.location)) section = anchor;
    }
    return [found, section];
  };

  const slug = (text) => text.toLowerCase().replace(/[^\p{L}\p{N}_]+/gu, "-").replace(/^-+|-+$/g, "");

  /* How high the query stands in the page's headings: 1 in its title (or every word of it there), 2 in a section's
     heading (a section's anchor is its heading's text), 9 in neither. */
  const headingLevel = (data, query) => {
    const wanted = slug(query.replace(/^"(.*)"$/, "$1"));
    if (!wanted) return 9;
    const bare = (t) => t.replace(/(?:es|s)$/, "");  // hooks, hook
    const titleWords = new Set(tokens(data.meta.title || "").map(bare));
    const queryWords = tokens(query).filter((t) => !HAN.test(t) && !STOP.has(t)).map(bare);
    const hanRuns = query.match(/[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+/g) || [];
    if (slug(data.meta.title || "").includes(wanted) || (queryWords.length + hanRuns.length > 0
        && queryWords.every((w) => titleWords.has(w)) && hanRuns.every((r) => (data.meta.title || "").includes(r)))) {
      return 1;  // the title says it, or holds every word of it (Hooks for saved tensors: saved tensor hooks)
    }
    return (data.anchors || []).some((a) => /^(section|span)$/.test(a.element) && a.id && !a.id.startsWith("symptom")
      && slug(a.id).includes(wanted)) ? 2 : 9;
  };

  const pageUrl = (data) => data.url.split("#")[0];
  const sectionName = (section) => (section ? section.id.replace(/^\d+-+/, "").replace(/-/g, " ") : null);

  const render = (target, ordered, more) => {
    target.innerHTML = "";
    const summary = document.createElement("p");
    summary.className = "search-summary";
    summary.textContent = ordered.length + more.length ? TEXT.found(ordered.length + more.length) : TEXT.none;
    target.appendChild(summary);
    const list = (items, className) => {
      const ul = document.createElement("ul");
      ul.className = `search hooklab-search-results ${className}`;
      for (const item of items) {
        const li = document.createElement("li");
        const url = item.anchor ? `${pageUrl(item.data)}#${item.anchor.id}` : pageUrl(item.data);
        const section = item.section ? `<span class="hooklab-result-section"> › ${escape(item.section)}</span>` : "";
        li.innerHTML = `<a class="hooklab-result" href="${escape(url)}">${escape(item.data.meta.title || url)}` +
          `</a>${section}<p class="context">${item.excerpt || item.data.excerpt || ""}</p>`;
        ul.appendChild(li);
      }
      return ul;
    };
    if (ordered.length) target.appendChild(list(ordered, "hooklab-search-main"));
    if (more.length) {
      const note = document.createElement("p");
      note.className = "hooklab-search-more-note";
      note.textContent = TEXT.more;
      target.appendChild(note);
      target.appendChild(list(more, "hooklab-search-more"));
    }
    target.dataset.done = "true";
  };

  /* Each item's link into its page: the element with an id before the densest place of ``data``'s matches. */
  const pointInto = (item, data, width) => {
    const location = densest(data, width);
    if (location === null) return item;
    const [anchor, section] = anchorBefore(data, location);
    return { ...item, data, anchor, section: sectionName(section) };
  };

  /* The innermost element with an id in the page at ``url`` whose text holds ``run`` (tokens joined by spaces): a
     symptom row, a cell, else a section; and the section it is in. The page is fetched and parsed (the browser
     keeps it for the visit that follows). */
  const placeInPage = async (url, run) => {
    if (!run) return null;
    try {
      const html = await (await fetch(url)).text();
      const doc = new DOMParser().parseFromString(html, "text/html");
      const article = doc.querySelector("article.bd-article") || doc.body;
      let found = null;
      for (const element of article.querySelectorAll("[id]")) {
        if (` ${tokens(element.textContent).join(" ")} `.includes(` ${run} `)) found = element;
      }
      if (!found) return null;
      const section = found.closest("section[id]");
      // the excerpt: the element's text around the run's longest word, that word marked
      const text = found.textContent.replace(/\s+/g, " ").trim();
      const word = run.split(" ").reduce((a, b) => (b.length > a.length ? b : a), "");
      const at = Math.max(0, text.toLowerCase().indexOf(word) - 80);
      const cut = text.slice(at, at + 240);
      const marked = !word ? escape(cut) : escape(cut).replace(
        new RegExp(`(${word.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")})`, "i"), "<mark>$1</mark>");
      return { id: found.id, section: section && section !== found ? { id: section.id } : null,
               excerpt: (at > 0 ? "… " : "") + marked + (at + 240 < text.length ? " …" : "") };
    } catch (error) {
      return null;  // the page could not be read: the result links to the page
    }
  };

  /* A pasted message: pages scored by the message's words they hold (each looked up alone, rarer words count more),
     then ordered by the longest run of the message's tokens they hold in a row; the top ones link to where the run
     is in the page (a symptom row, the cell that shows the message). */
  const searchMessage = async (pagefind, query, words) => {
    const everything = await pagefind.search(null);
    const total = Math.max(1, everything.results.length);
    const alone = await Promise.all(words.map((w) => pagefind.search(w)));
    const score = new Map(), results = new Map();
    alone.forEach((found) => {
      const idf = Math.log(1 + (total - found.results.length + 0.5) / (found.results.length + 0.5));
      for (const r of found.results) {
        results.set(r.id, r);
        score.set(r.id, (score.get(r.id) || 0) + idf);
      }
    });
    const candidates = [...results.values()].sort((a, b) => score.get(b.id) - score.get(a.id)).slice(0, LOADED);
    const queryTokens = tokens(query);
    const items = (await Promise.all(candidates.map((r) => r.data()))).map((data, order) => {
      const [run, at] = longestRun(queryTokens, textTokens(data));
      return { data, run, runText: queryTokens.slice(at, at + run).join(" "), order };
    });
    items.sort((a, b) => (b.run - a.run) || (a.order - b.order));
    const pointed = await Promise.all(items.map(async (item, i) => {
      if (i >= SHOWN_PLACES || !item.run) return item;
      const place = await placeInPage(pageUrl(item.data), tokens(item.runText).length ? item.runText : "");
      return place ? { ...item, anchor: { id: place.id }, section: sectionName(place.section), excerpt: place.excerpt }
        : item;
    }));
    // among equal runs, a result pointing at a symptom row or a symptom's cell comes first
    const symptom = (item) => (item.anchor && /^symptom-/.test(item.anchor.id) ? 0 : 1);
    pointed.sort((a, b) => (b.run - a.run) || (symptom(a) - symptom(b)) || (a.order - b.order));
    return [pointed, []];
  };

  /* A few words: every page whose text holds them as typed (Pagefind's pages, and any page its words missed: the
     text of every page is checked), the page built around them first (the words in its title, then in a section's
     heading), then Pagefind's order; after them, under a line, Pagefind's pages that hold the words apart (all of
     them, when no page holds the words together: 混合精度钩子 is written nowhere, 混合精度 and 钩子 are). */
  const searchWords = async (pagefind, query) => {
    const primary = await pagefind.search(query);
    const rank = new Map(primary.results.map((r, i) => [r.id, i]));
    const everything = await pagefind.search(null);
    const holds = phraseTest(query);
    const all = await Promise.all(everything.results.map(async (r) => ({ r, data: await r.data() })));
    const found = new Map((await Promise.all(primary.results.map((r) => r.data()))).map((d, i) =>
      [primary.results[i].id, d]));
    const items = [];
    for (const { r, data } of all) {
      const together = holds ? holds(data.content.replace(/\u200B/g, "").toLowerCase()) : false;
      if (!together && !rank.has(r.id)) continue;
      let item = { data: found.get(r.id) || data, together, level: together ? headingLevel(data, query) : 9,
                   order: rank.has(r.id) ? rank.get(r.id) : primary.results.length + 1, anchor: null, section: null };
      if (found.has(r.id)) item = pointInto(item, found.get(r.id), 12);
      items.push(item);
    }
    items.sort((a, b) => (a.level - b.level) || (a.order - b.order));
    const together = items.filter((i) => i.together);
    return [together, items.filter((i) => !i.together)];
  };

  const search = async (pagefind, query) => {
    const words = messageWords(query);
    if (words.length >= MESSAGE_WORDS && !/^\s*".+"\s*$/.test(query)) return searchMessage(pagefind, query, words);
    return searchWords(pagefind, query);
  };

  const start = async () => {
    const target = document.getElementById("search-results");
    if (!target) return;
    const query = new URLSearchParams(window.location.search).get("q") || "";
    for (const input of document.querySelectorAll("input[name='q']")) input.value = query;
    if (!query.trim()) return;
    target.innerHTML = `<p class="search-summary">${TEXT.searching}</p>`;
    const root = document.documentElement.dataset.content_root || "./";
    let pagefind;
    try {
      pagefind = await import(new URL(`${root}pagefind/pagefind.js`, window.location.href).href);
      await pagefind.options({ baseUrl: new URL(root, window.location.href).pathname, excerptLength: 30 });
    } catch (error) {
      target.innerHTML = `<p class="search-summary">${TEXT.failed}</p>`;
      target.dataset.done = "true";
      return;
    }
    const [ordered, more] = await search(pagefind, query);
    render(target, ordered, more);
  };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
