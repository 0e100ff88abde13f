/* The Chinese site's search page (tools/site/conf.py adds this file after Sphinx's translations.js): Sphinx 8's
   search script asks for message ids that its Chinese catalogue does not have yet, so the result line was English. */
Documentation.addTranslations({
  locale: "zh_CN",
  plural_expr: "0",
  messages: {
    "Search finished, found one page matching the search query.":
      ["搜索完成，找到 ${resultCount} 个包含这些词的页面。"],
    "Search finished, found ${resultCount} pages matching the search query.":
      ["搜索完成，找到 ${resultCount} 个包含这些词的页面。"],
    "Your search did not match any documents. Please make sure that all words are spelled correctly and that you've selected enough categories.":
      "没有找到包含这些词的页面。请检查拼写，或者换一个词试试。",
  },
});

/* Chinese phrases: the index holds pairs of adjacent Han characters (tools/site/conf.py), so a page that has every
   pair of a phrase is found, also where the pairs stand apart (反向前置钩子 on a page with 反向, 向前 and 前置钩子
   but not the phrase). A query with Han phrases therefore keeps only the pages whose text holds each phrase whole:
   the text of each page Sphinx found is fetched (as Sphinx fetches it for the result's summary, and cached by the
   browser), and the results are shown once checked. */
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || typeof _displayNextItem === "undefined") return;  // not the search page
  const phrasesOf = (query) => query.match(/[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}/g) || [];
  const originalQuery = Search.query;
  Search.query = (query) => {
    const phrases = phrasesOf(query);
    if (!phrases.length) return originalQuery(query);
    const [searchQuery, searchTerms, excludedTerms, highlightTerms, objectTerms] = Search._parseQuery(query);
    const results = Search._performSearch(searchQuery, searchTerms, excludedTerms, highlightTerms, objectTerms);
    const root = document.documentElement.dataset.content_root || "";
    const texts = new Map();
    const pageText = (doc) => {
      if (!texts.has(doc))
        texts.set(doc, fetch(root + doc + DOCUMENTATION_OPTIONS.FILE_SUFFIX)
          .then((response) => response.text())
          .then((html) => Search.htmlToText(html)));
      return texts.get(doc);
    };
    Promise.all(results.map((item) => pageText(item[0])
        .then((text) => phrases.every((phrase) => text.includes(phrase)))
        .catch(() => true)))  // a page that cannot be read is kept, as Sphinx found it
      .then((keep) => {
        const kept = results.filter((_, i) => keep[i]);
        const highlight = new Set([...phrases, ...[...highlightTerms].filter((t) => !phrasesOf(t).length)]);
        _displayNextItem(kept, kept.length, searchTerms, highlight);
      });
  };
});
