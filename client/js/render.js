// The timeline's DOM: keyed blocks from buildView (timeline-view.js), reconciled in place so that
// folded activity, focus and scroll survive every update.
// A message is message-node.js, every other row timeline-rows.js, a task's span task-card.js.

import { h, icon, reconcile, setText } from "./dom.js";
import { isInnerKind } from "./event-kinds.js";
import { channelInfo, formatRange } from "./format.js";
import { channelBadge, bubble, messageNode, streamNode, updateDelivery, updateMessage, updateStream } from "./message-node.js";
import { taskCardNode, updateTaskCard } from "./task-card.js";
import { diagramUrl } from "./tasks.js";
import { activityNode, dividerNode, failureNode, innerNode, refusedNode, updateActivity } from "./timeline-rows.js";
import { spanCost, spanLabel } from "./timeline-spans.js";
import { attachedTo } from "./timeline-view.js";

const SPAN_ICONS = { interaction: "text", voice: "mic", phone: "phone", activation: "inner" };

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
