// The relationship timeline, rebuilt from ledger events: pure data, no DOM, no network.
//
// Everything the page shows is derived from four inputs: committed events (deduplicated
// by id, ordered by (ts, id)), streaming deltas (by turn id and attempt), optimistic
// pending messages (by client_msg_id) and the history cursor. `buildView` turns them
// into render blocks; the DOM layer only reconciles those blocks by key.

import { money } from "./usage.js";

/** Kinds shown as Inner Plane activity: collapsed, never styled like a message. */
export const INNER_KINDS = new Set([
  "context.usage",
  "model.usage",
  "context.compacted",
  "context.capsule",
  "memory.retrieved",
  "memory.extracted",
  "memory.fact.added",
  "memory.fact.cited",
  "memory.fact.edited",
  "memory.fact.forgotten",
  "import.started",
  "import.finished",
  "tool.call",
  "tool.result",
  "inner.signal",
  "inner.decision",
  "checkpoint",
  "activation.outcome",
  "reminder.set",
  "reminder.changed",
  "reminder.cancelled",
  "session.started",
  "session.ended",
  "voice.timing",
]);

/**
 * Context management: folded into one quiet "inner activity" line per turn instead of a row
 * between every question and answer. Tool calls, tasks and activations keep their own rows.
 */
export function isFoldedKind(kind) {
  return (
    typeof kind === "string" &&
    (kind.startsWith("context.") ||
      kind.startsWith("memory.") ||
      kind.startsWith("inner.") ||
      kind === "checkpoint" ||
      kind === "model.usage" ||
      kind === "voice.timing")
  );
}

/**
 * Kinds that keep a row of their own in the flow: what was said, what went wrong, what was
 * done on the owner's behalf. Every other kind is bookkeeping (context management, memory,
 * decisions, run pictures, and kinds this client does not know yet): it folds into the inner
 * activity of its turn or span and never shows as a raw kind.
 */
const ROW_KINDS = new Set([
  "message",
  "turn.failed",
  "inbound.refused",
  "tool.call",
  "tool.result",
  "inner.signal",
  "activation.outcome",
  "budget.notice",
  "reminder.set",
  "reminder.changed",
  "reminder.cancelled",
  "session.started",
  "session.ended",
  "call.placed",
  "call.voicemail",
  "import.started",
  "import.finished",
]);

/** Bookkeeping: folded into the inner activity of its turn, span or the span before it. */
export function isBookkeepingKind(kind) {
  if (typeof kind !== "string") return false;
  if (kind.startsWith("task.")) return false;
  return isFoldedKind(kind) ? kind !== "inner.signal" : !ROW_KINDS.has(kind);
}

export function isInnerKind(kind) {
  return INNER_KINDS.has(kind) || (typeof kind === "string" && kind.startsWith("task."));
}

/** Kinds that structure the timeline but are not items of their own. */
const STRUCTURAL_KINDS = new Set(["conversation.opened", "span.opened", "span.closed"]);

/**
 * The system's own bookkeeping, kept in the ledger but never on the timeline: `term.*` says
 * which process held a singleton's lease (a restart or failover must not look like a break in
 * the relationship). They still count for `maxSeq`, so a reconnect resumes after them.
 * (`session.*` are calls now: the ledger's migration 003 renamed the old lease events.)
 */
export function isHiddenKind(kind) {
  return typeof kind === "string" && (kind.startsWith("term.") || kind === "mail.progress");
}

/**
 * Kinds that describe another event (their `parent_id`) and show on it, never as rows:
 * how an outbound SMS or email is being delivered, and what became of an inbound one's
 * attachments. Either may load before or after the event it belongs to.
 */
export const ATTACHED_KINDS = new Set(["delivery", "attachment.stored"]);

export function isAttachedKind(kind) {
  return ATTACHED_KINDS.has(kind);
}

const FIXED_TS = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?Z$/;

/**
 * A string that sorts like the timestamp, to the microsecond.
 * The ledger writes fixed-width UTC text ("…:59.123456Z"); anything else is normalised.
 */
export function tsKey(ts) {
  if (typeof ts !== "string") return "";
  const m = FIXED_TS.exec(ts);
  if (m) return `${m[1]}.${(m[2] || "").padEnd(6, "0").slice(0, 6)}`;
  const ms = Date.parse(ts);
  if (Number.isNaN(ms)) return "";
  const micro = /\.(\d{1,9})/.exec(ts);
  const iso = new Date(ms).toISOString(); // "YYYY-MM-DDTHH:MM:SS.mmmZ"
  const frac = micro ? micro[1].padEnd(6, "0").slice(0, 6) : iso.slice(20, 23) + "000";
  return `${iso.slice(0, 19)}.${frac}`;
}

