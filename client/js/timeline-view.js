// The render blocks of a timeline: spans with their items, pending bubbles and streaming
// answers where they will land, regenerated answers as attempts of one, edited messages,
// channel badges, the delivery and attachment events on the event they are about, and where a
// reload starts drawing. Pure, no DOM: render.js reconciles these blocks by key.

import { STRUCTURAL_KINDS, isAttachedKind, isBookkeepingKind, isHiddenKind, isInnerKind } from "./event-kinds.js";
import { foldTurns } from "./timeline-activity.js";
import { looksLikeTask, markTaskSpan, noteSpanEvent, spanBlock, spanSummary } from "./timeline-spans.js";

/**
 * The render blocks, oldest first:
 *   {type:"span", key, span_id, spanType, closed, start, end, items, summary, …}
 *   {type:"event", key, event}          an event with no span (e.g. inner.signal between spans)
 *   {type:"divider", key, event}        conversation.ended: a subtle line, not a wall
 * Span items are {type:"event"|"stream"|"pending"|"activity", key, …}: a message item may
 * carry `attempts` (regenerations, newest shown), `superseded` (edited away) and
 * `showChannel`, and any item `attached` (its delivery and attachment events, see `attachedTo`);
 * an activity item folds a turn's context management. A span sits where its first
 * loaded event sits; later events of the same span join it (delayed extraction included).
 */
export function buildView(tl) {
  const blocks = [];
  const spans = new Map();
  const userMessages = new Map(); // message id -> span block (or null)
  const attached = new Map(); // parent event id -> {deliveries, files}
  for (const ev of tl.order) {
    if (ev.kind === "conversation.opened") continue; // never a "new chat" boundary
    if (isHiddenKind(ev.kind)) continue;
    if (isAttachedKind(ev.kind)) {
      if (!ev.parent_id) continue; // about nothing we could show it on
      let a = attached.get(ev.parent_id);
      if (!a) {
        a = { deliveries: [], files: [] };
        attached.set(ev.parent_id, a);
      }
      (ev.kind === "delivery" ? a.deliveries : a.files).push(ev);
      continue;
    }
    if (ev.kind === "conversation.ended") {
      blocks.push({ type: "divider", key: `div:${ev.id}`, event: ev });
      continue;
    }
    if (!ev.span_id) {
      if (STRUCTURAL_KINDS.has(ev.kind)) continue;
      // Bookkeeping between spans (a carry-over note written after a call, a decision, a run
      // picture) belongs to the span it follows: it joins that span's inner activity instead
      // of standing as a row of its own after it.
      const before = blocks[blocks.length - 1];
      if (isBookkeepingKind(ev.kind) && before && before.type === "span" && !looksLikeTask(before)) {
        before.items.push({ type: "event", key: `ev:${ev.id}`, event: ev });
        before.innerCount += 1;
        continue;
      }
      blocks.push({ type: "event", key: `ev:${ev.id}`, event: ev });
      if (ev.kind === "message" && ev.role === "user") userMessages.set(ev.id, null);
      continue;
    }
    let b = spans.get(ev.span_id);
    if (!b) {
      b = spanBlock(ev.span_id);
      spans.set(ev.span_id, b);
      blocks.push(b);
    }
    noteSpanEvent(b, ev);
    if (ev.kind === "span.opened") {
      b.opened = true;
      b.spanType = (ev.payload && ev.payload.type) || null;
      b.activationId = (ev.payload && typeof ev.payload.activation_id === "string" && ev.payload.activation_id) || null;
      continue;
    }
    if (ev.kind === "span.closed") {
      b.closed = true;
      b.closeReason = (ev.payload && ev.payload.reason) || null;
      b.closeSummary = (ev.payload && ev.payload.summary) || null;
      continue;
    }
    if (ev.kind === "model.usage") {
      b.calls += 1;
      const cost = ev.payload ? ev.payload.cost_usd : null;
      if (typeof cost === "number") b.costUsd += cost;
      else b.unpriced = true;
    }
    if (ev.kind === "message") {
      b.messageCount += 1;
      // A one-letter fragment (a call's first partial transcript) is no title.
      if (b.firstText === null && ev.payload && typeof ev.payload.text === "string" && ev.payload.text.trim().length >= 2) b.firstText = ev.payload.text;
      if (ev.role === "user") userMessages.set(ev.id, b);
    } else if (isInnerKind(ev.kind)) {
      b.innerCount += 1;
    }
    b.items.push({ type: "event", key: `ev:${ev.id}`, event: ev });
  }

  // A task's span is its own card, never where a message lands: the open span at the end is the
  // newest block that is not a task's, if it is a span still open.
  for (const b of spans.values()) markTaskSpan(b);
  let tail = null;
  for (let k = blocks.length - 1; k >= 0 && !tail; k -= 1) if (!blocks[k].task) tail = blocks[k];
  const openTail = tail && tail.type === "span" && !tail.closed ? tail : null;
  const trailing = []; // top-level optimistic items after every block

  // Pending bubbles: inside the open span at the end (where the commit will land), else after it.
  const pendingByEventId = new Map();
  for (const p of tl.pending.values()) {
    const item = { type: "pending", key: `pending:${p.client_msg_id}`, pending: p };
    if (p.event_id) pendingByEventId.set(p.event_id, item);
    (openTail ? openTail.items : trailing).push(item);
  }

  // Streaming answers: under their user message, else under its pending bubble, else at the end.
  for (const s of tl.streams.values()) {
    const item = { type: "stream", key: `stream:${s.turn_id}`, stream: s };
    if (userMessages.has(s.turn_id)) {
      const home = userMessages.get(s.turn_id);
      if (home) home.items.push(item);
      else {
        // After the turn's answer when this is a regeneration, else under the question.
        let at = blocks.findIndex((x) => x.key === `ev:${s.turn_id}`);
        blocks.forEach((x, k) => {
          if (x.type === "event" && x.event.parent_id === s.turn_id && x.event.kind === "message") at = k;
        });
        blocks.splice(at < 0 ? blocks.length : at + 1, 0, item);
      }
    } else if (pendingByEventId.has(s.turn_id)) {
      const list = openTail ? openTail.items : trailing;
      list.splice(list.indexOf(pendingByEventId.get(s.turn_id)) + 1, 0, item);
    } else {
      (openTail ? openTail.items : trailing).push(item);
    }
  }

  for (const b of spans.values()) {
    b.items = foldTurns(b.items, b.span_id);
    b.summary = spanSummary(b);
  }
  const out = foldTurns(blocks.concat(trailing), "", { topLevel: true });
  markAnswers(out);
  markChannels(out);
  markAttached(out, attached);
  return out;
}

