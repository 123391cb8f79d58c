// The timeline's DOM: keyed blocks from timeline.buildView, reconciled in place so that
// folded activity, focus and scroll survive every update.

import { h, icon, reconcile, setText } from "./dom.js";
import { channelInfo, formatRange, formatTime, fullTime, innerDetail, innerSummary } from "./format.js";
import { renderIncremental, renderMarkdown } from "./markdown.js";
import { attachmentText, mergeDelivery, messageAttachments, messageHeader, refusedText } from "./channels.js";
import { isInnerKind } from "./event-kinds.js";
import { spanCost, spanLabel } from "./timeline-spans.js";
import { attachedTo } from "./timeline-view.js";
import { taskCardNode, updateTaskCard } from "./task-card.js";
import { diagramUrl } from "./tasks.js";

const LONG_VALUE = 400;
const SPAN_ICONS = { interaction: "text", voice: "mic", phone: "phone", activation: "inner" };

function timeEl(ts) {
  return h("time", { datetime: ts, title: fullTime(ts), text: formatTime(ts) });
}

function channelBadge(channel) {
  const info = channelInfo(channel);
  return h("span", { class: `channel channel-${info.icon}`, title: `Channel: ${info.label}` }, icon(info.icon), info.label);
}

function bubble(text) {
  const body = h("div", { class: "bubble md" });
  body.appendChild(renderMarkdown(document, text));
  return body;
}

function actionButton(name, label, iconName, onclick) {
  return h(
    "button",
    { type: "button", class: `msg-action act-${name}`, "aria-label": label, title: label, onclick },
    icon(iconName, "icon"),
    h("span", { class: "msg-action-label", text: label.split(" ")[0] }),
  );
}

function messageText(ev) {
  return (ev && ev.payload && typeof ev.payload.text === "string" && ev.payload.text) || "";
}

function messageNode(item, cb) {
  const ev = item.event;
  const user = ev.role === "user";
  const who = user ? "You" : "Delegate";
  const info = channelInfo(ev.channel);
  const badge = channelBadge(ev.channel);
  const marks = h("span", { class: "msg-marks" });
  const pager = h("span", { class: "attempts", role: "group", "aria-label": "Answer attempts" });
  const body = h("div", { class: "bubble md" });
  const actions = h("div", { class: "msg-actions" });
  const from = h("span", { class: "msg-from", hidden: true });
  const subject = h("div", { class: "msg-subject", hidden: true });
  const files = h("ul", { class: "attachments", "aria-label": "Attachments", hidden: true });
  const delivery = h("div", { class: "delivery", hidden: true });
  const node = h(
    "article",
    {
      class: `msg ${user ? "msg-user" : "msg-assistant"}`,
      "data-event-id": ev.id,
      "data-kind": "message",
      "data-role": ev.role || "",
      "data-channel": ev.channel || "",
      "data-seq": ev.seq ?? "",
      "aria-label": `${who}, ${info.label}, ${formatTime(ev.ts)}`,
    },
    h("div", { class: "msg-meta" }, h("span", { class: "who", text: who }), badge, from, timeEl(ev.ts), marks, pager, actions),
    subject,
    body,
    files,
    delivery,
  );
  const copy = actionButton("copy", "Copy message", "copy", () => cb.onCopy(messageText(node._shown), copy));
  const regen = actionButton("regenerate", "Regenerate answer", "regenerate", () => cb.onRegenerate(node._shown));
  const edit = actionButton("edit", "Edit and resend", "edit", () => cb.onEdit(node._shown));
  actions.append(copy, user ? edit : regen);
  Object.assign(node, {
    _badge: badge, _marks: marks, _pager: pager, _body: body, _regen: regen, _edit: edit, _view: null, _cb: cb,
    _from: from, _subject: subject, _files: files, _delivery: delivery,
  });
  updateMessage(node, item);
  return node;
}