/** Timeline order: (ts, id). */
export function compareEvents(a, b) {
  const ka = tsKey(a.ts);
  const kb = tsKey(b.ts);
  if (ka !== kb) return ka < kb ? -1 : 1;
  if (a.id === b.id) return 0;
  return a.id < b.id ? -1 : 1;
}

export function createTimeline() {
  return {
    byId: new Map(), // event id -> event
    order: [], // events by (ts, id)
    maxSeq: 0, // the highest commit seq seen: what `hello.after_seq` asks after
    cursor: null, // cursor of the oldest loaded page, null when nothing is older
    hasOlder: false,
    hydrated: false,
    streams: new Map(), // turn id -> {turn_id, attempt, parts, text}
    finishedTurns: new Map(), // turn id -> the highest attempt answered (assistant message) or failed
    pending: new Map(), // client_msg_id -> {client_msg_id, text, ts, status, event_id}
    clientIds: new Set(), // client_msg_ids already committed (a late ack must not resurrect a bubble)
  };
}

function isEvent(ev) {
  return ev && typeof ev === "object" && typeof ev.id === "string" && ev.id && typeof ev.kind === "string";
}

/**
 * Add committed events (a page, a replay or one live event). Duplicates by id are ignored.
 * Returns the events that were new, in timeline order.
 */
export function addEvents(tl, events) {
  const fresh = [];
  for (const ev of events || []) {
    if (!isEvent(ev) || tl.byId.has(ev.id)) continue;
    tl.byId.set(ev.id, ev);
    fresh.push(ev);
    if (Number.isInteger(ev.seq) && ev.seq > tl.maxSeq) tl.maxSeq = ev.seq;
    settle(tl, ev);
  }
  if (fresh.length === 0) return fresh;
  fresh.sort(compareEvents);
  const last = tl.order[tl.order.length - 1];
  if (!last || compareEvents(last, fresh[0]) < 0) {
    // The common live case: everything new is newer than what we hold.
    for (const ev of fresh) tl.order.push(ev);
  } else {
    tl.order = mergeSorted(tl.order, fresh);
  }
  return fresh;
}

/**
 * One live event. An event older than the loaded window while older history is still unloaded
 * (an import's history, committed now) waits for "load older" to bring it in its place, instead
 * of standing above a gap; its seq still counts for the next `hello`.
 */
export function addLive(tl, ev) {
  if (isEvent(ev) && tl.hasOlder && tl.order.length && compareEvents(ev, tl.order[0]) < 0) {
    if (Number.isInteger(ev.seq) && ev.seq > tl.maxSeq) tl.maxSeq = ev.seq;
    return [];
  }
  return addEvents(tl, [ev]);
}

function mergeSorted(a, b) {
  const out = new Array(a.length + b.length);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < a.length && j < b.length) out[k++] = compareEvents(a[i], b[j]) <= 0 ? a[i++] : b[j++];
  while (i < a.length) out[k++] = a[i++];
  while (j < b.length) out[k++] = b[j++];
  return out;
}

/** A committed event resolves the optimistic state it stands for. */
function settle(tl, ev) {
  if (ev.kind === "message" && ev.role === "user") {
    const cid = ev.payload && ev.payload.client_msg_id;
    if (cid) {
      tl.clientIds.add(cid);
      tl.pending.delete(cid);
    }
    for (const [key, p] of tl.pending) if (p.event_id === ev.id) tl.pending.delete(key);
  }
  const answered = (ev.kind === "message" && ev.role === "assistant") || ev.kind === "turn.failed";
  if (answered && ev.parent_id) {
    const attempt = (ev.payload && Number.isInteger(ev.payload.attempt) && ev.payload.attempt) || 1;
    const s = tl.streams.get(ev.parent_id);
    // The answer settles every stream attempt up to its own (a retried stream included);
    // a regeneration streams a higher attempt afterwards.
    const done = Math.max(attempt, tl.finishedTurns.get(ev.parent_id) || 0, s ? s.attempt : 0);
    tl.finishedTurns.set(ev.parent_id, done);
    if (s && s.attempt <= done) tl.streams.delete(ev.parent_id);
  }
}

/**
 * Apply one `delta` frame. A higher attempt replaces the partial text; a lower one, or a
 * delta for a turn already answered, is ignored. Returns true when the view changed.
 */
