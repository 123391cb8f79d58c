// The whole-timeline search under the search bar: the bar's words also go to the memory
// service (GET /api/memory/search), and its matches, loaded on the timeline or not, are listed
// under the bar; one click jumps to the event through a hook.

import { api, HttpError } from "./api.js";
import { reconcile, setText } from "./dom.js";
import { resultRow, resultsFrom } from "./memory.js";
import { memoryErrorText } from "./memory-ui.js";

const $ = (id) => document.getElementById(id);

const SEARCH_DEBOUNCE_MS = 300; // typing: ask once the words settle (Enter asks at once)
const TIMELINE_SEARCH_LIMIT = 20;

/**
 * The whole-timeline search: the search bar's words also go to GET /api/memory/search, and
 * its matches (loaded or not) are listed under the bar; one click jumps to the event.
 */
export class TimelineSearch {
  /** @param {{onUnauthorized: () => void, jumpTo: (eventId: string) => Promise<boolean>, close: () => void}} hooks */
  constructor(hooks) {
    this.hooks = hooks;
    this.asked = ""; // the query of the last request
    this.seq = 0;
    this.timer = null;
    this.rows = new Map();
    const input = $("search-input");
    input.addEventListener("input", () => this.soon());
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") this.now(); // also steps through the loaded matches (app.js)
      else if (e.key === "ArrowDown" && !$("search-results-box").hidden) {
        const first = $("search-results").querySelector("button:not([disabled])");
        if (first) {
          e.preventDefault();
          first.focus();
        }
      }
    });
    $("search-results-box").addEventListener("keydown", (e) => {
      if (e.key === "Escape") {
        e.preventDefault();
        this.hooks.close();
      } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        const buttons = [...$("search-results").querySelectorAll("button:not([disabled])")];
        const i = buttons.indexOf(document.activeElement);
        if (i < 0) return;
        e.preventDefault();
        if (e.key === "ArrowUp" && i === 0) input.focus();
        else buttons[Math.min(buttons.length - 1, Math.max(0, i + (e.key === "ArrowDown" ? 1 : -1)))].focus();
      }
    });
  }

  soon() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.now(), SEARCH_DEBOUNCE_MS);
  }

  /** Ask now, unless these words were just asked. */
  now() {
    clearTimeout(this.timer);
    const query = $("search-input").value.trim();
    if (query === this.asked) return;
    this.asked = query;
    if (!query) return this.clear();
    this.run(query);
  }

  async run(query) {
    const seq = ++this.seq;
    this.show(`Searching the whole timeline for “${query}”…`);
    let results;
    try {
      results = resultsFrom(await api.memorySearch(query, TIMELINE_SEARCH_LIMIT));
    } catch (err) {
      if (seq !== this.seq) return;
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      this.asked = ""; // Enter tries again
      this.show(`Whole-timeline search: ${memoryErrorText(err, "search")}`, true);
      this.list([]);
      return;
    }
    if (seq !== this.seq) return;
    this.show(results.length ? `${results.length} ${results.length === 1 ? "match" : "matches"} in the whole timeline` : "Nothing found in the whole timeline.");
    this.list(results);
  }

  show(text, warn = false) {
    $("search-results-box").hidden = false;
    const status = $("search-remote-status");
    setText(status, text);
    status.dataset.tone = warn ? "warn" : "";
  }

  list(results) {
    const now = new Date();
    reconcile(
      $("search-results"),
      this.rows,
      results.map((r, i) => ({ key: `${r.kind}:${r.id || i}:${r.text}`, result: r })),
      (item) => resultRow(item.result, { now, onJump: (target) => this.jump(target) }),
    );
  }

  async jump(target) {
    const status = $("search-remote-status");
    const was = status.textContent;
    if (!document.querySelector(`#timeline [data-event-id="${CSS.escape(target)}"]`)) setText(status, "Loading older activity to show it…");
    const ok = await this.hooks.jumpTo(target);
    setText(status, ok ? was : "That is not on the timeline any more.");
    status.dataset.tone = ok ? "" : "warn";
  }

  /** The search bar closed or emptied: no request in flight matters any more. */
  clear() {
    clearTimeout(this.timer);
    this.seq += 1;
    this.asked = "";
    $("search-results-box").hidden = true;
    setText($("search-remote-status"), "");
    this.list([]);
  }
}
