/* The course website's search page (tools/site/_templates/search.html loads it; tools/site/build.py writes the index).

   The index is Pagefind's (https://pagefind.app), written after Sphinx by its extended binary, which segments Chinese
   into words; in the browser Pagefind segments a Chinese query with Intl.Segmenter, stems English, matches every
   word as a prefix (FSDP finds FSDP2) and ranks by BM25 with headings weighted. This script asks it and orders what
   it finds for the two kinds of query a learner types:

   - a few words (梯度累积, 混合精度钩子, hook order): the pages whose text holds the words as typed (each Chinese run
     whole, the English words in order), found by Pagefind or by reading every page's text (Pagefind 1.5's Chinese
     segmentation at indexing and in the browser can differ, and qualified names such as hooklab.HookScope are indexed
     as their parts), the page built around them first (the words in its title, then in its highest heading; at the
     same depth the page that says them most often), then Pagefind's order; after them, under a line of their own,
     Pagefind's pages that hold the words apart;
   - a pasted message (four or more words: an error or a warning as the learner's run printed it, with their own
     names, shapes and numbers): every word is also looked up alone, pages are scored by the words they hold
     (rarer words count more), and the pages holding the longest run of the message's words in a row come first:
     the variable parts break a run, the fixed text of the message does not. Among the pages holding nearly the
     longest run, the symptom index's row comes first, with the cell it names as the explanation, then the other
     symptom rows and cells, then the pages that only quote the message;
   - one word that is an anchor's name (a hook matrix cell's key, forward-hook@compile): that place first;
   - a learner's own words (hook not firing, 钩子没有被调用, 显存一直涨), when no heading of the course says the query
     as typed and no page quotes it as a message: the course's place (a symptom, a kind of symptom, a section) that
     course.ask ranks first, first (hooklab-ask.js ranks the site's copy of its
     index as hooklab/course/asking.py does: BM25 over each place's whole text in both languages, learners' phrases
     as one term each, a title that says the query weighing more).

   Each result links into its page: for a pasted message, to the innermost element with an id that holds the run (a
   symptom row, the cell showing the message; the page is read for it); for a few words, to the element with an id
   before the place where Pagefind found them densest (a section). tests/tools/search_cases.py measures it. */