export function applyDelta(tl, frame) {
  if (!frame || typeof frame.turn_id !== "string" || typeof frame.text !== "string") return false;
  const attempt = Number.isInteger(frame.attempt) ? frame.attempt : 1;
  const done = tl.finishedTurns.get(frame.turn_id);
  if (done !== undefined && attempt <= done) return false; // a late delta of an answered attempt
  let s = tl.streams.get(frame.turn_id);
  if (s && attempt < s.attempt) return false;
  if (!s || attempt > s.attempt) {
    s = { turn_id: frame.turn_id, attempt, parts: [], text: "" };
    tl.streams.set(frame.turn_id, s);
  }
  if (Number.isInteger(frame.index) && frame.index >= 0) {
    if (s.parts[frame.index] === frame.text) return false; // a repeated delta
    s.parts[frame.index] = frame.text;
  } else {
    s.parts.push(frame.text);
  }
  s.text = s.parts.join("");
  return true;
}

/** An optimistic bubble for a message the person just sent. */
export function addPending(tl, { client_msg_id, text, ts }) {
  if (tl.clientIds.has(client_msg_id)) return null;
  const entry = { client_msg_id, text, ts: ts || new Date().toISOString(), status: "sending", event_id: null };
  tl.pending.set(client_msg_id, entry);
  return entry;
}

/** Update a pending bubble (status, or the event id the server gave it). */
export function updatePending(tl, client_msg_id, patch) {
  const p = tl.pending.get(client_msg_id);
  if (!p) return false;
  Object.assign(p, patch);
  if (p.event_id && tl.byId.has(p.event_id)) tl.pending.delete(client_msg_id);
  return true;
}

/**
 * Merge a `/api/timeline` page. The first page also sets where "load older" starts; an
 * older page moves the cursor back. Span groups that straddle pages merge by span id.
 */
export function mergePage(tl, page, { older = false } = {}) {
  const fresh = addEvents(tl, (page && page.events) || []);
  if (older || !tl.hydrated) {
    tl.cursor = (page && page.cursor) || null;
    tl.hasOlder = tl.cursor !== null;
  }
  tl.hydrated = true;
  return fresh;
}

function spanBlock(id) {
  return {
    type: "span",
    key: `span:${id}`,
    span_id: id,
    spanType: null,
    activationId: null, // an activation span's activation (its run picture)
    opened: false, // its span.opened is loaded
    closed: false,
    closeReason: null,
    closeSummary: null,
    start: null,
    end: null,
    items: [],
    channels: [],
    messageCount: 0,
    innerCount: 0,
    firstText: null,
    calls: 0, // model calls billed to the span (its model.usage events)
    costUsd: 0, // their priced cost; `unpriced` when any came from a model with no price
    unpriced: false,
  };
}

/** What a span's model calls cost, from its `model.usage` events: "$0.0042 · 3 model calls". */
export function spanCost(b) {
  if (!b.calls) return "";
  const calls = `${b.calls} model call${b.calls === 1 ? "" : "s"}`;
  if (b.unpriced && !b.costUsd) return `unpriced · ${calls}`;
  return `${b.unpriced ? "at least " : ""}${money(b.costUsd)} · ${calls}`;
}

function noteSpanEvent(b, ev) {
  if (!b.start) b.start = ev.ts;
  b.end = ev.ts;
  // The channels a span shows are where things were said, not where bookkeeping happened.
  if (ev.kind === "message" && ev.channel && ev.channel !== "inner" && !b.channels.includes(ev.channel)) {
    b.channels.push(ev.channel);
  }
}

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

/** A task's span, before markTaskSpan has run: its own bookkeeping stays out of it. */
function looksLikeTask(b) {
  return b.spanType === "task" || (!b.opened && b.items.length > 0 && b.items.every((i) => i.type === "event" && i.event.kind.startsWith("task.")));
}

/**
 * A task's span (`span.opened` type "task", span id = task id) renders as one card with its
 * steps folded inside; one whose opening is not loaded is known by its events all being task.*.
 */
