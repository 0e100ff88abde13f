/* The course's own places ranked for a learner's own words, as course.ask(query, kinds=LEARNER_KINDS) ranks them
   (hooklab/course/asking.py): a port of its terms and scoring that reads the synonyms, stop words, weights and the
   index from _static/hooklab-ask.json (tools/site/ask_index.py writes it at each build). The search page
   (hooklab-search.js) puts the best place first; tests/tools/test_browser.py checks that it is Python's.

   window.hooklabAsk.load(root) -> the index (fetched once); window.hooklabAsk.rank(index, query) -> the places that
   match, best first, each {id, kind, link, title, score}. */
(() => {
  const CJK_RUN = /[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+/g;
  const WORD = /[a-z0-9_][a-z0-9_.]*[a-z0-9_]|[a-z0-9]/g;
  const escapeRe = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

  /* asking._stem: "called" / "calls" / "calling" -> "call", "fires" / "firing" -> "fir" ("loss", "class" stay). */
  const stem = (word) => {
    for (const suffix of ["ing", "ed", "s"]) {
      if (word.endsWith(suffix) && word.length - suffix.length >= 3 && !/(?:ss|us|is)$/.test(word)) {
        word = word.slice(0, -suffix.length);
        break;
      }
    }
    return word.endsWith("e") && word.length >= 4 ? word.slice(0, -1) : word;
  };

  /* asking.folded: what an input method types in full-width mode (ｂａｃｋｗａｒｄ, （）, the ideographic space) as
     ASCII (NFKC), then in lower case. */
  const folded = (text) => text.replace(/[\u3000\uff01-\uff5e]+/g, (run) => run.normalize("NFKC")).toLowerCase();

  /* asking.tokens, with the tables of ``index``. */
  const tokenizer = (index) => {
    const stop = new Set(index.stop);
    const groupOf = new Map();
    for (const [group, phrases] of Object.entries(index.synonyms)) for (const p of phrases) groupOf.set(p, group);
    const order = Object.keys(index.synonyms);
    const phrase = new RegExp([...groupOf.keys()].sort((a, b) => b.length - a.length).map((p) => (
      /^[\x00-\x7f]/.test(p) ? `(?<![a-z0-9_])${escapeRe(p)}(?:s|es)?(?![a-z0-9_])` : escapeRe(p))).join("|"), "g");
    return (text) => {
      const lower = folded(text);
      const out = [];
      for (const word of lower.match(WORD) || []) {
        if (stop.has(word)) continue;
        out.push(stem(word));
        const parts = word.split(/[._]/).filter((p) => p.length > 1 && !stop.has(p));
        if (parts.length > 1) out.push(...parts.map(stem));
      }
      for (const run of lower.match(CJK_RUN) || []) {
        for (let i = 0; i < Math.max(1, run.length - 1); i++) out.push(run.slice(i, i + 2));
      }
      const groups = new Set((lower.match(phrase) || []).map((p) => groupOf.get(p) || groupOf.get(p.slice(0, -1))
        || groupOf.get(p.slice(0, -2))));
      out.push(...order.filter((g) => groups.has(g)).map((g) => `~${g}`));
      return out;
    };
  };

  const loaded = new Map();
  const load = (root) => {
    if (!loaded.has(root)) {
      loaded.set(root, fetch(new URL(`${root}_static/hooklab-ask.json`, window.location.href).href)
        .then((answer) => answer.json()).then((index) => {
          index.tokens = tokenizer(index);
          index.number = new Map(index.vocabulary.map((term, i) => [term, i]));
          for (const place of index.places) {
            place.counts = new Map();
            place.length = 0;
            for (let i = 0; i < place.terms.length; i += 2) {
              place.counts.set(place.terms[i], place.terms[i + 1]);
              place.length += place.terms[i + 1];
            }
          }
          return index;
        }));
    }
    return loaded.get(root);
  };

  /* asking.query_terms: term number -> how much it counts (a ~group term group_weight times). */
  const queryTerms = (index, query) => {
    const counted = new Map();
    for (const term of index.tokens(query)) {
      const n = index.number.get(term);
      if (n === undefined) continue;  // a term no place holds: it scores nothing
      counted.set(n, (counted.get(n) || 0) + (term.startsWith("~") ? index.group_weight : 1));
    }
    return counted;
  };

  const bm25 = (index, query, place) => {
    let score = 0;
    for (const [n, times] of query) {
      const f = place.counts.get(n) || 0;
      if (f) score += times * index.idf[n] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * place.length / index.average));
    }
    return score;
  };

  /* asking.title_share: the share of the title's terms (weighed by idf) the question holds, in the title's language
     that says most. */
  const titleShare = (index, query, place) => {
    let best = 0;
    for (const title of place.titles) {
      const total = title.reduce((sum, n) => sum + index.idf[n], 0);
      if (total) best = Math.max(best, title.reduce((sum, n) => sum + (query.has(n) ? index.idf[n] : 0), 0) / total);
    }
    return best;
  };

  const rank = (index, query) => {
    // asking.has_words: a question of lone letters and punctuation ((?P<x>, .*+?) has nothing to rank by
    if (!index.tokens(query).some((term) => term.length > 1)) return [];
    const terms = queryTerms(index, query);
    const scored = [];
    for (const place of index.places) {
      let score = bm25(index, terms, place);
      score *= 1 + index.title_weight * titleShare(index, terms, place);
      if (score > 0) scored.push({ id: place.id, kind: place.kind, link: place.link, title: place.title, score });
    }
    return scored.sort((a, b) => (b.score - a.score) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  };

  window.hooklabAsk = { load, rank };
})();
