"""What the app's page carries besides its Blocks: the CSS (the phone layout, the cards of tables of class
``gfb-cards``, the toasts at the bottom) and the page's scripts. :mod:`geofidelity_bench.demo_app.ui` passes
them to ``launch()`` (gradio 6: ``css`` and ``head`` are launch arguments) and to the Score button.
"""

CSS = """
.gfb-unavailable textarea { font-style: italic; color: var(--body-text-color-subdued); }
#score-table td:nth-child(1), #score-table td:nth-child(2), #about td:nth-child(2) { white-space: nowrap; }
/* table headers break between words, never inside one ("condition", not "conditio n") */
#lb-table th, #lb-table th *, #score-ranking th, #score-ranking th * { word-break: normal !important; overflow-wrap: normal !important; hyphens: none; }
/* a phone: each score is a card (score and value on top, then what it means and how it compares with the
   anchors), instead of a four-column table squeezed into 330 px */
@media (max-width: 700px) {
  #score-table table, #score-table tbody, #score-table tr, #score-table td { display: block; width: auto; }
  #score-table table { border: none; }
  #score-table thead { display: none; }
  #score-table tr { border: 1px solid var(--border-color-primary); border-radius: 8px; margin: 0 0 10px 0; padding: 6px 10px; }
  #score-table td { border: none !important; padding: 2px 0 !important; white-space: normal !important; }
  #score-table td:nth-child(1), #score-table td:nth-child(2) { display: inline-block; font-weight: 600; }
  #score-table td:nth-child(2) { float: right; font-variant-numeric: tabular-nums; }
  #score-table td:nth-child(3)::before { content: "what it means here: "; font-style: italic; color: var(--body-text-color-subdued); }
  #score-table td:nth-child(4)::before { content: "vs the anchors: "; font-style: italic; color: var(--body-text-color-subdued); }
}
/* the tables of Explore, About and the Hub tab (class gfb-cards): on a wide screen a table whose numbers never
   break; on a phone, a table of three or more columns becomes one card per row (its first cell on top, then each
   cell under its column's name, which APP_HEAD's script copies into data-label), a two-column table wraps */
@media (min-width: 701px) {
  #explore-meta table { display: block; width: fit-content; max-width: 100%; overflow-x: auto; }
  #explore-meta th, #explore-meta td { white-space: nowrap; }
  #hub-board table { display: block; overflow-x: auto; max-width: 100%; }
  #hub-board th, #hub-board td { word-break: normal !important; overflow-wrap: normal !important; }
}
@media (max-width: 700px) {
  .gfb-cards table:has(th:nth-child(3)), .gfb-cards table:has(th:nth-child(3)) tbody,
  .gfb-cards table:has(th:nth-child(3)) tr, .gfb-cards table:has(th:nth-child(3)) td { display: block; width: auto; min-width: 0 !important; }
  .gfb-cards table:has(th:nth-child(3)) { border: none; overflow: visible; }
  .gfb-cards table:has(th:nth-child(3)) thead { display: none; }
  .gfb-cards table:has(th:nth-child(3)) tr { border: 1px solid var(--border-color-primary); border-radius: 8px; margin: 0 0 10px 0; padding: 6px 10px; }
  .gfb-cards table:has(th:nth-child(3)) td { border: none !important; padding: 1px 0 !important; white-space: normal !important; text-align: left !important; overflow-wrap: anywhere; }
  .gfb-cards table:has(th:nth-child(3)) td:first-child { font-weight: 600; }
  .gfb-cards table:has(th:nth-child(3)) td:not(:first-child)[data-label]::before { content: attr(data-label) ": "; font-style: italic; color: var(--body-text-color-subdued); }
  .gfb-cards table:has(th:nth-child(3)) td:empty { display: none; }
  .gfb-cards table:not(:has(th:nth-child(3))) { display: table; width: 100%; table-layout: fixed; }
  .gfb-cards table:not(:has(th:nth-child(3))) td, .gfb-cards table:not(:has(th:nth-child(3))) th { white-space: normal !important; overflow-wrap: break-word; word-break: normal; }
  .gfb-cards table:not(:has(th:nth-child(3))) th:first-child { width: 40%; }
  .gfb-cards pre, .gfb-cards pre code { white-space: pre-wrap !important; overflow-wrap: anywhere !important; }
  #submit-text pre, #submit-text pre code, #submit-text pre code * { white-space: pre-wrap !important; overflow-wrap: anywhere !important; }
  /* the pickers stacked, each as wide as the screen, their values whole */
  .gfb-pickers { flex-direction: column !important; }
  .gfb-pickers > * { width: 100% !important; max-width: 100% !important; min-width: 0 !important; }
  .gfb-pickers input, #score-block input { font-size: 13px !important; text-overflow: clip; }
}
/* the per-image ranking on a phone: image, best match and the target's rank (the similarities are in the JSON
   and on a wider screen), within the screen's width */
@media (max-width: 700px) {
  #score-ranking th:nth-child(n+5), #score-ranking td:nth-child(n+5), #score-ranking [role=gridcell]:nth-child(n+5) { display: none !important; }
  #score-ranking table { width: 100% !important; }
  #score-ranking td, #score-ranking td .cell-wrap, #score-ranking [role=gridcell] .cell-wrap { white-space: normal !important; overflow-wrap: anywhere !important; }
}
/* the tab bar wraps onto a second row on a narrow screen (gr.Tabs overflow_behavior="wrap") */
.tabs [role=tablist] { flex-wrap: wrap; row-gap: 2px; }
/* plots and photos at their own aspect ratio, captions under the picture, never cut */
#lb-plots .grid-wrap, #hub-plots .grid-wrap, #explore-gallery .grid-wrap { height: auto !important; max-height: none !important; overflow: visible !important; }
#lb-plots .thumbnail-item, #hub-plots .thumbnail-item, #explore-gallery .thumbnail-item { aspect-ratio: auto !important; height: auto !important; display: flex; flex-direction: column; align-items: center; }
#lb-plots .thumbnail-item img, #hub-plots .thumbnail-item img { width: auto !important; max-width: 100% !important; height: auto !important; object-fit: contain; }
#explore-gallery .thumbnail-item img { width: 100% !important; aspect-ratio: 4 / 3; height: auto !important; object-fit: cover; }
#lb-plots .caption-label, #hub-plots .caption-label, #explore-gallery .caption-label { position: static !important; max-width: 100% !important; white-space: normal !important; overflow: visible !important; text-overflow: clip !important; overflow-wrap: anywhere; transform: none !important; margin: 4px 0 0 0; }
/* About: headers break between words only ("range", never "rang e") */
#about th, #about th * { word-break: normal !important; overflow-wrap: normal !important; hyphens: none; white-space: nowrap; }
#about td, #about td * { word-break: normal !important; hyphens: none; }
/* Submit: commands keep their lines and scroll sideways inside their box */
#submit-text pre { overflow-x: auto; max-width: 100%; }
#submit-text pre code { white-space: pre; }
/* tables of numbers: digits line up */
#lb-table td, #hub-board td, #lb-cards dd { font-variant-numeric: tabular-nums; }
/* the leaderboard: the whole table on a wide screen (no sideways scroll at 1280 px), one card per row on a phone */
#lb-table table.header-table { width: 100% !important; }
#lb-table .sizing-body td, #lb-table .sizing-body .cell-wrap { white-space: normal !important; }
#lb-table .cell-wrap { padding-left: 3px !important; padding-right: 3px !important; }
#lb-table th, #lb-table td, #lb-table [role=gridcell] { font-size: 13px !important; }
/* the text columns (rank, method, condition, blocks or block and city, notes) wrap anywhere; numbers never */
#lb-table:has(th[title="block_id"]) .sizing-body td:nth-child(-n+6), #lb-table:has(th[title="block_id"]) .sizing-body td:nth-child(-n+6) .cell-wrap,
#lb-table:has(th[title="block_id"]) [role=gridcell]:nth-child(-n+6) .cell-wrap,
#lb-table:not(:has(th[title="block_id"])) .sizing-body td:nth-child(-n+5), #lb-table:not(:has(th[title="block_id"])) .sizing-body td:nth-child(-n+5) .cell-wrap,
#lb-table:not(:has(th[title="block_id"])) [role=gridcell]:nth-child(-n+5) .cell-wrap { overflow-wrap: anywhere !important; }
#lb-cards { display: none; }
@media (max-width: 700px) {
  #lb-table { display: none !important; }
  #lb-cards { display: block; }
}
.gfb-card { border: 1px solid var(--border-color-primary); border-radius: 8px; margin: 0 0 10px 0; padding: 8px 10px; }
.gfb-card.gfb-unranked { border-style: dashed; }
.gfb-card-head { font-weight: 600; }
.gfb-card-rank { display: inline-block; min-width: 2.2em; }
.gfb-card-sub { color: var(--body-text-color-subdued); font-size: 0.9em; }
.gfb-not-ranked { font-weight: 600; }
.gfb-card-notes { color: #7c2d12; font-size: 0.92em; margin: 2px 0; }
.gfb-card dl { display: grid; grid-template-columns: auto auto; column-gap: 10px; row-gap: 1px; margin: 4px 0 0 0; }
.gfb-card dt { color: var(--body-text-color-subdued); font-size: 0.92em; margin: 0; }
.gfb-card dd { margin: 0; text-align: right; }
.gfb-card dt.gfb-key, .gfb-card dd.gfb-key { font-weight: 700; color: var(--body-text-color); }
/* the copy warning: impossible to miss, at the top of the answer; no box at all when there is none */
#score-copy-warning:has(h3) { border: 2px solid #c2410c; background: #fff7ed; color: #7c2d12; border-radius: 8px; padding: 10px 14px; }
#score-copy-warning:has(h3) * { color: #7c2d12 !important; }
/* collapsed, not display:none: an answer's outputs keep their place, so the page scrolls to the first of them */
#score-copy-warning:not(:has(h3)) { height: 0 !important; min-height: 0 !important; padding: 0 !important; border: 0 !important; overflow: hidden; visibility: hidden; margin-bottom: calc(-1 * var(--layout-gap)); }
#score-copy-pairs .grid-wrap { height: auto !important; max-height: none !important; overflow: visible !important; }
#score-copy-pairs .thumbnail-item { aspect-ratio: auto !important; height: auto !important; }
#score-copy-pairs .thumbnail-item img { max-height: 240px; width: 100% !important; object-fit: contain; }
#score-copy-pairs .caption-label { position: static !important; max-width: 100% !important; white-space: normal !important; overflow: visible !important; text-overflow: clip !important; overflow-wrap: anywhere; transform: none !important; margin: 4px 0 0 0; }
#score-copy-pairs .thumbnail-item { display: flex; flex-direction: column; align-items: center; }
/* the Score plot: a wide grid on a wide screen, one plot a row on a phone (each a figure of its own) */
#score-plot-narrow { height: 0 !important; min-height: 0 !important; padding: 0 !important; border: 0 !important; overflow: hidden; visibility: hidden; }
@media (max-width: 700px) {
  #score-plot { height: 0 !important; min-height: 0 !important; padding: 0 !important; border: 0 !important; overflow: hidden; visibility: hidden; }
  #score-plot-narrow { height: auto !important; overflow: visible; visibility: visible; }
}
/* error messages at the bottom of the screen: they never cover the title */
.toast-wrap { top: auto !important; bottom: var(--size-3) !important; }
"""

