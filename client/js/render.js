// The timeline's DOM: keyed blocks from timeline.buildView, reconciled in place so that
// open/closed spans, focus and scroll survive every update.

import { h, icon, reconcile, setText } from "./dom.js";
import { channelInfo, formatRange, formatTime, fullTime, innerDetail, innerSummary } from "./format.js";
import { renderMarkdown } from "./markdown.js";
import { isInnerKind, spanLabel } from "./timeline.js";

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

function messageNode(ev) {
  const user = ev.role === "user";
  const who = user ? "You" : "Delegate";
  const info = channelInfo(ev.channel);
  const text = (ev.payload && typeof ev.payload.text === "string" && ev.payload.text) || "";
  return h(
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
    h("div", { class: "msg-meta" }, h("span", { class: "who", text: who }), channelBadge(ev.channel), timeEl(ev.ts)),
    bubble(text),
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

function innerNode(ev) {
  const s = innerSummary(ev);
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
  return h(
    "div",
    {
      class: `inner${s.tone ? ` tone-${s.tone}` : ""}`,
      "data-event-id": ev.id,
      "data-kind": ev.kind,
      "data-seq": ev.seq ?? "",
    },
    h(
      "details",
      {},
      h(
        "summary",
        { "aria-label": `Inner Plane: ${s.label}${s.text ? `, ${s.text}` : ""}` },
        icon("inner", "icon inner-mark"),
        h("span", { class: "inner-label", text: s.label }),
        h("span", { class: "inner-text", text: s.text }),
        timeEl(ev.ts),
      ),
      detail,
    ),
  );
}

function eventNode(ev) {
  if (ev.kind === "message" && !isInnerKind(ev.kind)) return messageNode(ev);
  if (ev.kind === "turn.failed") return failureNode(ev);
  // Anything else — known inner kinds and kinds this client does not know yet — is inner
  // activity: it must never look like something the person or Delegate said.
  return innerNode(ev);
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

function updateStream(node, item) {
  const s = item.stream;
  if (node._text === s.text && node._attempt === s.attempt) return;
  node._text = s.text;
  node._attempt = s.attempt;
  node.setAttribute("data-attempt", String(s.attempt));
  const body = node.querySelector(".bubble");
  body.replaceChildren(renderMarkdown(document, s.text));
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

  render(blocks) {
    let lastSpan = null;
    for (const b of blocks) if (b.type === "span") lastSpan = b.key;
    this.lastSpanKey = lastSpan;
    reconcile(
      this.list,
      this.nodes,
      blocks,
      (b) => this.makeBlock(b),
      (node, b) => this.updateBlock(node, b),
    );
  }

  makeBlock(b) {
    if (b.type === "span") return this.makeSpan(b);
    if (b.type === "divider") return dividerNode(b.event);
    return this.makeItem(b);
  }

  updateBlock(node, b) {
    if (b.type === "span") this.updateSpan(node, b);
    else this.updateItem(node, b);
  }

  makeItem(item) {
    if (item.type === "event") return eventNode(item.event);
    if (item.type === "stream") return streamNode(item);
    return this.pendingNode(item);
  }

  updateItem(node, item) {
    if (item.type === "stream") updateStream(node, item);
    else if (item.type === "pending") this.updatePending(node, item);
  }

  pendingNode(item) {
    const p = item.pending;
    const status = h("span", { class: "pending-status", role: "status" });
    const node = h(
      "article",
      { class: "msg msg-user pending", "data-client-msg-id": p.client_msg_id, "aria-label": "You, sending" },
      h("div", { class: "msg-meta" }, h("span", { class: "who", text: "You" }), channelBadge("text"), status),
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

  makeSpan(b) {
    const details = h("details", {});
    const title = h("span", { class: "span-title" });
    const time = h("span", { class: "span-time" });
    const channels = h("span", { class: "span-channels" });
    const line = h("span", { class: "span-line" });
    const mark = h("span", { class: "span-icon" });
    const summary = h(
      "summary",
      { class: "span-head" },
      icon("chevron", "icon chevron"),
      mark,
      h("span", { class: "span-heading" }, h("span", { class: "span-top" }, title, time, channels), line),
    );
    const body = h("div", { class: "span-body" });
    details.append(summary, body);
    const node = h("section", { class: "span", "data-span-id": b.span_id }, details);
    Object.assign(node, { _details: details, _title: title, _time: time, _channels: channels, _line: line, _mark: mark, _body: body, _items: new Map() });
    // Open when it appears live or as the newest span; after that only the person opens or
    // closes it, so nothing folds away under their eyes.
    details.open = !b.closed || b.key === this.lastSpanKey;
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
    setText(node._line, b.summary);
    const label = `${spanLabel(b.spanType)}, ${formatRange(b.start, b.end)}: ${b.summary}`;
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
