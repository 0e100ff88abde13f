/* The course website's search page (tools/site/_templates/search.html loads it; tools/site/build.py writes the index).

   The index is Pagefind's (https://pagefind.app), written after Sphinx by its extended binary, which segments Chinese
   into words; in the browser Pagefind segments a Chinese query with Intl.Segmenter, stems English, matches every
   word as a prefix (FSDP finds FSDP2) and ranks by BM25 with headings weighted. This script asks it and orders what
   it finds for the two kinds of query a learner types:

   - a few words (梯度累积, 混合精度钩子, hook order): the pages whose text holds the words as typed (each Chinese run
     whole, the English words in order), found by Pagefind or by reading every page's text (Pagefind 1.5's Chinese
     segmentation at indexing and in the browser can differ, and qualified names such as hooklab.HookScope are indexed
     as their parts), the page built around them first (the words in its title, then in its highest heading), then
     Pagefind's order; after them, under a line of their own, Pagefind's pages that hold the words apart;
   - a pasted message (four or more words: an error or a warning as the learner's run printed it, with their own
     names, shapes and numbers): every word is also looked up alone, pages are scored by the words they hold
     (rarer words count more), and the pages holding the longest run of the message's words in a row come first:
     the variable parts break a run, the fixed text of the message does not. Among the pages holding nearly the
     longest run, the symptom index's row comes first, with the cell it names as the explanation, then the other
     symptom rows and cells, then the pages that only quote the message;
   - one word that is an anchor's name (a hook matrix cell's key, forward-hook@compile): that place first;
   - a learner's own words (hook not firing, 钩子没有被调用, 显存一直涨), when no heading says the query as typed and no
     page quotes it as a message, or when it uses words the course does not (SYNONYMS): the place (a section, a
     symptom row, a kind of symptom, a recipe) whose heading says most of it in the course's words first.

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
    // words apart by spaces or hyphens, or by @ where the query has one (a hook matrix cell's key)
    const apart = query.includes("@") ? "[\\s\\-@]+" : "[\\s\\-]+";
    const words = latin.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(apart);
    const latinRe = words ? new RegExp(`(?<![\\p{L}\\p{N}_])${words}(?:s|es)?\\d*(?![\\p{L}\\p{N}_])`, "u") : null;
    return (text) => han.every((run) => text.includes(run)) && (!latinRe || latinRe.test(text));
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
  /* A recipes page (recipes.html, recipes-NN_area.html) collects questions about many topics: at the same depth the
     course's page that teaches the topic comes first, so a recipe page's title counts as a section heading, its
     sections as subsections. */
  const isRecipes = (data) => /^recipes[-.]/.test(pageUrl(data).split("/").pop());
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
     heading), then Pagefind's order; after them, under a line, Pagefind's pages that hold the words apart (all of
     them, when no page holds the words together: 混合精度钩子 is written nowhere, 混合精度 and 钩子 are). */
  const searchWords = async (pagefind, query) => {
    const primary = await pagefind.search(query);
    const rank = new Map(primary.results.map((r, i) => [r.id, i]));
    const everything = await pagefind.search(null);
    const holds = phraseTest(query);
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
                   level: together ? headingLevel(data, query, found.get(r.id)) + (isRecipes(data) ? 1 : 0) : 9,
                   order: rank.has(r.id) ? rank.get(r.id) : primary.results.length + 1, anchor: null, section: null };
      if (found.has(r.id)) item = pointInto(item, found.get(r.id), 12);
      items.push(item);
    }
    items.sort((a, b) => (a.level - b.level) || (a.order - b.order));
    const together = items.filter((i) => i.together);
    return [together, items.filter((i) => !i.together)];
  };

  /* A learner's own words (hook not firing, 钩子没有被调用, grad is None after backward, 显存一直涨): the words the course
     uses for the same thing (SYNONYMS: each learner's word or phrase, then the course's; applied to the query and to
     the headings alike), then the places of the site, each a heading with its anchor (a section, a symptom row, a
     kind of symptom, a recipe, a cell the symptom index names: their ids are made from their headings' or symptoms'
     words), scored by the query's words they hold (English words stemmed, Chinese as pairs of characters; rarer
     words count more, words no heading holds do not count; the course's Chinese words also read as the English
     words of the ids, SAME_WORDS). The best place, when it holds most of the query's weight, comes first, linked to
     its anchor (a recipe's weighs less than the course's own place at nearly equal words), the best place of
     another page second when it holds nearly as much, then the other pages as found. */
  const QUOTED = 6;        // a pasted message the site quotes: this many of its tokens in a row on a page
  const SYNONYMS = [
    // English: the learner's word -> the course's
    [/\b(?:not|never|no longer|isn't|is not|doesn't|does not|don't|didn't|won't|wont|cannot|can't|nothing|ignored|skipped|silently dropped)\b/g, " never "],
    [/\b(?:fir(?:e|es|ed|ing)|call(?:ed|s|ing)?|trigger(?:s|ed|ing)?|invok(?:e|es|ed|ing)|execut(?:e|es|ed|ing)|runs?|running|ran|work(?:s|ing)?|does nothing|has no effect|take effect)\b/g, " fire "],
    [/\b(?:twice|double|duplicated?|multiple times|many times|several times|repeated(?:ly)?|again|more than once)\b/g, " twice "],
    [/\b(?:none|null|nonetype)\b/g, " none "],
    [/\b(?:intermediate|non-leaf|non leaf) (?:tensors?|variables?|values?|results?)\b/g, " non leaf tensor "],
    [/\b(?:oom|out of memory|vram|gpu memory|memory)\b/g, " memory "],
    [/\b(?:leak(?:s|ing|ed)?|grow(?:s|ing)?|increas(?:es|ing)|keeps? (?:growing|increasing)|(?:kept|keeps?|stays?) alive|alive|free|freed|release[sd]?|del|piles? up)\b/g, " leak "],
    [/\b(?:nan|nans|inf|infinite|non-finite|nonfinite)\b/g, " nan "],
    [/\b(?:shape|size|dimensions?|dims?)\b/g, " shape "],
    [/\b(?:grads?|gradients?)\b/g, " grad "],
    [/\b(?:errors?|exceptions?|raises?|crash(?:es|ed)?|fails?|failing|failed)\b/g, " error "],
    [/\b(?:remove|removing|delete|deleting|unregister|get rid of|clear)\b/g, " remove "],
    [/\b(?:deep ?copy|deepcopy|copy|copies|copied|clone[sd]?)\b/g, " copy "],
    [/\b(?:torch\.compile|compiled?|compiling)\b/g, " compile "],
    [/\b(?:slow(?:s|er)?(?: down)?|speed|overhead|expensive|cost)\b/g, " cost "],
    [/\b(?:amp|autocast|fp16|bf16|half precision|mixed precision|gradscaler|grad scaler|loss scal\w*|scaled)\b/g, " amp "],
    [/\b(?:huge|big|large|too large|enormous)\b/g, " large "],
    [/\b(?:kwargs|keyword arguments?|keywords?)\b/g, " keyword "],
    [/\b(?:layers?|submodules?|modules?|blocks?)\b/g, " module "],
    [/\b(?:weights?|parameters?|params?)\b/g, " param "],
    [/\b(?:intermediate|hidden|inner|middle)\b/g, " intermediate "],
    [/\b(?:features?|activations?|outputs?)\b/g, " output "],
    [/\b(?:extract(?:ion|ing|s)?|get|grab|capture|record|save|store|log)\b/g, " extract "],
    [/\b(?:pickle|pickling|serializ\w*|torch\.save)\b/g, " pickle "],
    [/\b(?:zeros?|zeroed|blank)\b/g, " zero "],
    [/\b(?:explod\w*|blow(?:s|ing)? up)\b/g, " exploding "],
    [/\b(?:micro[- ]?batch(?:es)?|accumulat\w*)\b/g, " accumulation "],
    [/\b(?:frozen|freeze|requires_grad=false|no grad)\b/g, " frozen "],
    [/\b(?:averaged|average|all-?reduced?|synced)\b/g, " averaged "],
    // Chinese: the learner's words -> the course's
    [/没有被?触发|没被?触发|没有被调用|没被调用|不被调用|没有调用|不调用|不执行|没有执行|没执行|不生效|没生效|不起作用|没有作用|没反应|没有效果|失效|不运行|没有运行|没运行|没跑|不跑|从不触发|不会触发|不触发/g, " 不触发 "],
    [/触发了?(?:两次|两遍|多次|好几次)|执行了?(?:两次|两遍|多次|好几次)|跑了?(?:两次|两遍|多次|好几次)|调用了?(?:两次|两遍|多次|好几次)|重复触发|多次触发|又触发/g, " 触发两次 "],
    [/(?:为|是|变成|变为|成了)\s*(?:空的?|none|null)/g, " none "],
    [/执行|运行|调用/g, "触发"],
    [/显存|内存|存储空间/g, "内存"],
    [/泄漏|泄露|一直涨|一直增长|一直增加|越来越大|越来越多|不断增长|不释放|没有释放|没释放|暴涨|爆了|涨/g, " 泄漏 "],
    [/尺寸|维度|shape|形状/g, "形状"],
    [/报错|出错|错误|异常|崩溃|崩了/g, " 报错 "],
    [/删除|移除|去掉|注销|删掉|清除|卸掉/g, " 移除 "],
    [/深拷贝|深复制|拷贝|复制|deepcopy/g, " 复制 "],
    [/编译|torch\.compile|compile/g, " 编译 "],
    [/变慢|很慢|太慢|开销|耗时|拖慢/g, " 开销 "],
    [/顺序|先后/g, " 顺序 "],
    [/混合精度|半精度|autocast|gradscaler|fp16|bf16|\bamp\b/g, " 混合精度 "],
    [/特别大|很大|太大|变大|巨大/g, " 大 "],
    [/关键字参数|kwargs|关键字/g, " 关键字参数 "],
    [/中间变量|中间结果|中间张量|非叶子张量|非叶子节点/g, " 非叶子张量 "],
    [/微批次|micro ?batch|梯度累积/g, " 梯度累积 "],
    [/冻结的?|冻住的?|requires_grad=false/g, " 冻结 "],
    [/权重|参数/g, " 参数 "],
    [/全是零|全为零|全是 ?0|全零|都是零/g, " 零 "],
    [/检查点|checkpoint/g, " 检查点 "],
    // Chinese words that say nothing of the topic
    [/的|了|吗|呢|吧|啊|怎么办|怎么|为什么|如何|以后|之后|时候|一直|总是|我的|我|还是|还在|什么/g, " "],
  ];
  const normalized = (text) => ` ${text.toLowerCase().replace(/[\s_\-]+/g, " ")} `;
  const courseWords = (text) => SYNONYMS.reduce((t, [from, to]) => t.replace(from, to), normalized(text));
  const LEARNER_STOP = new Set([...STOP, "my", "i", "how", "what", "why", "when", "do", "does", "can", "after",
    "from", "all", "every", "each", "keeps", "keep", "one", "use", "uses", "using", "which", "there", "their",
    "some", "still", "only", "about", "while", "inside", "during", "per", "same", "other", "another", "we", "you",
    "get", "hook", "hooks"]);
  const stem = (word) => (word.length > 4 ? word.replace(/(?:ing|ed|es|s|e)$/, "") : word);
  /* The course's Chinese words as the English ones the places' ids are made of (a symptom row's row-<id>, a kind's,
     a recipe's id are English on the Chinese site too, beside the anchor made from the Chinese heading), applied to
     the query and to the places alike when matching them: 梯度为空 meets row-non-leaf-grad-is-none, and a Chinese
     heading that says .grad meets one that says 梯度. */
  const SAME_WORDS = [
    [/不触发/g, " never fire "], [/触发两次|两次|两遍|多次|好几次/g, " twice "], [/梯度累积/g, " accumulation "],
    [/非叶子张量/g, " non leaf tensor "], [/关键字参数/g, " keyword "], [/梯度/g, " grad "],
    [/反向传播|反向/g, " backward "], [/前向/g, " forward "], [/参数/g, " param "], [/内存/g, " memory "],
    [/泄漏/g, " leak "], [/报错/g, " error "], [/形状/g, " shape "], [/复制/g, " copy "], [/编译/g, " compile "],
    [/移除/g, " remove "], [/顺序/g, " order "], [/混合精度/g, " amp "], [/检查点/g, " checkpoint "],
    [/冻结/g, " frozen "], [/中间层|中间/g, " intermediate "], [/输出|特征/g, " output "],
    [/提取|拿到|获取|取出|记录/g, " extract "], [/注意力/g, " attention "], [/模块|层/g, " module "],
    [/零/g, " zero "], [/开销/g, " cost "], [/句柄/g, " handle "], [/设备/g, " device "], [/分片/g, " shard "],
    [/平均/g, " averaged "], [/裁剪/g, " clip "], [/掩码/g, " mask "], [/原地|\bin place\b/g, " inplace "],
    [/分支/g, " branch "], [/循环/g, " loop "], [/加载/g, " load "], [/缺少|缺失/g, " missing "],
    [/返回值|返回/g, " return "], [/不对|不正确|错了/g, " wrong "],
    [/修改|改变|改写|替换|改掉|改了/g, " change "],
    [/\b(?:modif(?:y|ies|ied|ying)|edit(?:s|ed|ing)?|chang(?:e|es|ed|ing)|alter(?:s|ed|ing)?|replac(?:e|es|ed|ing))\b/g,
      " change "],
  ];
  const sameWords = (text) => SAME_WORDS.reduce((t, [from, to]) => t.replace(from, to), text);
  /* The words of a text to match a learner's query by: English words stemmed (no stop words), and each pair of
     Chinese characters in a row. */
  const matchWords = (text) => {
    const out = new Map();  // word -> its share of a word of the text (a pair of characters of a run of n: 1/(n-1))
    const parts = sameWords(courseWords(text)).match(/[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[\p{L}\p{N}_]+/gu);
    for (const part of parts || []) {
      if (HAN.test(part)) {
        if (part.length === 1) out.set(part, 1);
        for (let i = 0; i + 1 < part.length; i++) out.set(part.slice(i, i + 2), 1 / (part.length - 1));
      } else if (!LEARNER_STOP.has(part) && !/^\d+$/.test(part)) out.set(stem(part), 1);
    }
    return out;
  };
  const PLACE_PREFIX = /^(?:row|kind|recipe|symptom|symptom-row|explain-\d+)-/;
  /* Every place of the site: a location of a page with the ids there, the one to link to (a symptom row, a kind, a
     recipe, a symptom's cell, else a section) and the words of its ids (the page's title with its first place). */
  let placesOf = null;
  const sitePlaces = async (pagefind) => {
    if (placesOf) return placesOf;
    const everything = await pagefind.search(null);
    const places = [];
    for (const data of await Promise.all(everything.results.map((r) => r.data()))) {
      const at = new Map();
      for (const anchor of data.anchors || []) {
        if (!anchor.id) continue;
        if (!at.has(anchor.location)) at.set(anchor.location, []);
        at.get(anchor.location).push(anchor);
      }
      const locations = [...at.keys()].sort((a, b) => a - b);
      locations.forEach((location, i) => {
        const anchors = at.get(location);
        // a message row (msg-<id>) is found by pasting the message: no place for a learner's own words, which
        // match its long id word by word by chance
        if (anchors.some((a) => /^msg-/.test(a.id))) return;
        const link = anchors.find((a) => /^(?:row|kind|recipe|symptom-row)-/.test(a.id))
          || anchors.find((a) => /^symptom-/.test(a.id)) || anchors.find((a) => a.element === "section") || anchors[0];
        const text = anchors.map((a) => a.id.replace(PLACE_PREFIX, "").replace(/^\d+[\-.]*/, "")).join(" ")
          + (i === 0 ? ` ${data.meta.title || ""}` : "");
        places.push({ data, anchor: link, location, words: matchWords(text.replace(/-/g, " ")),
                      matrix: anchors.some((a) => a.id.includes("@")) });
      });
    }
    placesOf = places;
    return places;
  };
  const learnerFirst = async (pagefind, query, ordered, more, within, pasted) => {
    const share = matchWords(query), wanted = [...share.keys()];
    if (!wanted.length) return [ordered, more];
    const places = await sitePlaces(pagefind);
    const df = new Map(wanted.map((w) => [w, places.filter((p) => p.words.has(w)).length]));
    const known = wanted.filter((w) => df.get(w) > 0);
    if (!known.length) return [ordered, more];
    const idf = (w) => share.get(w) * Math.log(1 + places.length / df.get(w));
    const total = known.reduce((sum, w) => sum + idf(w), 0);
    const scored = [];
    for (const place of places) {
      if (within && !within.has(pageUrl(place.data))) continue;
      const held = known.filter((w) => place.words.has(w));
      if (held.length < Math.min(2, known.length)) continue;
      // a hook matrix cell (family@context) only for a query that says every word of its key, the family's and the
      // context's words typed together: other words match its long key word by word by chance
      if (place.matrix && held.length < place.words.size) continue;
      // the share of the query's weight the place holds (a recipe's less: at nearly equal words the course's own
      // place, which explains the mechanism, comes first, as in course.ask), then how little else its heading says
      const score = held.reduce((sum, w) => sum + idf(w), 0) / total * (isRecipes(place.data) ? RECIPE_WEIGHT : 1);
      scored.push({ place, score, key: score + 0.1 * (held.length / place.words.size) });  // words: a Map
    }
    scored.sort((a, b) => b.key - a.key);
    const best = scored[0];
    if (!best || best.score < LEARNER_SHARE) return [ordered, more];
    // the best place first; the best place of another page second when it holds nearly as much of the query
    const chosen = [best.place];
    const runnerUp = scored.find((s) => pageUrl(s.place.data) !== pageUrl(best.place.data));
    if (runnerUp && runnerUp.score >= Math.max(LEARNER_SHARE, RUNNER_UP * best.score)) chosen.push(runnerUp.place);
    const urls = new Set(chosen.map((place) => pageUrl(place.data)));
    const other = (item) => !urls.has(pageUrl(item.data));
    const firsts = chosen.map((place) => {
      const url = pageUrl(place.data), mine = (item) => pageUrl(item.data) === url;
      const [, section] = anchorBefore(place.data, place.location);
      const found = ordered.find(mine) || more.find(mine) || {};
      return { ...found, data: found.data || place.data, anchor: place.anchor,
               section: sectionName(section && section.id !== place.anchor.id ? section : null) };
    });
    // a few words no page holds as typed: the first list stays empty, the places head the pages holding them apart
    if (!pasted && !ordered.length) return [[], [...firsts, ...more.filter(other)]];
    return [[...firsts, ...ordered.filter(other)], more.filter(other)];
  };
  const RECIPE_WEIGHT = 0.8;   // a recipe's place against the course's, at nearly equal words
  const RUNNER_UP = 0.8;       // the share of the best place's score the second place (another page) must reach
  const LEARNER_SHARE = 0.5;  // the share of the query's weight the best place must hold to come first

  /* The page with an element whose anchor is the query, typed as one word (a hook matrix cell's key,
     full-backward-hook@autograd-grad, which the matrix page tells the reader to search for: tools/site/conf.py gives
     its row that anchor), and that anchor; null when none is. */
  const anchorNamed = async (pagefind, query) => {
    const name = query.trim().toLowerCase();
    if (!name || /\s/.test(name)) return null;
    const everything = await pagefind.search(null);
    for (const data of await Promise.all(everything.results.map((r) => r.data()))) {
      const anchor = (data.anchors || []).find((a) => a.id && a.id.toLowerCase() === name);
      if (anchor) return { data, anchor };
    }
    return null;
  };

  const search = async (pagefind, query) => {
    const words = messageWords(query);
    const pasted = words.length >= MESSAGE_WORDS && !/^\s*".+"\s*$/.test(query);
    let [ordered, more, longest] = pasted ? await searchMessage(pagefind, query, words)
      : await searchWords(pagefind, query);
    // a learner's own words: the place whose heading says the same (in the course's words) first, unless the query
    // is a pasted message the site quotes (a run of QUOTED tokens), or a term the site says in a heading
    const quoted = pasted ? longest >= QUOTED : ordered.some((item) => item.level <= 6);
    const ownWords = courseWords(query).replace(/\s+/g, "") !== normalized(query).replace(/\s+/g, "");
    // (a few words that pages hold as typed, in the course's own words: the place is one of those pages)
    const within = !pasted && ordered.length && !ownWords ? new Set(ordered.map((item) => pageUrl(item.data))) : null;
    if (!quoted || (ownWords && !pasted)) [ordered, more] = await learnerFirst(pagefind, query, ordered, more, within, pasted);
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