function updateMessage(node, item) {
  const attempts = item.attempts || [item.event];
  // A new attempt shows itself; otherwise the person's choice stays.
  if (node._count !== attempts.length) {
    node._count = attempts.length;
    node._view = attempts.length - 1;
  }
  const shown = attempts[Math.min(node._view, attempts.length - 1)];
  node._badge.hidden = item.showChannel === false;
  node.classList.toggle("superseded", !!item.superseded);
  node._regen.hidden = !item.canRegenerate;
  node._edit.hidden = !item.canEdit;
  if (node._shown !== shown) {
    node._shown = shown;
    node.setAttribute("data-event-id", shown.id);
    node.setAttribute("data-seq", shown.seq ?? "");
    node.setAttribute("data-attempt", String((shown.payload && shown.payload.attempt) || 1));
    node._body.replaceChildren(renderMarkdown(document, messageText(shown)));
  }
  updateChannelParts(node, shown, attachedTo(item, shown.id));
  const p = shown.payload || {};
  const marks = [];
  if (p.stopped) marks.push(h("span", { class: "mark mark-stopped", title: "You stopped this answer; the part written so far is kept", text: "Stopped" }));
  if (item.superseded) {
    marks.push(h("span", { class: "mark mark-superseded", title: "Replaced by an edited message below; kept in history", text: item.event.role === "user" ? "Edited below" : "For an edited message" }));
  }
  // A spoken answer the caller talked over (barge-in) is kept as far as it was said.
  if (p.meta && p.meta.interrupted) marks.push(h("span", { class: "mark mark-interrupted", title: "Cut off when you started talking; the words so far are kept", text: "Interrupted" }));
  if (p.supersedes) marks.push(h("span", { class: "mark mark-edited", title: "An edited version of an earlier message", text: "Edited" }));
  const sig = marks.map((m) => m.textContent).join("|");
  if (node._marksSig !== sig) {
    node._marksSig = sig;
    node._marks.replaceChildren(...marks);
  }
  const pagerSig = `${node._view}/${attempts.length}`;
  if (node._pagerSig !== pagerSig) {
    node._pagerSig = pagerSig;
    node._pager.replaceChildren();
    node._pager.hidden = attempts.length < 2;
    if (attempts.length > 1) {
      const go = (d) => {
        node._view = Math.max(0, Math.min(attempts.length - 1, node._view + d));
        node._item = { ...node._item };
        updateMessage(node, node._item);
      };
      node._pager.append(
        h("button", { type: "button", class: "pager-btn", "aria-label": "Previous attempt", title: "Previous attempt", disabled: node._view === 0, onclick: () => go(-1), text: "‹" }),
        h("span", { class: "pager-text", text: `${node._view + 1} of ${attempts.length}` }),
        h("button", { type: "button", class: "pager-btn", "aria-label": "Next attempt", title: "Next attempt", disabled: node._view === attempts.length - 1, onclick: () => go(1), text: "›" }),
      );
    }
  }
  node._item = item;
}

/** The delivery line: "✓✓ delivered", "⚠ failed: <error>"; words and symbols, never colour alone. */
export function deliveryNode(d) {
  return h(
    "span",
    { class: `delivery-status tone-${d.tone}`, "data-status": d.status, "aria-label": d.label, title: d.title },
    h("span", { class: "delivery-symbol", "aria-hidden": "true", text: d.symbol }),
    " ",
    h("span", { class: "delivery-text", text: d.words }),
  );
}

/** One row per attachment: name, then type and size, then "not stored: why" when it was not kept. */
export function attachmentItems(list) {
  return list.map((f) => {
    const t = attachmentText(f);
    return h(
      "li",
      { class: `attachment${f.stored === false ? " not-stored" : ""}`, "aria-label": t.label, title: t.label },
      icon("clip", "icon attachment-icon"),
      h("span", { class: "attachment-name", text: t.name }),
      t.details ? h("span", { class: "attachment-details", text: t.details }) : null,
      t.status ? h("span", { class: "attachment-status", text: t.status }) : null,
    );
  });
}

/** Sender, subject, attachments and delivery: rebuilt only when what they say changes. */
function updateChannelParts(node, ev, attached) {
  const head = messageHeader(ev);
  setText(node._from, head.from ? `from ${head.from}` : "");
  node._from.hidden = !head.from;
  if (head.from) node._from.setAttribute("title", `Sent from ${head.from}`);
  node._subject.hidden = !head.subject;
  const subjectSig = head.subject;
  if (node._subjectSig !== subjectSig) {
    node._subjectSig = subjectSig;
    node._subject.replaceChildren();
    if (head.subject) node._subject.append(h("span", { class: "msg-subject-label", text: "Subject: " }), h("span", { class: "msg-subject-text", text: head.subject }));
  }
  const files = messageAttachments(ev, attached.files);
  const filesSig = JSON.stringify(files);
  if (node._filesSig !== filesSig) {
    node._filesSig = filesSig;
    node._files.replaceChildren(...attachmentItems(files));
    node._files.hidden = files.length === 0;
  }
  updateDelivery(node, attached.deliveries);
}

/** The merged delivery status into `node._delivery`, touching the DOM only when it changed. */
function updateDelivery(node, deliveries) {
  const d = mergeDelivery(deliveries);
  const deliverySig = d ? `${d.status}|${d.text}|${d.title}` : "";
  if (node._deliverySig === deliverySig) return;
  node._deliverySig = deliverySig;
  node._delivery.replaceChildren(...(d ? [deliveryNode(d)] : []));
  node._delivery.hidden = !d;
  if (d) node.setAttribute("data-delivery", d.status);
  else node.removeAttribute("data-delivery");
  node.classList.toggle("delivery-bad", !!d && d.tone === "bad");
}

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

