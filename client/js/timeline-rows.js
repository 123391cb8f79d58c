// The timeline's rows that are not messages: a refused sender's notice, a failed turn, an
// inner-activity row with its details, a turn's folded activity, and the end of a conversation.

import { refusedText } from "./channels.js";
import { h, icon, reconcile, setText } from "./dom.js";
import { innerDetail, innerSummary } from "./inner-words.js";
import { timeEl } from "./message-node.js";

const LONG_VALUE = 400;

/** Someone who is not the owner wrote in: a small notice, never a message bubble. */
export function refusedNode(ev) {
  const r = refusedText(ev);
  return h(
    "div",
    {
      class: "notice notice-refused",
      role: "note",
      "data-event-id": ev.id,
      "data-kind": ev.kind,
      "data-channel": ev.channel || "",
      "data-seq": ev.seq ?? "",
      "aria-label": r.text,
      title: r.title,
    },
    icon(ev.channel === "email" ? "mail" : ev.channel === "sms" ? "sms" : "alert"),
    h(
      "div",
      {},
      h("span", { class: "notice-text", text: r.text }),
      r.subject ? h("span", { class: "notice-subject", text: `Subject: ${r.subject}` }) : null,
      r.preview ? h("span", { class: "notice-preview", text: `“${r.preview}”` }) : null,
    ),
    timeEl(ev.ts),
  );
}

export function failureNode(ev) {
  const p = ev.payload || {};
  return h(
    "div",
    { class: "notice notice-failed", role: "status", "data-event-id": ev.id, "data-kind": ev.kind, "data-seq": ev.seq ?? "" },
    icon("alert"),
    h(
      "div",
      {},
      h("strong", { text: "Delegate couldn’t answer" }),
      h("span", { class: "notice-text", text: p.message || "The turn failed." }),
      p.code ? h("code", { class: "notice-code", text: p.code }) : null,
    ),
    timeEl(ev.ts),
  );
}

export function innerNode(ev, figures) {
  const s = innerSummary(ev, figures);
  const detail = h("div", { class: "inner-detail" });
  const rows = innerDetail(ev);
  if (rows.length) {
    const dl = h("dl");
    for (const [label, value, opts] of rows) {
      dl.appendChild(h("dt", { text: label }));
      let shown = opts && opts.pre ? h("pre", { text: value }) : value;
      if (opts && opts.pre && value.length > LONG_VALUE && ev.kind !== "context.capsule") {
        // Bulky payloads (replacement input, tool output) stay folded until asked for.
        shown = h("details", { class: "long-value" }, h("summary", { text: `Show ${value.length.toLocaleString()} characters` }), shown);
      }
      dl.appendChild(h("dd", {}, shown));
    }
    detail.appendChild(dl);
  } else {
    detail.appendChild(h("p", { class: "muted", text: "No details." }));
  }
  // A tool call that sent an SMS or email shows how that delivery went.
  const delivery = h("span", { class: "delivery", hidden: true });
  const node = h(
    "div",
    {
      // A variant (signal, decision, reminder) gives its row its own compact look.
      class: `inner${s.variant ? ` inner-${s.variant}` : ""}${s.tone ? ` tone-${s.tone}` : ""}`,
      "data-event-id": ev.id,
      "data-kind": ev.kind,
      "data-seq": ev.seq ?? "",
      "data-signal-kind": ev.kind === "inner.signal" ? (ev.payload && ev.payload.signal_kind) || null : null,
    },
    h(
      "details",
      {},
      // Its name is what it shows (axe: label-content-name-mismatch), with a hidden "Background
      // step:" first so a screen reader knows it is not something anyone said.
      h(
        "summary",
        {},
        h("span", { class: "sr-only", text: "Background step: " }),
        icon("inner", "icon inner-mark"),
        h("span", { class: "inner-label", text: s.label }),
        h("span", { class: "inner-text", text: s.text }),
        delivery,
        timeEl(ev.ts),
      ),
      detail,
    ),
  );
  node._delivery = delivery;
  return node;
}

/** A turn's context management, folded into one quiet line; one click shows every row. */
export function activityNode(item, cb) {
  const text = h("span", { class: "activity-text" });
  const body = h("div", { class: "activity-body" });
  const details = h(
    "details",
    {},
    h("summary", { class: "activity-head" }, icon("inner", "icon inner-mark"), h("span", { class: "activity-label", text: "Inner activity" }), text),
    body,
  );
  const node = h("div", { class: "activity", "data-kind": "activity" }, details);
  Object.assign(node, { _text: text, _body: body, _details: details, _rows: new Map(), _cb: cb });
  updateActivity(node, item);
  return node;
}

export function updateActivity(node, item) {
  setText(node._text, item.summary);
  node.setAttribute("data-count", String(item.events.length));
  reconcile(
    node._body,
    node._rows,
    item.events.map((ev) => ({ key: ev.id, event: ev })),
    (row) => innerNode(row.event, node._cb.figures && node._cb.figures(row.event)),
  );
}

export function dividerNode(ev) {
  return h(
    "div",
    { class: "divider", role: "separator", "data-event-id": ev.id, "data-kind": ev.kind, "aria-label": "Conversation ended" },
    h("span", {}, "Conversation ended · ", timeEl(ev.ts)),
  );
}