#: The page's one script: copies each column's name into the cells of the tables of class ``gfb-cards``
#: (``data-label``), which a phone shows as cards with every value under its column's name (see CSS). Gradio's
#: Markdown drops such attributes, so they are set in the page, again whenever a table is rendered anew.
APP_HEAD = """<script>
(() => {
  const label = () => {
    for (const table of document.querySelectorAll('.gfb-cards table')) {
      const heads = [...table.querySelectorAll('thead th')].map(th => th.textContent.trim());
      for (const tr of table.querySelectorAll('tbody tr')) {
        [...tr.children].forEach((td, i) => {
          if (heads[i] !== undefined && td.getAttribute('data-label') !== heads[i]) td.setAttribute('data-label', heads[i]);
        });
      }
    }
  };
  const start = () => {
    label();
    new MutationObserver(label).observe(document.body, {childList: true, subtree: true, characterData: true});
  };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
</script>"""

#: Brings the Score tab's answer on screen once it is there (Gradio's scroll_to_output leaves it below the fold).
SCROLL_TO_ANSWER_JS = """async () => {
  await new Promise(done => setTimeout(done, 250));  // the answer rendered first
  const warning = document.getElementById('score-copy-warning');
  const first = warning && warning.innerText.trim() ? warning : document.getElementById('score-status');
  if (!first) return;
  const top = first.getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight / 2) window.scrollTo({top: top + window.scrollY - 12, behavior: 'instant'});
}"""