(() => {
  const ZH = (document.documentElement.lang || "").toLowerCase().startsWith("zh");
  const ROOT = document.documentElement.dataset.content_root || "./";  // the language's site, relative to this page
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
    // words apart by spaces or hyphens, or by @ where the query has one (a hook matrix cell's key)
    const apart = query.includes("@") ? "[\\s\\-@]+" : "[\\s\\-]+";
    const words = latin.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(apart);
    const latinRe = words ? new RegExp(`(?<![\\p{L}\\p{N}_])${words}(?:s|es)?\\d*(?![\\p{L}\\p{N}_])`, "u") : null;
    return (text) => han.every((run) => text.includes(run)) && (!latinRe || latinRe.test(text));
  };

  /* How often a page's text says the query as typed (as phraseTest finds it): the fewest times any of its parts
     stands there, each Chinese run whole and the English words in order. */
  const phraseCount = (query) => {
    const parts = query.trim().replace(/^"(.*)"$/, "$1").match(
      /[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[\p{L}\p{N}_.]+/gu) || [];
    const latin = parts.filter((p) => !HAN.test(p)).map((p) => p.replace(/\.+$/, "").toLowerCase());
    const han = parts.filter((p) => HAN.test(p));
    const apart = query.includes("@") ? "[\\s\\-@]+" : "[\\s\\-]+";
    const words = latin.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(apart);
    const latinRe = words ? new RegExp(`(?<![\\p{L}\\p{N}_])${words}(?:s|es)?\\d*(?![\\p{L}\\p{N}_])`, "gu") : null;
    return (text) => Math.min(...han.map((run) => text.split(run).length - 1),
                              ...(latinRe ? [(text.match(latinRe) || []).length] : []), Infinity);
  };

  /* Whether a page's text holds a Chinese query's words apart, without knowing where the words end: every run of Han
     characters in the query splits into pieces of two or more characters that each stand somewhere in the text
     (模块钩子句柄: 模块, 钩子 and 句柄), and every other word of it stands there too. Pagefind finds such a page only when
     its own segmenter cut the page's text where it cut the query; this finds the rest. */
  const heldApart = (query) => {
    const runs = query.match(/[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+/g) || [];
    if (!runs.length) return null;
    const latin = (query.match(/[\p{L}\p{N}_]+/gu) || []).filter((w) => !HAN.test(w)).map((w) => w.toLowerCase());
    const splits = (run, text) => {
      const ok = [true];  // ok[i]: run's first i characters split into pieces the text holds
      for (let end = 2; end <= run.length; end += 1) {
        ok[end] = false;
        for (let start = end - 2; start >= 0 && !ok[end]; start -= 1) {
          ok[end] = Boolean(ok[start]) && text.includes(run.slice(start, end));
        }
      }
      return Boolean(ok[run.length]);
    };
    return (text) => runs.every((run) => splits(run, text)) && latin.every((w) => text.includes(w));
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
     section it is in (its anchor, derived from the heading's text: tools/site/pages.py's heading_id). */
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

  /* How high the query stands in the page's headings: 1 in its title (or every word of it there); else the level of the
     highest heading that holds it (2 for a section's h2 … 6 for an h6), 9 in none. A heading is found by the anchor
     made from its text (a section's, or the span beside it); its level by the weight Pagefind gave the query's words
     between that anchor and the next (a heading's words weigh 7 in an h1 down to 2 in an h6, the text's 1), read
     from ``located``, the page as Pagefind found it for the query (3 where Pagefind did not find the page). The
     anchors the site or the symptom index names by an id of their own (a symptom row's row-<id>, a cell's
     symptom-<id>, a hook matrix cell's family@context) are not made from a heading's text and do not count. So the
     notebook with a section about the words comes before the symptom index, whose rows are fourth-level headings
     that say them too. */
  const EXPLICIT = /^(symptom|row|msg|kind|explain|matrix)-|@/;
  const headingLevel = (data, query, located) => {
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
    const anchors = (data.anchors || []).filter((a) => a.id).sort((a, b) => a.location - b.location);
    const weights = (located && located.weighted_locations) || [];
    let level = 9;
    anchors.forEach((anchor, i) => {
      if (!/^(section|span)$/.test(anchor.element) || EXPLICIT.test(anchor.id) || !slug(anchor.id).includes(wanted)) {
        return;
      }
      const next = anchors.slice(i + 1).find((a) => a.location > anchor.location);
      const end = next ? next.location : Infinity;
      const weight = Math.max(0, ...weights.filter((w) => w.location >= anchor.location && w.location < end)
        .map((w) => w.weight));
      level = Math.min(level, weight >= 2 ? 8 - Math.round(weight) : 3);
    });
    return level;
  };

  const pageUrl = (data) => data.url.split("#")[0];
  /* The course's own pages: the notebooks and the symptom index. */
  const isCourse = (data) => /^(?:\d\d_|symptoms\.html)/.test(pageUrl(data).split("/").pop());
  /* A recipes page (recipes.html, recipes-NN_area.html) collects questions about many topics, a library profile's
     page (profiles-<library>.html) names the library's own features (checkpoint_wrapper: FSDP's activation
     checkpointing): at the same depth the course's page that teaches the topic comes first, so such a page's title
     counts as a section heading, its sections as subsections. */
  const isAside = (data) => /^(?:recipes|profiles)[-.]/.test(pageUrl(data).split("/").pop());
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

  /* A page of the site, fetched and parsed once per search (the browser keeps it for the visit that follows); null
     when it cannot be read. */
  const documents = new Map();
  const readPage = (url) => {
    if (!documents.has(url)) {
      documents.set(url, fetch(url).then((answer) => answer.text())
        .then((html) => new DOMParser().parseFromString(html, "text/html")).catch(() => null));
    }
    return documents.get(url);
  };

  /* What an element is to a pasted message: a row of the symptom index ("row": a section of the symptom page, which
     tools/site/conf.py marks hooklab-symptom-row, or a row of notebook 00's table, symptom-row-<id>), a notebook cell
     the index links to ("cell": one holding a symptom-<id> or explain-NN-<cell> anchor, as its id or in an empty span
     of its own), or null. */
  const kindOf = (element) => {
    if (element.matches("section.hooklab-symptom-row, tr[id^='symptom-row-']")) return "row";
    const names = [element.id, ...Array.from(element.querySelectorAll(":scope > span[id]"), (span) => span.id)];
    return element.matches("div.cell") && names.some((id) => /^(symptom|explain)-/.test(id)) ? "cell" : null;
  };

  /* Where ``run`` (tokens joined by spaces) is in the page ``doc``: the element named ``wanted`` (a cell a symptom
     row links to) when given, else the innermost element with an id whose text holds the run, a symptom row or cell
     first, then the one holding most of the message's tokens (``queryTokens``), then the first; with its kind, the
     cells it links to (a row's), the section it is in and an excerpt (its text around the run's longest word, that
     word marked). */
  const placeIn = (doc, run, queryTokens, wanted) => {
    if (!doc) return null;
    const article = doc.querySelector("article.bd-article") || doc.body;
    const holds = (element) => ` ${tokens(element.textContent).join(" ")} `.includes(` ${run} `);
    let found = null, name = null;
    if (wanted) {
      const element = doc.getElementById(wanted);
      found = element && element.tagName === "SPAN" && !element.textContent.trim() ? element.parentElement : element;
      name = found ? wanted : null;
    }
    if (!found && run) {
      const holding = Array.from(article.querySelectorAll("[id]")).filter(holds);
      const innermost = holding.filter((element) => !holding.some((other) => other !== element
        && element.contains(other)));
      const asked = new Set(queryTokens);
      const covered = (element) => new Set(tokens(element.textContent).filter((t) => asked.has(t))).size;
      const rank = (element) => [kindOf(element) ? 0 : 1, -covered(element)];
      found = innermost.map((element, i) => [rank(element), i, element])
        .sort((a, b) => (a[0][0] - b[0][0]) || (a[0][1] - b[0][1]) || (a[1] - b[1])).map((x) => x[2])[0] || null;
    }
    if (!found) return null;
    const kind = kindOf(found);
    const links = kind !== "row" ? [] : Array.from(found.querySelectorAll("a.reference.internal[href]"),
      (a) => a.getAttribute("href")).filter((href) => /^\d\d_\w+\.html#./.test(href));
    const section = found.closest("section[id]");
    const text = found.textContent.replace(/\s+/g, " ").trim();
    const word = run.split(" ").reduce((a, b) => (b.length > a.length ? b : a), "");
    const at = Math.max(0, text.toLowerCase().indexOf(word) - 80);
    const cut = text.slice(at, at + 240);
    const marked = !word ? escape(cut) : escape(cut).replace(
      new RegExp(`(${word.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")})`, "i"), "<mark>$1</mark>");
    return { id: name || found.id, kind, links, section: section && section !== found ? { id: section.id } : null,
             excerpt: (at > 0 ? "… " : "") + marked + (at + 240 < text.length ? " …" : "") };
  };

  /* A pasted message: pages scored by the message's words they hold (each looked up alone, rarer words count more),
     then ordered by the longest run of the message's tokens they hold in a row; the top ones link to where the run
     is in the page. Among the pages that hold nearly the longest run (CLOSE of it: a page quoting the message with
     its "RuntimeError:" holds one token more than the symptom row, which gives the words), the symptom index's row
     comes first with the cell it names as the one that explains the message; then the other symptom rows and cells;
     then the pages that only quote the message (the hook matrix's observed errors, another notebook's output). */
  const CLOSE = 0.8;
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
    const place = async (item, wanted) => {
      const found = placeIn(await readPage(pageUrl(item.data)), item.runText, queryTokens, wanted);
      return found ? { ...item, anchor: { id: found.id }, kind: found.kind, links: found.links,
                       section: sectionName(found.section), excerpt: found.excerpt } : item;
    };
    const pointed = await Promise.all(items.map((item, i) => (i < SHOWN_PLACES && item.run ? place(item) : item)));
    const longest = pointed.length ? pointed[0].run : 0;
    const close = (item) => item.run > 0 && item.run >= CLOSE * longest;
    // the symptom row holding the longest run, and the cells it links to (the cell that explains the message)
    const row = pointed.find((item) => close(item) && item.kind === "row");
    const named = new Map();
    for (const href of (row && row.links) || []) {
      const [page, id] = href.split("#");
      if (!named.has(page)) named.set(page, decodeURIComponent(id));
    }
    const explained = await Promise.all(pointed.map((item) => {
      const id = item === row ? null : named.get(pageUrl(item.data).split("/").pop());
      return id ? place(item, id).then((placed) => ({ ...placed, named: placed.anchor && placed.anchor.id === id }))
        : item;
    }));
    const group = (item) => (item === row || item.named ? 0 : !close(item) ? 3 : item.kind ? 1 : 2);
    explained.sort((a, b) => (group(a) - group(b)) || (b.run - a.run) || ((a.kind === "row" ? 0 : 1)
      - (b.kind === "row" ? 0 : 1)) || (a.order - b.order));
    return [explained, [], longest];
  };

  /* A few words: every page whose text holds them as typed (Pagefind's pages, and any page its words missed: the
     text of every page is checked), the page built around them first (the words in its title, then in a section's
     heading; at the same depth, the page that says them more often: Pagefind's BM25, which caps a word's count and
     discounts a long page, put recipe pages that name a course term in their title among many others before the
     notebook or the recipe page that says it most), then Pagefind's order; after them, under a line, Pagefind's pages
     that hold the words apart (all of them, when no page holds the words together: 混合精度钩子 is written nowhere,
     混合精度 and 钩子 are). */
  const searchWords = async (pagefind, query) => {
    const primary = await pagefind.search(query);
    const rank = new Map(primary.results.map((r, i) => [r.id, i]));
    const everything = await pagefind.search(null);
    const holds = phraseTest(query);
    const says = phraseCount(query);
    const apart = heldApart(query);
    const all = await Promise.all(everything.results.map(async (r) => ({ r, data: await r.data() })));
    const found = new Map((await Promise.all(primary.results.map((r) => r.data()))).map((d, i) =>
      [primary.results[i].id, d]));
    const items = [];
    for (const { r, data } of all) {
      const text = data.content.replace(/\u200B/g, "").toLowerCase();
      const together = holds ? holds(text) : false;
      if (!together && !rank.has(r.id) && !(apart && apart(text))) continue;
      let item = { data: found.get(r.id) || data, together,
                   level: together ? headingLevel(data, query, found.get(r.id)) + (isAside(data) ? 1 : 0) : 9,
                   count: together ? says(text) : 0,
                   order: rank.has(r.id) ? rank.get(r.id) : primary.results.length + 1, anchor: null, section: null };
      if (found.has(r.id)) item = pointInto(item, found.get(r.id), 12);
      items.push(item);
    }
    items.sort((a, b) => (a.level - b.level) || (b.count - a.count) || (a.order - b.order));
    const together = items.filter((i) => i.together);
    return [together, items.filter((i) => !i.together)];
  };

  /* A learner's own words (hook not firing, 钩子没有被调用, grad is None after backward, 显存一直涨): when no heading
     of the course says the query as typed and no page quotes it as a message, the course's place that course.ask
     ranks first comes first (learnerFirst). */
  const QUOTED = 6;        // a pasted message the site quotes: this many of its tokens in a row on a page
  /* The best of the course's own places for the query (a symptom, a section), ranked as course.ask ranks them
     (hooklab-ask.js, with the index tools/site/ask_index.py writes), first, linked to its anchor; then the other pages
     as found. ``within``: a place on these pages first (a few words that pages hold as typed), else the best of all. */
  const learnerFirst = async (query, ordered, more, within, pasted) => {
    let index;
    try {
      index = await window.hooklabAsk.load(ROOT);
    } catch (error) {
      return [ordered, more];  // no index (an old build): the pages as found
    }
    const base = new URL(ROOT, window.location.href).pathname;
    const ranked = window.hooklabAsk.rank(index, query);
    const best = (within && ranked.find((place) => within.has(base + place.link.split("#")[0]))) || ranked[0];
    if (!best) return [ordered, more];
    const [path, id] = best.link.split("#");
    const url = base + path, other = (item) => pageUrl(item.data) !== url;
    const found = ordered.find((item) => !other(item)) || more.find((item) => !other(item));
    const data = found ? found.data : { url, meta: { title: best.title }, excerpt: "" };
    const first = { ...(found || {}), data, anchor: id ? { id } : null,
                    section: data.meta.title !== best.title ? best.title : null };
    // a few words no page holds as typed: the first list stays empty, the place heads the pages holding them apart
    if (!pasted && !ordered.length) return [[], [first, ...more.filter(other)]];
    return [[first, ...ordered.filter(other)], more.filter(other)];
  };

  /* The page with an element whose anchor is the query, typed as one word (a hook matrix cell's key,
     full-backward-hook@autograd-grad, which the matrix page tells the reader to search for: tools/site/conf.py gives
     its row that anchor) or, for a matrix cell, as the words of its key (full backward hook compiled autograd), and
     that anchor; null when none is. */
  const anchorNamed = async (pagefind, query) => {
    const name = query.trim().toLowerCase();
    if (!name) return null;
    const words = name.split(/[\s\-@]+/).join("-");
    const named = (a) => a.id && (a.id.toLowerCase() === name
      || (a.id.includes("@") && a.id.toLowerCase().replace(/@/g, "-") === words));
    const everything = await pagefind.search(null);
    for (const data of await Promise.all(everything.results.map((r) => r.data()))) {
      const anchor = (data.anchors || []).find(named);
      if (anchor) return { data, anchor };
    }
    return null;
  };

  const search = async (pagefind, query) => {
    const words = messageWords(query);
    const pasted = words.length >= MESSAGE_WORDS && !/^\s*".+"\s*$/.test(query);
    let [ordered, more, longest] = pasted ? await searchMessage(pagefind, query, words)
      : await searchWords(pagefind, query);
    // a learner's own words: the course's place that course.ask ranks first comes first, unless the query is a
    // pasted message the site quotes (a run of QUOTED tokens) or words a heading of the course's own pages (the
    // notebooks, the symptom index) says as typed: a recipe's heading quotes its asker, a library profile's names
    // the library's own feature; for a few words that pages hold as typed, a place on one of those pages first
    const quoted = pasted ? longest >= QUOTED : ordered.some((item) => item.level <= 6 && isCourse(item.data));
    const within = !pasted && ordered.length ? new Set(ordered.map((item) => pageUrl(item.data))) : null;
    if (!quoted) [ordered, more] = await learnerFirst(query, ordered, more, within, pasted);
    const named = await anchorNamed(pagefind, query);
    if (!named) return [ordered, more];
    const url = pageUrl(named.data), other = (item) => pageUrl(item.data) !== url;
    const found = ordered.find((item) => !other(item)) || more.find((item) => !other(item));
    const [, section] = anchorBefore(named.data, named.anchor.location);
    return [[{ ...(found || {}), data: named.data, anchor: named.anchor, section: sectionName(section) },
             ...ordered.filter(other)], more.filter(other)];
  };

  const start = async () => {
    const target = document.getElementById("search-results");
    if (!target) return;
    const query = new URLSearchParams(window.location.search).get("q") || "";
    for (const input of document.querySelectorAll("input[name='q']")) input.value = query;
    if (!query.trim()) return;
    target.innerHTML = `<p class="search-summary">${TEXT.searching}</p>`;
    const root = ROOT;
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
