// The Commitments panel (issue #30): the promises the owner and Delegate made, in three groups:
// due soon (open, due within DUE_SOON_H or overdue), open (the rest), and done (kept or
// dropped, newest first). It asks GET /api/commitments?state=all when opened and again when a
// /chat event says a commitment changed.

import { api } from "./api.js";
import { h } from "./dom.js";
import { Panel, panelElements, showStatus } from "./panel.js";
import { formatTime } from "./format.js";

const $ = (id) => document.getElementById(id);

const REFRESH_DEBOUNCE_MS = 300;
const DUE_SOON_H = 48;
const DONE_SHOWN = 20;

export function refreshesCommitments(ev) {
  return Boolean(ev && typeof ev.kind === "string" && ev.kind.startsWith("commitment."));
}

/** {soon, open, done}: the panel's groups, in the order they show. */
export function groupCommitments(list, now = new Date()) {
  const soonLine = now.getTime() + DUE_SOON_H * 3600 * 1000;
  const open = list.filter((c) => c.state === "open");
  const soon = open.filter((c) => c.due && Date.parse(c.due) <= soonLine);
  const later = open.filter((c) => !soon.includes(c));
  const done = list
    .filter((c) => c.state !== "open")
    .sort((a, b) => Date.parse(b.closed_at || 0) - Date.parse(a.closed_at || 0))
    .slice(0, DONE_SHOWN);
  return { soon, open: later, done };
}

export function commitmentRow(c, now = new Date()) {
  const who = c.by === "assistant" ? "Delegate" : "You";
  const to = c.to ? ` → ${c.to}` : "";
  const overdue = c.state === "open" && c.due && Date.parse(c.due) < now.getTime();
  const when = c.due
    ? h("time", { class: "reminder-when", datetime: c.due, text: `${overdue ? "overdue · " : "due "}${formatTime(c.due, now)}` })
    : h("span", { class: "reminder-when", text: "no date" });
  return h(
    "li",
    { class: "reminder commitment", "data-commitment-id": c.id, "data-state": c.state },
    h(
      "div",
      { class: "reminder-main" },
      h("span", { class: "reminder-text", text: c.what }),
      h(
        "span",
        { class: "reminder-meta" },
        h("span", { class: "commitment-by", text: `${who}${to}` }),
        c.state === "open" ? when : h("span", { class: "commitment-state", text: c.state === "kept" ? "kept" : "dropped" }),
      ),
    ),
  );
}

export class CommitmentsPanel extends Panel {
  /** @param {{onUnauthorized: () => void, toast: (text: string, tone?: string) => void}} hooks */
  constructor(hooks) {
    super(hooks, panelElements("commitments"), { debounceMs: REFRESH_DEBOUNCE_MS });
    this.list = [];
  }

  load() {
    return api.commitments("all");
  }

  apply(body) {
    this.list = Array.isArray(body && body.commitments) ? body.commitments : [];
  }

  relevant(ev) {
    return refreshesCommitments(ev);
  }

  errorText() {
    return "Commitments could not be loaded: Delegate’s memory is not answering.";
  }

  reset() {
    this.list = [];
  }

  render() {
    const now = new Date();
    const groups = groupCommitments(this.list, now);
    const total = groups.soon.length + groups.open.length + groups.done.length;
    showStatus($("commitments-status"), this.statusText(!total, "No promises yet. “I’ll send Ana the photos on Friday” shows up here."), Boolean(this.error));
    for (const [name, items] of Object.entries(groups)) {
      const section = $(`commitments-${name}`);
      section.hidden = items.length === 0;
      section.querySelector("ul").replaceChildren(...items.map((c) => commitmentRow(c, now)));
    }
  }
}
