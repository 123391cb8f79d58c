// The Memory panel: what Delegate remembers, with edit, forget, show source, history and a
// search of its own. It reads the memory service through the gateway; "show source" jumps to
// the timeline event through a hook. (The search bar's whole-timeline search: timeline-search.js.)

import { api, HttpError } from "./api.js";
import { reconcile, h } from "./dom.js";
import { Panel, panelElements, showStatus } from "./panel.js";
import { cleanEdit, factGroups, factMatches, factRow, factsFrom, refreshesMemory, resultsFrom, retiredText } from "./memory.js";

const $ = (id) => document.getElementById(id);

const REFRESH_DEBOUNCE_MS = 150; // a burst of memory events is one request
const PANEL_SEARCH_LIMIT = 50;

/** An error of the memory routes, in words. */
export function memoryErrorText(err, doing) {
  if (err instanceof HttpError) {
    if (err.status === 404 && err.code === "not_found") return "That memory is not there any more.";
    if (err.status === 409) return "That memory changed meanwhile (replaced or forgotten): the list is up to date now.";
    if (err.status === 503 || err.status === 502 || err.status === 504) return "Memory is unavailable right now: Delegate’s memory service is not answering.";
    if (err.status === 404) return "Memory is not available on this server.";
    if (err.status === 400 || err.status === 422) return err.message || `Could not ${doing}.`;
  }
  return `Could not ${doing}: Delegate is not answering. Try again.`;
}

