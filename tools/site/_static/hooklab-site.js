/* The course website (tools/site/conf.py).

   The link to the other language keeps the reader's place: both sites have the same sections in the same order
   (every Chinese cell has its English twin), so the link carries the number of the section being read
   (#hooklab-section-N), and the other page scrolls to its own N-th section on arrival. */
(() => {
  const sections = () => Array.from(document.querySelectorAll("article.bd-article section[id]"));
  const current = () => {
    let index = -1;
    sections().forEach((section, i) => {
      // the last section that starts in the top third of the window or above it: the one being read (the theme's
      // sticky header and scroll padding put a section reached by a link some way below the window's top)
      if (section.getBoundingClientRect().top <= window.innerHeight / 3) index = i;
    });
    return index;
  };
  document.addEventListener("click", (event) => {
    const link = event.target.closest("a.hooklab-language-link");
    if (!link) return;
    const index = current();
    const base = link.getAttribute("href").split("#")[0];
    link.setAttribute("href", index > 0 ? `${base}#hooklab-section-${index}` : base);
  });
  const arrive = () => {
    const match = /^#hooklab-section-(\d+)$/.exec(window.location.hash);
    if (!match) return;
    const target = sections()[Number(match[1])];
    if (!target) return;
    history.replaceState(null, "", `#${target.id}`);
    target.scrollIntoView();
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", arrive);
  else arrive();
})();

/* Printing from dark mode: the page is light while the browser prints (the print styles in hooklab-site.css give
   dark text on white already; this also gives the code its light colours), then as it was. */
(() => {
  let before = null;
  window.addEventListener("beforeprint", () => {
    before = document.documentElement.dataset.theme;
    if (before === "dark") document.documentElement.dataset.theme = "light";
  });
  window.addEventListener("afterprint", () => {
    if (before === "dark") document.documentElement.dataset.theme = before;
    before = null;
  });
})();

/* The symptom index's tables (the coverage per source: six columns) on a phone: each cell carries its column's name
   (data-label), which hooklab-site.css shows before the number when it lays a row out as a card under 720 px. */
(() => {
  const label = () => {
    for (const table of document.querySelectorAll("section.hooklab-symptom-index table")) {
      const names = Array.from(table.querySelectorAll("thead th"), (th) => th.textContent.trim());
      if (!names.length) continue;
      for (const row of table.querySelectorAll("tbody tr")) {
        Array.from(row.children).forEach((cell, i) => { if (names[i]) cell.dataset.label = names[i]; });
      }
      table.classList.add("hooklab-labelled");
    }
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", label);
  else label();
})();

/* The recipe index (tools/recipes/pages.py: index_page): the box above the chapters filters every list of the page as
   the reader types (each word must appear in an item, without case), and a chapter with nothing left is hidden. */
(() => {
  const start = () => {
    const input = document.querySelector(".hooklab-recipe-filter input");
    if (!input) return;
    const article = input.closest("article") || document.body;
    const items = Array.from(article.querySelectorAll("section li"));
    const text = new Map(items.map((li) => [li, li.textContent.toLowerCase()]));
    const sections = Array.from(article.querySelectorAll("section section"));
    input.addEventListener("input", () => {
      const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      for (const li of items) li.hidden = words.length > 0 && !words.every((w) => text.get(li).includes(w));
      for (const section of sections) {
        const lis = Array.from(section.querySelectorAll("li"));
        section.hidden = words.length > 0 && lis.length > 0 && lis.every((li) => li.hidden);
      }
    });
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