const NOTHING_ATTACHED = Object.freeze({ deliveries: Object.freeze([]), files: Object.freeze([]) });

/**
 * Give each event item the delivery and attachment events about it: `attachedTo(id)` for
 * the event (or, on a regenerated answer, each attempt). Those whose event is not loaded
 * (an older page) wait in the timeline and show once it arrives.
 */
function markAttached(blocks, attached) {
  if (!attached.size) return;
  eachList(blocks, (list) => {
    for (const item of list) {
      if (item.type !== "event") continue;
      const ids = (item.attempts || [item.event]).map((e) => e.id);
      if (!ids.some((id) => attached.has(id))) continue;
      item.attached = Object.fromEntries(ids.filter((id) => attached.has(id)).map((id) => [id, attached.get(id)]));
    }
  });
}

/** The delivery and attachment events about one event of an item (empty lists when none). */
export function attachedTo(item, eventId) {
  return (item && item.attached && item.attached[eventId]) || NOTHING_ATTACHED;
}

function eachList(blocks, fn) {
  fn(blocks);
  for (const b of blocks) if (b.type === "span") fn(b.items);
}

/**
 * Regenerated answers fold into the answer they replace (`attempts`, oldest first; `event`
 * is the newest). An edited message (a newer user message naming it in `supersedes`) and
 * the answer it got are marked `superseded`. History itself is never rewritten.
 */
function markAnswers(blocks) {
  const superseded = new Map(); // old user message id -> the message that replaced it
  const answers = new Map(); // assistant message id -> its item
  eachList(blocks, (list) => {
    for (const item of list) {
      if (item.type !== "event" || item.event.kind !== "message") continue;
      const p = item.event.payload || {};
      if (item.event.role === "user" && typeof p.supersedes === "string") superseded.set(p.supersedes, item.event.id);
    }
  });
  eachList(blocks, (list) => {
    for (let i = 0; i < list.length; i += 1) {
      const item = list[i];
      if (item.type !== "event" || item.event.kind !== "message") continue;
      const ev = item.event;
      const p = ev.payload || {};
      if (superseded.has(ev.id)) item.superseded = superseded.get(ev.id);
      if (ev.role !== "assistant") continue;
      if (ev.parent_id && superseded.has(ev.parent_id)) item.superseded = superseded.get(ev.parent_id);
      const target = typeof p.regenerates === "string" ? answers.get(p.regenerates) : null;
      if (target) {
        target.attempts.push(ev);
        target.event = ev;
        answers.set(ev.id, target);
        list.splice(i, 1);
        i -= 1;
        continue;
      }
      item.attempts = [ev];
      answers.set(ev.id, item);
    }
  });
}

/** Channels whose badge is on every message: an SMS or an email reads differently from chat. */
const ALWAYS_BADGED = new Set(["sms", "email"]);

/** A channel badge where the channel changes (and on the first message), and on every SMS and email. */
function markChannels(blocks) {
  let prev = null;
  const visit = (item) => {
    let channel = null;
    if (item.type === "pending") channel = "text";
    else if (item.type === "event" && item.event.kind === "message") channel = item.event.channel || "text";
    else return;
    item.showChannel = channel !== prev || ALWAYS_BADGED.has(channel);
    prev = channel;
  };
  for (const b of blocks) {
    if (b.type === "span") b.items.forEach(visit);
    else visit(b);
  }
}

/**
 * Where drawing starts when only the newest blocks are drawn: the index of the oldest block
 * among the newest that together hold at least `items` items (a span counts its items).
 * A reload draws these first, so the last messages are on screen at once, and the older
 * blocks above them in later tasks.
 */
export function drawStart(blocks, items) {
  let held = 0;
  let k = blocks.length;
  while (k > 0 && held < items) {
    k -= 1;
    held += blocks[k].type === "span" ? Math.max(1, blocks[k].items.length) : 1;
  }
  return k;
}