export class MemoryPanel extends Panel {
  /** @param {{onUnauthorized: () => void, toast: (text: string, tone?: string) => void, jumpTo: (eventId: string) => Promise<boolean>}} hooks */
  constructor(hooks) {
    super(hooks, panelElements("memory"), { debounceMs: REFRESH_DEBOUNCE_MS, keyboard: true });
    this.facts = [];
    this.byId = new Map();
    this.history = false;
    this.query = "";
    this.matches = null; // fact ids of the panel's search, best first; null: no search
    this.searchError = null;
    this.searching = false;
    this.rowState = new Map(); // fact id -> {mode, draft, draftType, error, busy}
    this.groups = new Map();
    this.searchSeq = 0;
    this.focusAfter = null; // [fact id, selector] to focus once the row is rebuilt
    $("memory-history").addEventListener("change", (e) => {
      this.history = e.target.checked;
      this.render();
    });
    $("memory-search-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.search();
    });
    $("memory-search").addEventListener("input", (e) => {
      if (!e.target.value.trim()) this.clearSearch();
    });
  }

  open() {
    super.open();
    $("memory-search").focus();
  }

  /** The facts, retired ones too (history). */
  load() {
    return api.memories();
  }

  apply(body) {
    this.setFacts(factsFrom(body));
  }

  relevant(ev) {
    return refreshesMemory(ev);
  }

  errorText(err) {
    return memoryErrorText(err, "load what Delegate remembers");
  }

  reset() {
    this.facts = [];
    this.byId = new Map();
    this.rowState.clear();
    $("memory-search").value = "";
    this.clearSearch();
  }

  setFacts(facts) {
    this.facts = facts;
    this.byId = new Map(facts.map((f) => [f.id, f]));
    // An edit or a confirmation of a fact that is no longer active ends by itself.
    for (const [id, st] of this.rowState) {
      const f = this.byId.get(id);
      if (!f || (f.status || "active") !== "active") this.rowState.delete(id);
      else if (st.mode === "view" && !st.error) this.rowState.delete(id);
    }
  }

  replaceFact(fact) {
    if (!fact || typeof fact.id !== "string") return;
    const i = this.facts.findIndex((f) => f.id === fact.id);
    this.setFacts(i < 0 ? [fact, ...this.facts] : this.facts.map((f) => (f.id === fact.id ? fact : f)));
  }

  // ---- search ---------------------------------------------------------------------

  async search() {
    const query = $("memory-search").value.trim();
    if (!query) return this.clearSearch();
    const seq = ++this.searchSeq;
    const session = this.session;
    this.query = query;
    this.searching = true;
    this.searchError = null;
    this.render();
    try {
      const body = await api.memorySearch(query, PANEL_SEARCH_LIMIT);
      if (seq !== this.searchSeq || session !== this.session) return;
      this.matches = factMatches(resultsFrom(body));
      // A match the list does not hold yet (it arrived since): read the list again.
      if (this.matches.some((id) => !this.byId.has(id))) this.refresh();
    } catch (err) {
      if (seq !== this.searchSeq || session !== this.session) return;
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      this.matches = null;
      this.searchError = memoryErrorText(err, "search memory");
    } finally {
      if (seq === this.searchSeq) this.searching = false;
    }
    this.render();
  }

  clearSearch() {
    this.searchSeq += 1;
    this.query = "";
    this.matches = null;
    this.searchError = null;
    this.searching = false;
    this.render();
  }

  // ---- row actions ----------------------------------------------------------------

  setRow(id, patch, focus = null) {
    const st = { mode: "view", draft: null, draftType: null, error: "", busy: false, ...(this.rowState.get(id) || {}), ...patch };
    if (st.mode === "view" && !st.error && !st.busy) this.rowState.delete(id);
    else this.rowState.set(id, st);
    if (focus) this.focusAfter = [id, focus];
    this.render();
  }

  async save(fact, text, type) {
    const clean = cleanEdit(text);
    if (!clean) return this.setRow(fact.id, { draft: text, draftType: type, error: "A memory needs some words. To remove it, use Forget." }, ".memory-edit-text");
    if (clean === fact.text && type === (fact.type || "fact")) return this.setRow(fact.id, { mode: "view", error: "" }, ".memory-edit");
    this.setRow(fact.id, { draft: text, draftType: type, busy: true, error: "" });
    try {
      const body = await api.editMemory(fact.id, clean, type !== (fact.type || "fact") ? type : undefined);
      this.replaceFact(body && body.fact);
      this.rowState.delete(fact.id);
      this.focusAfter = [fact.id, ".memory-edit"];
      this.hooks.toast("Memory updated.");
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      this.setRow(fact.id, { busy: false, error: memoryErrorText(err, "save the change") }, ".memory-edit-text");
      if (err instanceof HttpError && (err.status === 404 || err.status === 409)) this.refresh();
      return;
    }
    this.render();
    this.refresh(); // the truth is the memory service's
  }

  async forget(fact) {
    this.setRow(fact.id, { busy: true, error: "" });
    try {
      const body = await api.forgetMemory(fact.id);
      this.rowState.delete(fact.id);
      this.replaceFact((body && body.fact) || { ...fact, status: "forgotten" });
      this.hooks.toast("Forgotten: Delegate will not use it again.");
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      this.setRow(fact.id, { busy: false, error: memoryErrorText(err, "forget it") });
      if (err instanceof HttpError && (err.status === 404 || err.status === 409)) this.refresh();
      return;
    }
    this.render();
    $("memory-search").focus(); // its row is gone (unless history is shown): keep focus in the panel
    this.refresh();
  }

  async showSource(fact, eventId) {
    const ok = await this.hooks.jumpTo(eventId);
    if (!ok) this.setRow(fact.id, { error: "Its source is not on the timeline." });
  }

  // ---- rendering ------------------------------------------------------------------

  render() {
    const active = this.facts.filter((f) => (f.status || "active") === "active").length;
    $("memory-btn").setAttribute("aria-label", this.loaded ? `Memory: ${active} remembered` : "Memory");
    const status = $("memory-status");
    let text = "";
    let warn = false;
    if (this.error) [text, warn] = [this.error, true];
    else if (this.searchError) [text, warn] = [this.searchError, true];
    else if (!this.loaded) text = "Loading…";
    else if (this.searching) text = `Searching memory for “${this.query}”…`;
    const groups = factGroups(this.facts, { history: this.history, only: this.matches });
    const shown = groups.reduce((n, g) => n + g.facts.length, 0);
    if (!text && this.loaded) {
      if (this.matches) text = shown ? `${shown} ${shown === 1 ? "memory matches" : "memories match"} “${this.query}”` : `Nothing remembered matches “${this.query}”.`;
      else if (!shown) text = this.facts.length ? "Nothing active. Show history to see what was replaced or forgotten." : "Nothing remembered yet. Tell Delegate something worth keeping, like “my sister lives in Lisbon”.";
    }
    showStatus(status, text, warn);
    const now = new Date();
    reconcile(
      $("memory-list"),
      this.groups,
      groups.map((g) => ({ key: g.type, group: g })),
      (item) => {
        const ul = h("ul", { class: "memory-facts", "aria-label": item.group.label });
        const node = h("section", { class: "memory-group", "data-type": item.group.type }, h("h3", { class: "memory-group-title", text: item.group.label }), ul);
        Object.assign(node, { _ul: ul, _rows: new Map() });
        this.renderRows(node, item.group, now);
        return node;
      },
      (node, item) => this.renderRows(node, item.group, now),
    );
    if (this.focusAfter) {
      const [id, selector] = this.focusAfter;
      this.focusAfter = null;
      const target = $("memory-list").querySelector(`[data-fact-id="${CSS.escape(id)}"] ${selector}`);
      if (target) target.focus();
    }
  }

  renderRows(node, group, now) {
    const on = {
      edit: (f) => this.setRow(f.id, { mode: "edit", draft: f.text, draftType: f.type || "fact", error: "" }, ".memory-edit-text"),
      cancel: (f) => this.setRow(f.id, { mode: "view", error: "", draft: null }, ".memory-edit"),
      draft: (f, text, type) => {
        const st = this.rowState.get(f.id);
        if (st) Object.assign(st, { draft: text, draftType: type }); // no re-render: the box holds it
      },
      save: (f, text, type) => this.save(f, text, type),
      confirm: (f) => this.setRow(f.id, { mode: "confirm", error: "" }, ".memory-forget-no"),
      forget: (f) => this.forget(f),
      source: (f, eventId) => this.showSource(f, eventId),
    };
    // Keyed by everything a row shows but the draft: typing never rebuilds the box.
    reconcile(
      node._ul,
      node._rows,
      group.facts.map((f) => {
        const st = this.rowState.get(f.id) || {};
        const key = [f.id, f.status, f.type, f.updated_at, f.text, retiredText(f, this.byId, now), st.mode, st.error, st.busy].join("\u0000");
        return { key, fact: f, st };
      }),
      (item) => factRow(item.fact, { byId: this.byId, now, ...item.st, on }),
    );
  }
}