function markTaskSpan(b) {
  const taskEvents = b.items.length > 0 && b.items.every((i) => i.type === "event" && i.event.kind.startsWith("task."));
  if (b.spanType === "task" || (!b.opened && taskEvents)) {
    b.task = true;
    b.spanType = "task";
    b.key = `task:${b.span_id}`;
  }
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

function isUserItem(item) {
  return item.type === "pending" || (item.type === "event" && item.event.kind === "message" && item.event.role === "user");
}

/**
 * One turn = a user message and everything after it up to the next one. Its context
 * management events (usage, compaction, capsule, memory, checkpoint, inner signals) become
 * one `activity` item at the end of the turn, after the answer; everything else keeps its place.
 */
export function foldTurns(items, spanId = "", { topLevel = false } = {}) {
  const out = [];
  // Between spans (top level) only a turn's own rows fold; an inner signal between spans
  // stays a row of its own.
  let turnKey = topLevel ? null : `${spanId}:start`;
  let folded = [];
  const flush = () => {
    if (folded.length) out.push(activityItem(turnKey, folded));
    folded = [];
  };
  for (const item of items) {
    if (isUserItem(item)) {
      flush();
      turnKey = item.key;
    } else if (topLevel && (item.type === "span" || item.type === "divider")) {
      flush();
      turnKey = null;
    }
    const fold = item.type === "event" && (isFoldedKind(item.event.kind) || isBookkeepingKind(item.event.kind));
    // Bookkeeping with no turn to fold into (before the first span) still folds, into a line of its own.
    if (fold && turnKey === null && isBookkeepingKind(item.event.kind)) turnKey = `top:${item.key}`;
    if (turnKey !== null && fold) folded.push(item.event);
    else out.push(item);
  }
  flush();
  return out;
}

function activityItem(turnKey, events) {
  return { type: "activity", key: `act:${turnKey}`, events, summary: activitySummary(events) };
}

const ACTIVITY_WORDS = [
  ["context.usage", "context used", "context-used readings"],
  ["model.usage", "model call", "model calls"],
  ["context.compacted", "summary of older messages", "summaries of older messages"],
  ["context.capsule", "what I keep in mind", "updates of what I keep in mind"],
  ["memory.retrieved", "memory lookup", "memory lookups"],
  ["memory.extracted", "memory saved", "memories saved"],
  ["memory.fact.added", "fact remembered", "facts remembered"],
  ["memory.fact.cited", "fact said again", "facts said again"],
  ["memory.fact.edited", "memory edit", "memory edits"],
  ["memory.fact.forgotten", "memory forgotten", "memories forgotten"],
  ["checkpoint", "checkpoint", "checkpoints"],
  ["voice.timing", "answer timing", "answer timings"],
  ["inner.signal", "signal", "signals"],
  ["inner.decision", "decision", "decisions"],
];

const OTHER_WORDS = { "thoughtflow.artifact": "run picture", "inner.signal": "signal" };

/** "3 background steps: memory lookup, context used, what I keep in mind": plain words, no jargon. */
export function activitySummary(events) {
  const counts = new Map();
  for (const ev of events) {
    const row = ACTIVITY_WORDS.find(([k]) => k === ev.kind);
    // A kind with no words of its own is never shown raw ("thoughtflow.artifact").
    const word = row ? row[1] : OTHER_WORDS[ev.kind] || "other step";
    const plural = row ? row[2] : `${word}s`;
    const entry = counts.get(word) || { n: 0, plural };
    entry.n += 1;
    counts.set(word, entry);
  }
  const parts = [...counts].map(([word, { n, plural }]) => (n === 1 ? word : `${n} ${plural}`));
  const failed = events.some((ev) => ev.payload && ev.payload.status === "failed");
  return `${events.length} background step${events.length === 1 ? "" : "s"}: ${parts.join(", ")}${failed ? " · one failed" : ""}`;
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

const SPAN_LABELS = {
  interaction: "Conversation",
  voice: "Browser voice call",
  phone: "Phone call",
  activation: "Delegate acting on its own",
  task: "Task",
};

export function spanLabel(spanType) {
  return SPAN_LABELS[spanType] || "Activity";
}

function clip(text, n) {
  const one = String(text).replace(/\s+/g, " ").trim();
  return one.length > n ? `${one.slice(0, n - 1)}…` : one;
}

/** The one line shown when a span is collapsed. */
export function spanSummary(b) {
  if (b.closeSummary) return clip(b.closeSummary, 140);
  const parts = [];
  if (b.messageCount) parts.push(`${b.messageCount} message${b.messageCount === 1 ? "" : "s"}`);
  if (b.innerCount) parts.push(`${b.innerCount} inner step${b.innerCount === 1 ? "" : "s"}`);
  const count = parts.join(", ") || "no messages";
  const first = firstSentence(b.firstText);
  return first ? `${count} · “${clip(first, 90)}”` : count;
}

/**
 * The first full sentence of a text, for a title: a call's first transcript may be a fragment
 * ("H"), so a sentence needs a few words; without one, the whole text (or null).
 */
export function firstSentence(text) {
  if (typeof text !== "string" || !text.trim()) return null;
  const one = text.replace(/\s+/g, " ").trim();
  const m = /^(.+?[.!?])(\s|$)/.exec(one);
  if (m && m[1].split(" ").length >= 2) return m[1];
  return one.length >= 2 ? one : null;
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

/** The ids of every committed event, for tests and for duplicate checks. */
export function eventIds(tl) {
  return tl.order.map((ev) => ev.id);
}
