// The relationship timeline, rebuilt from ledger events: pure data, no DOM, no network.
//
// Everything the page shows is derived from four inputs: committed events (deduplicated
// by id, ordered by (ts, id)), streaming deltas (by turn id and attempt), optimistic
// pending messages (by client_msg_id) and the history cursor. This module holds them;
// `buildView` (timeline-view.js) turns them into render blocks; the DOM layer only reconciles
// those blocks by key.

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

/** The ids of every committed event, for tests and for duplicate checks. */
export function eventIds(tl) {
  return tl.order.map((ev) => ev.id);
}