function failureNode(ev) {
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

function eventNode(item, cb) {
  const ev = item.event;
  if (ev.kind === "message" && !isInnerKind(ev.kind)) return messageNode(item, cb);
  if (ev.kind === "turn.failed") return failureNode(ev);
  if (ev.kind === "inbound.refused") return refusedNode(ev);
  // Anything else — known inner kinds and kinds this client does not know yet — is inner
  // activity: it must never look like something the person or Delegate said.
  const node = innerNode(ev, cb.figures && cb.figures(ev));
  updateDelivery(node, attachedTo(item, ev.id).deliveries);
  return node;
}

/** A turn's context management, folded into one quiet line; one click shows every row. */
function activityNode(item, cb) {
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

function updateActivity(node, item) {
  setText(node._text, item.summary);
  node.setAttribute("data-count", String(item.events.length));
  reconcile(
    node._body,
    node._rows,
    item.events.map((ev) => ({ key: ev.id, event: ev })),
    (row) => innerNode(row.event, node._cb.figures && node._cb.figures(row.event)),
  );
}

function dividerNode(ev) {
  return h(
    "div",
    { class: "divider", role: "separator", "data-event-id": ev.id, "data-kind": ev.kind, "aria-label": "Conversation ended" },
    h("span", {}, "Conversation ended · ", timeEl(ev.ts)),
  );
}

function streamNode(item) {
  const node = h(
    "article",
    { class: "msg msg-assistant streaming", "data-turn-id": item.stream.turn_id, "aria-busy": "true", "aria-label": "Delegate is answering" },
    h("div", { class: "msg-meta" }, h("span", { class: "who", text: "Delegate" }), h("span", { class: "typing", text: "writing…" })),
    bubble(""),
  );
  updateStream(node, item);
  return node;
}

export function updateStream(node, item) {
  const s = item.stream;
  if (node._text === s.text && node._attempt === s.attempt) return;
  node._text = s.text;
  if (node._attempt !== s.attempt) node._md = null; // a retried stream starts over
  node._attempt = s.attempt;
  node.setAttribute("data-attempt", String(s.attempt));
  const body = node.querySelector(".bubble");
  for (const c of body.querySelectorAll(":scope .caret")) c.remove();
  // Only the last block is re-parsed and rebuilt on each delta.
  node._md = renderIncremental(document, body, node._md, s.text);
  node._reparsed = (node._reparsed || 0) + node._md.reparsed;
  node.setAttribute("data-reparsed", String(node._reparsed));
  // The caret follows the last word, inside the last paragraph or list item.
  let tail = body.lastElementChild;
  if (tail && (tail.tagName === "UL" || tail.tagName === "OL")) tail = tail.lastElementChild;
  const home = tail && (tail.tagName === "P" || tail.tagName === "LI") ? tail : body;
  home.appendChild(h("span", { class: "caret", "aria-hidden": "true" }));
}

export class TimelineView {
  /**
   * @param {HTMLElement} list  the element holding the blocks
   * @param {{onRetry: (clientMsgId: string) => void}} callbacks
   */
  constructor(list, callbacks) {
    this.list = list;
    this.callbacks = callbacks;
    this.nodes = new Map();
  }

  clear() {
    this.list.replaceChildren();
    this.nodes.clear();
  }

  /**
   * Draw `blocks` in order. With `only` (a Set of block keys), a block already on the page and
   * not in it keeps its node untouched: a live event changes the newest blocks, and updating
   * every block of a long history costs tens of milliseconds a time.
   */
  render(blocks, only = null) {
    reconcile(
      this.list,
      this.nodes,
      blocks,
      (b) => this.makeBlock(b),
      (node, b) => (!only || only.has(b.key)) && this.updateBlock(node, b),
    );
  }

  makeBlock(b) {
    if (b.type === "span" && b.task) return taskCardNode(b, { onOpen: (id) => this.callbacks.onOpenTask && this.callbacks.onOpenTask(id) });
    if (b.type === "span") return this.makeSpan(b);
    if (b.type === "divider") return dividerNode(b.event);
    return this.makeItem(b);
  }

  updateBlock(node, b) {
    if (b.type === "span" && b.task) updateTaskCard(node, b);
    else if (b.type === "span") this.updateSpan(node, b);
    else this.updateItem(node, b);
  }

  makeItem(item) {
    if (item.type === "event") return eventNode(item, this.callbacks);
    if (item.type === "activity") return activityNode(item, this.callbacks);
    if (item.type === "stream") return streamNode(item);
    return this.pendingNode(item);
  }

  updateItem(node, item) {
    if (item.type === "stream") updateStream(node, item);
    else if (item.type === "pending") this.updatePending(node, item);
    else if (item.type === "activity") updateActivity(node, item);
    else if (item.type === "event" && item.event.kind === "message") updateMessage(node, item);
    else if (item.type === "event" && node._delivery) updateDelivery(node, attachedTo(item, item.event.id).deliveries);
  }

  pendingNode(item) {
    const p = item.pending;
    const status = h("span", { class: "pending-status", role: "status" });
    const node = h(
      "article",
      { class: "msg msg-user pending", "data-client-msg-id": p.client_msg_id, "aria-label": "You, sending" },
      h("div", { class: "msg-meta" }, h("span", { class: "who", text: "You" }), item.showChannel === false ? null : channelBadge("text"), status),
      bubble(p.text),
    );
    node._status = status;
    this.updatePending(node, item);
    return node;
  }

  updatePending(node, item) {
    const p = item.pending;
    if (node._state === p.status) return;
    node._state = p.status;
    node.classList.toggle("failed", p.status === "failed");
    node._status.replaceChildren();
    if (p.status === "failed") {
      node._status.append(
        "Not sent",
        h("button", { type: "button", class: "link-button", text: "Retry", onclick: () => this.callbacks.onRetry(p.client_msg_id) }),
      );
    } else {
      // "Sent": the gateway has it; the bubble turns into the committed message when the agent takes it.
      node._status.textContent = p.status === "sent" ? "Sent" : "Sending…";
    }
  }

  /**
   * A span is a light marker in the flow (its icon, what it was, when, a thin rule), never a
   * card that folds: every span's messages stay in one scroll, and only inner activity folds.
   */
  makeSpan(b) {
    const title = h("span", { class: "span-title" });
    const time = h("span", { class: "span-time" });
    const channels = h("span", { class: "span-channels" });
    const mark = h("span", { class: "span-icon", "aria-hidden": "true" });
    // An activation's run picture (an SVG the server draws): opened as an image in a new tab.
    const picture = h("a", { class: "span-picture", target: "_blank", rel: "noopener", hidden: true, text: "Run picture" });
    // What the span's model calls cost (an activation: work Delegate did on its own).
    const cost = h("span", { class: "span-cost", hidden: true });
    const head = h(
      "div",
      { class: "span-head" },
      mark,
      h("span", { class: "span-top" }, title, time, channels, cost, picture),
      h("span", { class: "span-rule", "aria-hidden": "true" }),
    );
    const body = h("div", { class: "span-body" });
    const node = h("section", { class: "span", "data-span-id": b.span_id }, head, body);
    Object.assign(node, { _head: head, _title: title, _time: time, _channels: channels, _mark: mark, _picture: picture, _cost: cost, _body: body, _items: new Map() });
    this.updateSpan(node, b);
    return node;
  }

  updateSpan(node, b) {
    node.setAttribute("data-span-type", b.spanType || "unknown");
    node.classList.toggle("closed", b.closed);
    node.classList.toggle("live", !b.closed);
    if (node._markType !== b.spanType) {
      node._markType = b.spanType;
      node._mark.replaceChildren(icon(SPAN_ICONS[b.spanType] || "spark"));
    }
    setText(node._title, spanLabel(b.spanType));
    setText(node._time, formatRange(b.start, b.end));
    setText(node._channels, b.channels.map((c) => channelInfo(c).label).join(" · "));
    // What the span came to (its closing summary) is a hover note on the marker, not a line.
    const note = b.closeSummary ? `${spanLabel(b.spanType)}: ${b.summary}` : "";
    if (note) node._head.setAttribute("title", note);
    else node._head.removeAttribute("title");
    const cost = b.spanType === "activation" ? spanCost(b) : "";
    setText(node._cost, cost);
    node._cost.hidden = !cost;
    if (cost) node._cost.setAttribute("title", "What this activation's model calls cost");
    const run = b.spanType === "activation" && b.activationId ? diagramUrl(b.activationId) : null;
    node._picture.hidden = !run;
    if (run && node._picture.getAttribute("href") !== run) {
      node._picture.setAttribute("href", run);
      node._picture.setAttribute("title", "Open the run picture of this activation in a new tab");
    }
    const label = `${spanLabel(b.spanType)}, ${formatRange(b.start, b.end)}`;
    if (node.getAttribute("aria-label") !== label) node.setAttribute("aria-label", label);
    reconcile(
      node._body,
      node._items,
      b.items,
      (item) => this.makeItem(item),
      (n, item) => this.updateItem(n, item),
    );
  }
}
