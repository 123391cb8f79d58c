// The search bar over the loaded timeline (search.js finds, this marks and steps through the
// matches), "Search all history", and its handoff to the whole-timeline search (timeline-search.js).

import { searchEvents } from "./search.js";

const $ = (id) => document.getElementById(id);

export class FindBar {
  /** @param {object} app  the page (App in app.js): its timeline, pane and shell */
  constructor(app) {
    this.app = app;
    this.search = { query: "", hits: [], index: -1 };
    this.wire();
  }

  get query() {
    return this.search.query;
  }

  wire() {
    $("search-btn").addEventListener("click", () => ($("search-bar").hidden ? this.open() : this.close()));
    $("search-close").addEventListener("click", () => {
      this.close();
      this.app.shell.focusOpener("search-btn");
    });
    $("search-input").addEventListener("input", () => this.run());
    $("search-input").addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        this.step(e.shiftKey ? 1 : -1);
      } else if (e.key === "Escape") {
        e.preventDefault();
        this.close();
        this.app.shell.focusOpener("search-btn");
      }
    });
    $("search-prev").addEventListener("click", () => this.step(-1));
    $("search-next").addEventListener("click", () => this.step(1));
    $("search-all").addEventListener("click", () => this.loadAll());
    document.addEventListener("keydown", (e) => {
      if ((e.ctrlKey || e.metaKey) && e.key === "f" && !$("app").hidden && e.shiftKey) {
        e.preventDefault();
        this.open();
      }
    });
  }

  open() {
    $("search-bar").hidden = false;
    $("search-btn").setAttribute("aria-expanded", "true");
    $("search-input").focus();
    $("search-input").select();
    this.markHits();
  }

  close() {
    $("search-bar").hidden = true;
    $("search-btn").setAttribute("aria-expanded", "false");
    $("search-input").value = "";
    this.search = { query: "", hits: [], index: -1 };
    this.markHits();
    this.app.wholeSearch.clear();
  }

  run(jump = true) {
    const query = $("search-input").value.trim();
    if (query) this.app.pane.drawAll(); // marks and jumps find matches among the drawn nodes
    const hits = searchEvents(this.app.tl.order, query);
    const prevId = this.search.hits[this.search.index] && this.search.hits[this.search.index].id;
    let index = hits.findIndex((e) => e.id === prevId);
    if (index < 0) index = hits.length - 1; // the newest match first
    this.search = { query, hits, index };
    this.markHits();
    if (jump) this.showHit();
  }

  step(d) {
    const n = this.search.hits.length;
    if (!n) return;
    this.search.index = (this.search.index + d + n) % n;
    this.markHits();
    this.showHit();
  }

  markHits() {
    const { query, hits, index } = this.search;
    for (const n of document.querySelectorAll("#timeline .search-hit")) n.classList.remove("search-hit", "search-current");
    const ids = new Set(hits.map((e) => e.id));
    for (const n of document.querySelectorAll("#timeline [data-event-id]")) if (ids.has(n.dataset.eventId)) n.classList.add("search-hit");
    const current = hits[index];
    if (current) {
      const node = document.querySelector(`#timeline [data-event-id="${CSS.escape(current.id)}"]`);
      if (node) node.classList.add("search-current");
    }
    const hasOlder = this.app.tl.hasOlder;
    const more = hasOlder ? " (loaded so far)" : "";
    $("search-count").textContent = !query ? "" : hits.length ? `${index + 1} of ${hits.length}${more}` : `No matches${more}`;
    $("search-all").hidden = !hasOlder;
    $("search-prev").disabled = hits.length < 2;
    $("search-next").disabled = hits.length < 2;
  }

  showHit() {
    const ev = this.search.hits[this.search.index];
    if (!ev) return;
    const node = document.querySelector(`#timeline [data-event-id="${CSS.escape(ev.id)}"]`);
    if (node) this.app.pane.reveal(node);
  }

  async loadAll() {
    const btn = $("search-all");
    btn.disabled = true;
    btn.textContent = "Loading history…";
    try {
      while (this.app.tl.hasOlder) {
        const before = this.app.tl.cursor;
        await this.app.pane.loadOlder();
        if (this.app.tl.cursor === before) break; // an error: loadOlder told the person
      }
    } finally {
      btn.disabled = false;
      btn.textContent = "Search all history";
      this.run();
    }
  }
}
