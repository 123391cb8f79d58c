// The People panel (issue #30): everyone the owner's turns mention, each with relation, contact
// points and key dates; opening one shows its facts with their citations (a click jumps to the
// cited message), recent mentions and upcoming dates, and a Forget button. It asks
// GET /api/people when opened, and again when a /chat event says people changed.

import { api, HttpError } from "./api.js";
import { h, reconcile } from "./dom.js";
import { Panel, panelElements, showStatus } from "./panel.js";

const $ = (id) => document.getElementById(id);

const REFRESH_DEBOUNCE_MS = 300; // a turn's person.* events are one request

/** Events that change what the People panel shows. */
export function refreshesPeople(ev) {
  return Boolean(ev && typeof ev.kind === "string" && (ev.kind.startsWith("person.") || ev.kind === "memory.fact.forgotten"));
}

function dayMonth(date) {
  const [month, day] = date.slice(-5).split("-").map(Number);
  const d = new Date(Date.UTC(2000, month - 1, day));
  return d.toLocaleDateString(undefined, { day: "numeric", month: "long", timeZone: "UTC" });
}

/** "Sister · +351 912 345 678 · ana@ex.org · birthday 14 March": one line under the name. */
export function personMeta(p) {
  const parts = [];
  if (p.relation) parts.push(p.relation);
  for (const phone of p.phones || []) parts.push(phone);
  for (const email of p.emails || []) parts.push(email);
  for (const d of p.dates || []) parts.push(`${d.label} ${dayMonth(d.date)}`);
  // their card was deleted from the address book: still a person, no longer a contact
  if (p.contacts === "unlisted") parts.push("no longer in contacts");
  return parts.join(" · ");
}

export class PeoplePanel extends Panel {
  /** @param {{onUnauthorized: () => void, toast: (text: string, tone?: string) => void, jumpTo: (id: string) => void}} hooks */
  constructor(hooks) {
    super(hooks, panelElements("people"), { debounceMs: REFRESH_DEBOUNCE_MS });
    this.list = [];
    this.rows = new Map();
    this.openId = null; // the person whose detail is shown
    this.details = new Map(); // id -> the detail answer
  }

  /** The list, and the open person's detail again (it may have changed too). */
  async load() {
    const body = await api.people();
    const list = Array.isArray(body && body.people) ? body.people : [];
    const openId = this.openId;
    const detail = openId && list.some((p) => p.id === openId) ? await api.person(openId) : null;
    return { list, openId, detail };
  }

  apply({ list, openId, detail }) {
    this.list = list;
    if (detail && detail.person) this.details.set(openId, detail.person);
  }

  relevant(ev) {
    return refreshesPeople(ev);
  }

  errorText() {
    return "People could not be loaded: Delegate’s memory is not answering.";
  }

  reset() {
    this.list = [];
    this.details.clear();
    this.openId = null;
  }

  async loadDetail(id) {
    const body = await api.person(id);
    if (body && body.person) this.details.set(id, body.person);
  }

  async toggle(person) {
    if (this.openId === person.id) {
      this.openId = null;
      return this.render();
    }
    this.openId = person.id;
    try {
      await this.loadDetail(person.id);
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      this.hooks.toast("Could not load that person.", "warn");
    }
    this.rows.delete(person.id); // rebuilt with its detail
    this.render();
  }

  /** Forget asks first, in place (no native dialog): "Forget Ana? … [Yes, forget] [Keep]". */
  askForget(person, button) {
    const yes = h("button", { type: "button", class: "ghost small person-forget-yes", text: "Yes, forget" });
    const no = h("button", { type: "button", class: "ghost small person-forget-no", text: "Keep" });
    const ask = h(
      "div",
      { class: "person-confirm", role: "group", "aria-label": `Forget ${person.name}?` },
      h("span", { class: "small", text: `Forget ${person.name}? Delegate stops using what it learned about them; the timeline keeps the history.` }),
      yes,
      no,
    );
    yes.addEventListener("click", () => this.forget(person, yes));
    no.addEventListener("click", () => {
      ask.replaceWith(button);
      button.focus();
    });
    button.replaceWith(ask);
    no.focus();
  }

  async forget(person, button) {
    button.disabled = true;
    try {
      await api.forgetPerson(person.id);
      this.list = this.list.filter((p) => p.id !== person.id);
      this.details.delete(person.id);
      this.openId = null;
      this.hooks.toast(`${person.name} forgotten.`);
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      if (!(err instanceof HttpError && err.status === 404)) this.hooks.toast("Could not forget them. Try again.", "warn");
      button.disabled = false;
    }
    this.render();
  }

  detail(person) {
    const d = this.details.get(person.id);
    if (!d) return h("p", { class: "muted small", text: "Loading…" });
    const facts = (d.linked_facts || []).map((f) =>
      h(
        "li",
        { class: "person-fact" },
        h("span", { text: f.text }),
        ...(f.event_ids || []).slice(0, 3).map((id, n) =>
          h("button", { type: "button", class: "ghost small person-cite", title: "Show where this was said", "aria-label": `Source ${n + 1} of: ${f.text}`, text: `source ${n + 1}`, onclick: () => this.hooks.jumpTo(id) }),
        ),
      ),
    );
    const upcoming = (d.upcoming || []).map((u) => h("li", { text: `${u.label}: ${dayMonth(u.date)}` }));
    const mentions = (d.recent_mentions || []).slice(0, 5).map((m) =>
      h("li", {}, h("button", { type: "button", class: "ghost small person-cite", text: `${m.channel || "?"}: ${(m.text || "").slice(0, 80)}`, onclick: () => this.hooks.jumpTo(m.event_id) })),
    );
    const forget = h("button", { type: "button", class: "ghost small person-forget", text: "Forget", "aria-label": `Forget ${person.name}` });
    forget.addEventListener("click", () => this.askForget(person, forget));
    return h(
      "div",
      { class: "person-detail" },
      h("h3", { class: "person-sub", text: "What Delegate knows" }),
      facts.length ? h("ul", { class: "person-facts" }, ...facts) : h("p", { class: "muted small", text: "No facts yet." }),
      upcoming.length ? h("h3", { class: "person-sub", text: "Coming up" }) : null,
      upcoming.length ? h("ul", { class: "person-upcoming" }, ...upcoming) : null,
      mentions.length ? h("h3", { class: "person-sub", text: "Recent mentions" }) : null,
      mentions.length ? h("ul", { class: "person-mentions" }, ...mentions) : null,
      forget,
    );
  }

  row(person) {
    const expanded = this.openId === person.id;
    const name = h("button", { type: "button", class: "ghost person-name", "aria-expanded": expanded ? "true" : "false", text: person.name, onclick: () => this.toggle(person) });
    const meta = personMeta(person);
    return h(
      "li",
      { class: "reminder person", "data-person-id": person.id },
      h(
        "div",
        { class: "reminder-main" },
        name,
        h("span", { class: "reminder-meta" }, meta ? h("span", { text: meta }) : null, h("span", { text: `${person.facts} fact${person.facts === 1 ? "" : "s"}` })),
        expanded ? this.detail(person) : null,
      ),
    );
  }

  render() {
    showStatus($("people-status"), this.statusText(!this.list.length, "No one yet. People you mention in chat, texts or email show up here."), Boolean(this.error));
    reconcile(
      $("people-list"),
      this.rows,
      this.list.map((p) => ({ key: `${p.id}:${p.updated_at}:${p.facts}:${this.openId === p.id}`, person: p })),
      (item) => this.row(item.person),
    );
  }
}
