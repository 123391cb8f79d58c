import assert from "node:assert/strict";
import { test } from "node:test";

import { isFoldedKind, isHiddenKind, isInnerKind } from "../../client/js/event-kinds.js";
import { addEvents, addLive, addPending, applyDelta, compareEvents, createTimeline, eventIds, mergePage, tsKey, updatePending } from "../../client/js/timeline.js";
import { activitySummary, foldTurns } from "../../client/js/timeline-activity.js";
import { firstSentence, spanCost, spanSummary } from "../../client/js/timeline-spans.js";
import { buildView, drawStart } from "../../client/js/timeline-view.js";
import { at, botMsg, ev, spanClosed, spanOpened, userMsg } from "./helpers.mjs";

function spanKeys(blocks) {
  return blocks.map((b) => (b.type === "span" ? `span:${b.span_id}(${b.items.map((i) => i.key).join(",")})` : b.key));
}

test("tsKey sorts fixed-width and offset timestamps alike, to the microsecond", () => {
  assert.equal(tsKey("2026-01-05T09:00:01.000001Z"), "2026-01-05T09:00:01.000001");
  assert.equal(tsKey("2026-01-05T10:00:01.5+01:00"), "2026-01-05T09:00:01.500000");
  assert.equal(tsKey("2026-01-05T09:00:01Z"), "2026-01-05T09:00:01.000000");
  assert.ok(tsKey("2026-01-05T09:00:01.000002Z") > tsKey("2026-01-05T09:00:01.000001Z"));
  assert.equal(tsKey(null), "");
});

test("order is (ts, id): same timestamp falls back to the id", () => {
  const a = { id: "a", ts: at(1) };
  const b = { id: "b", ts: at(1) };
  const c = { id: "0", ts: at(2) };
  assert.deepEqual([c, b, a].sort(compareEvents).map((e) => e.id), ["a", "b", "0"]);
});

test("addEvents deduplicates by id and tracks the highest seq", () => {
  const tl = createTimeline();
  const e1 = userMsg("hi", { seq: 3 });
  const e2 = botMsg("hello", e1.id, { seq: 4 });
  assert.equal(addEvents(tl, [e1, e2]).length, 2);
  assert.equal(addEvents(tl, [e2, { ...e1 }]).length, 0);
  assert.deepEqual(eventIds(tl), [e1.id, e2.id]);
  assert.equal(tl.maxSeq, 4);
  addEvents(tl, [null, { nope: 1 }, { id: "", kind: "message" }]);
  assert.equal(tl.order.length, 2);
});

test("out-of-order arrivals land in timeline order", () => {
  const tl = createTimeline();
  const late = ev("memory.extracted", { seq: 10, ts: at(2.5) });
  const a = userMsg("a", { seq: 2 });
  const b = userMsg("b", { seq: 3 });
  addEvents(tl, [b]);
  addEvents(tl, [a]);
  addEvents(tl, [late]);
  assert.deepEqual(eventIds(tl), [a.id, late.id, b.id]);
});

test("spans group their events; structural events are not items", () => {
  const tl = createTimeline();
  const open = ev("conversation.opened", { span_id: null });
  const s = spanOpened("interaction", { span_id: "s1" });
  const u = userMsg("first question", { span_id: "s1" });
  const usage = ev("context.usage", { span_id: "s1", payload: { input_tokens: 10 } });
  const a = botMsg("answer", u.id, { span_id: "s1" });
  const closed = spanClosed({ span_id: "s1" });
  addEvents(tl, [open, s, u, usage, a, closed]);
  const view = buildView(tl);
  assert.equal(view.length, 1, "conversation.opened is never a boundary");
  const span = view[0];
  assert.equal(span.type, "span");
  assert.equal(span.spanType, "interaction");
  assert.equal(span.closed, true);
  // The usage row folds into the turn's one activity line, after the answer.
  assert.deepEqual(span.items.map((i) => i.key), [`ev:${u.id}`, `ev:${a.id}`, `act:ev:${u.id}`]);
  assert.deepEqual(span.items[2].events.map((e) => e.id), [usage.id]);
  assert.equal(span.start, s.ts);
  assert.equal(span.end, closed.ts);
  assert.equal(span.messageCount, 2);
  assert.equal(span.innerCount, 1);
  assert.match(span.summary, /2 messages, 1 inner step · “first question”/);
});

test("events without a span sit inline between spans; conversation.ended is a divider", () => {
  const tl = createTimeline();
  const s1 = spanOpened("interaction", { span_id: "A" });
  const m1 = userMsg("one", { span_id: "A" });
  const c1 = spanClosed({ span_id: "A" });
  const sig = ev("inner.signal", { span_id: null, channel: "inner", payload: { source: "timer", type: "due" } });
  const end = ev("conversation.ended", { span_id: null });
  const s2 = spanOpened("activation", { span_id: "B", channel: "inner" });
  const m2 = botMsg("reminder", null, { span_id: "B" });
  addEvents(tl, [m2, s2, end, sig, c1, m1, s1]);
  const view = buildView(tl);
  assert.deepEqual(spanKeys(view), [
    `span:A(ev:${m1.id})`,
    `ev:${sig.id}`,
    `div:${end.id}`,
    `span:B(ev:${m2.id})`,
  ]);
  assert.equal(view[3].spanType, "activation");
});

test("term bookkeeping never shows, yet counts for the seq a reconnect resumes after", () => {
  const tl = createTimeline();
  const term = { conversation_id: null, span_id: null, channel: "inner" };
  const started = ev("term.started", { ...term, payload: { term_id: "S1", type: "agent", holder: "agent" } });
  addEvents(tl, [started]);
  assert.deepEqual(buildView(tl), [], "a fresh system with only the agent's term start is still empty");
  assert.equal(tl.maxSeq, started.seq);

  const s1 = spanOpened("interaction", { span_id: "A" });
  const m1 = userMsg("one", { span_id: "A" });
  const ended = ev("term.ended", { ...term, payload: { term_id: "S1", reason: "shutdown" } });
  const next = ev("term.started", { ...term, payload: { term_id: "S2", type: "agent", holder: "b" } });
  // Even one that carried a span (a voice term) neither joins nor makes a span.
  const stray = ev("term.started", { span_id: "V", payload: { term_id: "S3", type: "voice", holder: "v" } });
  const m2 = botMsg("two", m1.id, { span_id: "A" });
  addEvents(tl, [s1, m1, ended, next, stray, m2]);
  const view = buildView(tl);
  assert.deepEqual(spanKeys(view), [`span:A(ev:${m1.id},ev:${m2.id})`], "a failover is no break in the timeline");
  assert.equal(view[0].end, m2.ts);
  assert.equal(tl.maxSeq, m2.seq);
  assert.ok(isHiddenKind("term.ended") && !isHiddenKind("message") && !isHiddenKind("inner.signal"));
  assert.ok(!isHiddenKind("session.started") && isInnerKind("session.ended"), "calls are shown");
  assert.ok(!isInnerKind("term.started"));
});

test("a late event of an older span joins that span, not the newer one", () => {
  const tl = createTimeline();
  const a0 = spanOpened("interaction", { span_id: "A" });
  const a1 = userMsg("x", { span_id: "A" });
  const b0 = spanOpened("interaction", { span_id: "B" });
  const b1 = userMsg("y", { span_id: "B" });
  const late = ev("memory.extracted", { span_id: "A", payload: { items: [] } });
  addEvents(tl, [a0, a1, b0, b1, late]);
  const view = buildView(tl);
  assert.deepEqual(spanKeys(view), [`span:A(ev:${a1.id},act:ev:${a1.id})`, `span:B(ev:${b1.id})`]);
  assert.deepEqual(view[0].items[1].events, [late]);
});

test("load older prepends without duplicates and merges a span that straddles pages", () => {
  const tl = createTimeline();
  const s0 = spanOpened("interaction", { span_id: "S" });
  const m = [];
  for (let i = 0; i < 6; i += 1) m.push(userMsg(`m${i}`, { span_id: "S" }));
  const t0 = spanOpened("interaction", { span_id: "T" });
  const t1 = userMsg("t", { span_id: "T" });
  // Newest page: the tail of span S and all of T (as if the server cut inside S).
  mergePage(tl, { events: [m[3], m[4], m[5], t0, t1], cursor: "c-newest" });
  assert.equal(tl.cursor, "c-newest");
  assert.equal(tl.hasOlder, true);
  // A live event arrives meanwhile.
  const live = botMsg("live", t1.id, { span_id: "T" });
  addEvents(tl, [live]);
  // The older page overlaps (the server expanded it to the span start) and repeats m[3].
  mergePage(tl, { events: [s0, m[0], m[1], m[2], m[3]], cursor: null }, { older: true });
  assert.equal(tl.cursor, null);
  assert.equal(tl.hasOlder, false);
  const ids = eventIds(tl);
  assert.equal(new Set(ids).size, ids.length);
  const view = buildView(tl);
  assert.equal(view.length, 2, "one group per span");
  assert.deepEqual(view[0].items.map((i) => i.event.payload.text), ["m0", "m1", "m2", "m3", "m4", "m5"]);
  assert.equal(view[0].spanType, "interaction");
  assert.deepEqual(view[1].items.map((i) => i.event.id), [t1.id, live.id]);
});

test("a live event does not move the older cursor", () => {
  const tl = createTimeline();
  mergePage(tl, { events: [userMsg("a")], cursor: "c1" });
  mergePage(tl, { events: [userMsg("b")], cursor: null }); // not an older page: e.g. a re-fetch
  assert.equal(tl.cursor, "c1");
});

test("deltas stream under the user message; a higher attempt replaces the partial text", () => {
  const tl = createTimeline();
  const s = spanOpened("interaction", { span_id: "S" });
  const u = userMsg("tell me", { span_id: "S" });
  addEvents(tl, [s, u]);
  assert.ok(applyDelta(tl, { type: "delta", turn_id: u.id, attempt: 1, index: 0, text: "Hel" }));
  assert.ok(applyDelta(tl, { type: "delta", turn_id: u.id, attempt: 1, index: 1, text: "lo" }));
  assert.equal(applyDelta(tl, { type: "delta", turn_id: u.id, attempt: 1, index: 1, text: "lo" }), false, "repeat");
  let view = buildView(tl);
  assert.deepEqual(view[0].items.map((i) => i.key), [`ev:${u.id}`, `stream:${u.id}`]);
  assert.equal(view[0].items[1].stream.text, "Hello");
  // The agent restarted the turn: attempt 2 starts over.
  applyDelta(tl, { turn_id: u.id, attempt: 2, index: 0, text: "Hi" });
  assert.equal(tl.streams.get(u.id).text, "Hi");
  assert.equal(applyDelta(tl, { turn_id: u.id, attempt: 1, index: 2, text: "!!" }), false, "stale attempt");
  assert.equal(tl.streams.get(u.id).text, "Hi");
  // Out-of-order indexes still assemble in order.
  applyDelta(tl, { turn_id: u.id, attempt: 2, index: 2, text: "!" });
  applyDelta(tl, { turn_id: u.id, attempt: 2, index: 1, text: " there" });
  assert.equal(tl.streams.get(u.id).text, "Hi there!");
  // The committed answer replaces the streaming bubble, and later deltas are ignored.
  const a = botMsg("Hi there!", u.id, { span_id: "S" });
  addEvents(tl, [a]);
  assert.equal(tl.streams.size, 0);
  assert.equal(applyDelta(tl, { turn_id: u.id, attempt: 2, index: 3, text: "late" }), false);
  view = buildView(tl);
  assert.deepEqual(view[0].items.map((i) => i.key), [`ev:${u.id}`, `ev:${a.id}`]);
});

test("turn.failed ends the stream too", () => {
  const tl = createTimeline();
  const u = userMsg("q");
  addEvents(tl, [u]);
  applyDelta(tl, { turn_id: u.id, attempt: 1, index: 0, text: "par" });
  addEvents(tl, [ev("turn.failed", { parent_id: u.id, payload: { code: "upstream", message: "model unreachable" } })]);
  assert.equal(tl.streams.size, 0);
  const items = buildView(tl)[0].items;
  assert.deepEqual(items.map((i) => i.event.kind), ["message", "turn.failed"]);
});

test("pending bubbles live until the committed message carries their client_msg_id", () => {
  const tl = createTimeline();
  const s = spanOpened("interaction", { span_id: "S" });
  addEvents(tl, [s]);
  addPending(tl, { client_msg_id: "cm-1", text: "hello?" });
  let view = buildView(tl);
  assert.deepEqual(view[0].items.map((i) => i.key), ["pending:cm-1"], "inside the open span");
  // The server told us the event id; a delta for it streams under the pending bubble.
  updatePending(tl, "cm-1", { event_id: "E1", status: "sent" });
  applyDelta(tl, { turn_id: "E1", attempt: 1, index: 0, text: "Yes" });
  view = buildView(tl);
  assert.deepEqual(view[0].items.map((i) => i.key), ["pending:cm-1", "stream:E1"]);
  const u = userMsg("hello?", { id: "E1", span_id: "S", payload: { client_msg_id: "cm-1" } });
  addEvents(tl, [u]);
  assert.equal(tl.pending.size, 0);
  view = buildView(tl);
  assert.deepEqual(view[0].items.map((i) => i.key), ["ev:E1", "stream:E1"]);
  // A late ack for an already committed message does not bring the bubble back.
  assert.equal(addPending(tl, { client_msg_id: "cm-1", text: "hello?" }), null);
});

test("pending bubbles go after a closed span, not inside it", () => {
  const tl = createTimeline();
  addEvents(tl, [spanOpened("interaction", { span_id: "S" }), userMsg("a", { span_id: "S" }), spanClosed({ span_id: "S" })]);
  addPending(tl, { client_msg_id: "x", text: "later" });
  applyDelta(tl, { turn_id: "unknown-turn", attempt: 1, index: 0, text: "..." });
  const view = buildView(tl);
  assert.deepEqual(view.map((b) => b.key), ["span:S", "pending:x", "stream:unknown-turn"]);
});

test("inner kinds include task.* and never the message kind", () => {
  for (const k of ["context.usage", "context.capsule", "tool.call", "checkpoint", "task.created", "task.failed"]) {
    assert.ok(isInnerKind(k), k);
  }
  assert.equal(isInnerKind("message"), false);
  assert.equal(isInnerKind("turn.failed"), false);
  assert.equal(isInnerKind("task."), true);
});

test("the capsule is an inner item of its span, never a message", () => {
  const tl = createTimeline();
  const cap = ev("context.capsule", { span_id: "S", payload: { text: "The person prefers tea." } });
  addEvents(tl, [spanOpened("interaction", { span_id: "S" }), cap]);
  const span = buildView(tl)[0];
  assert.equal(span.messageCount, 0);
  assert.equal(span.firstText, null, "capsule text is not a summary quote");
  assert.equal(span.innerCount, 1);
});

test("a closed span's own summary wins over the counts", () => {
  assert.equal(spanSummary({ closeSummary: "Planned the trip", messageCount: 4, innerCount: 0, firstText: "x" }), "Planned the trip");
  assert.equal(spanSummary({ closeSummary: null, messageCount: 1, innerCount: 0, firstText: null }), "1 message");
  assert.equal(spanSummary({ closeSummary: null, messageCount: 0, innerCount: 0, firstText: null }), "no messages");
});

test("many pages merged in any order give one sorted, duplicate-free timeline", () => {
  const all = [];
  for (let s = 0; s < 20; s += 1) {
    all.push(spanOpened("interaction", { span_id: `S${s}` }));
    for (let i = 0; i < 5; i += 1) all.push(userMsg(`m${s}.${i}`, { span_id: `S${s}` }));
    all.push(spanClosed({ span_id: `S${s}` }));
  }
  const tl = createTimeline();
  // Overlapping random slices, newest first, like repeated "load older" with overlap.
  let seed = 7;
  const rand = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
  for (let end = all.length; end > 0; ) {
    const start = Math.max(0, end - 1 - Math.floor(rand() * 15));
    const overlap = Math.min(all.length, end + Math.floor(rand() * 4));
    mergePage(tl, { events: all.slice(start, overlap), cursor: start ? `c${start}` : null }, { older: true });
    end = start;
  }
  assert.deepEqual(eventIds(tl), all.map((e) => e.id));
  const view = buildView(tl);
  assert.equal(view.length, 20);
  assert.ok(view.every((b) => b.items.length === 5 && b.closed));
});

test("context management folds into one activity line per turn, after the answer", () => {
  const tl = createTimeline();
  const s = spanOpened("interaction", { span_id: "F" });
  const u1 = userMsg("q1", { span_id: "F" });
  const rec = ev("memory.retrieved", { span_id: "F", channel: "inner", payload: { items: [1] } });
  const call = ev("tool.call", { span_id: "F", channel: "inner", payload: { name: "notes_add" } });
  const a1 = botMsg("a1", u1.id, { span_id: "F" });
  const use1 = ev("context.usage", { span_id: "F", channel: "inner", payload: { input_tokens: 5 } });
  const cap = ev("context.capsule", { span_id: "F", channel: "inner", payload: { text: "c" } });
  const u2 = userMsg("q2", { span_id: "F" });
  const a2 = botMsg("a2", u2.id, { span_id: "F" });
  const use2 = ev("context.usage", { span_id: "F", channel: "inner", payload: { input_tokens: 9 } });
  addEvents(tl, [s, u1, rec, call, a1, use1, cap, u2, a2, use2]);
  const [span] = buildView(tl);
  assert.deepEqual(
    span.items.map((i) => i.key),
    [`ev:${u1.id}`, `ev:${call.id}`, `ev:${a1.id}`, `act:ev:${u1.id}`, `ev:${u2.id}`, `ev:${a2.id}`, `act:ev:${u2.id}`],
  );
  // Nothing is lost: every folded event is in its turn's line, in timeline order.
  assert.deepEqual(span.items[3].events.map((e) => e.id), [rec.id, use1.id, cap.id]);
  assert.equal(span.items[3].summary, "3 background steps: memory lookup, context used, what I keep in mind");
  assert.ok(isFoldedKind("inner.signal") && isFoldedKind("checkpoint") && !isFoldedKind("tool.result") && !isFoldedKind("message"));
  // Activity before the first question keeps its own line, keyed by the span.
  const early = foldTurns([{ type: "event", key: "ev:x", event: use1 }], "Z");
  assert.equal(early[0].key, "act:Z:start");
  assert.match(activitySummary([use1, use2, { ...use1, kind: "context.compacted", payload: { status: "failed" } }]), /3 background steps: 2 context-used readings, summary of older messages · one failed/);
});

test("a channel badge where the channel changes, and on every SMS and email", () => {
  const tl = createTimeline();
  const u1 = userMsg("a", { span_id: null });
  const a1 = botMsg("b", u1.id, { span_id: null });
  const u2 = userMsg("c", { span_id: null, channel: "sms" });
  const a2 = botMsg("d", u2.id, { span_id: null, channel: "sms" });
  const u3 = userMsg("e", { span_id: null });
  addEvents(tl, [u1, a1, u2, a2, u3]);
  // The SMS answer keeps its badge: which channel a reply went out on matters.
  assert.deepEqual(buildView(tl).map((b) => b.showChannel), [true, false, true, true, true]);
});

test("a regenerated answer folds into the answer it replaces; deltas of a new attempt stream", () => {
  const tl = createTimeline();
  const u = userMsg("q", { span_id: null });
  const a1 = botMsg("first", u.id, { span_id: null });
  addEvents(tl, [u, a1]);
  // A late delta of the answered attempt is ignored; attempt 2 (regenerate) streams.
  assert.equal(applyDelta(tl, { turn_id: u.id, attempt: 1, index: 9, text: "late" }), false);
  assert.equal(applyDelta(tl, { turn_id: u.id, attempt: 2, index: 0, text: "sec" }), true);
  assert.deepEqual(buildView(tl).map((b) => b.key), [`ev:${u.id}`, `ev:${a1.id}`, `stream:${u.id}`]);
  const a2 = ev("message", { span_id: null, role: "assistant", parent_id: u.id, payload: { text: "second", attempt: 2, regenerates: a1.id } });
  addEvents(tl, [a2]);
  const view = buildView(tl);
  assert.deepEqual(view.map((b) => b.key), [`ev:${u.id}`, `ev:${a1.id}`]);
  assert.equal(view[1].event, a2);
  assert.deepEqual(view[1].attempts, [a1, a2]);
  assert.equal(applyDelta(tl, { turn_id: u.id, attempt: 2, index: 1, text: "x" }), false);
});

test("an edited message supersedes the old one and its answer; history stays", () => {
  const tl = createTimeline();
  const u1 = userMsg("typo", { span_id: null });
  const a1 = botMsg("answer to typo", u1.id, { span_id: null });
  const u2 = userMsg("fixed", { span_id: null, payload: { supersedes: u1.id } });
  addEvents(tl, [u1, a1, u2]);
  const view = buildView(tl);
  assert.deepEqual(view.map((b) => b.key), [`ev:${u1.id}`, `ev:${a1.id}`, `ev:${u2.id}`]);
  assert.deepEqual(view.map((b) => b.superseded || null), [u2.id, u2.id, null]);
});

test("outside spans a turn's context rows fold too; an inner signal between spans stays a row", () => {
  const tl = createTimeline();
  const u = userMsg("q", { span_id: null });
  const rec = ev("memory.retrieved", { span_id: null, parent_id: u.id, channel: "inner", payload: { items: [] } });
  const a = botMsg("a", u.id, { span_id: null });
  const use = ev("context.usage", { span_id: null, channel: "inner", payload: { input_tokens: 3 } });
  const end = ev("conversation.ended", { span_id: null });
  const sig = ev("inner.signal", { span_id: null, channel: "inner", payload: { source: "timer", type: "due" } });
  addEvents(tl, [u, rec, a, use, end, sig]);
  assert.deepEqual(buildView(tl).map((b) => b.key), [`ev:${u.id}`, `ev:${a.id}`, `act:ev:${u.id}`, `div:${end.id}`, `ev:${sig.id}`]);
  // A streaming answer sits under its question, not under the question's memory lookup.
  const u2 = userMsg("q2", { span_id: null });
  const rec2 = ev("memory.retrieved", { span_id: null, parent_id: u2.id, channel: "inner", payload: { items: [] } });
  addEvents(tl, [u2, rec2]);
  applyDelta(tl, { turn_id: u2.id, attempt: 1, index: 0, text: "par" });
  assert.deepEqual(buildView(tl).slice(-3).map((b) => b.key), [`ev:${u2.id}`, `stream:${u2.id}`, `act:ev:${u2.id}`]);
});

test("a live event older than the loaded window waits for load older; its seq still counts", () => {
  const tl = createTimeline();
  mergePage(tl, { events: [userMsg("now", { ts: at(100), seq: 5 })], cursor: "c1" });
  const imported = userMsg("said long ago", { ts: at(1), seq: 9 });
  assert.deepEqual(addLive(tl, imported), []);
  assert.equal(tl.order.length, 1);
  assert.equal(tl.maxSeq, 9);
  // Paging back brings it in its place; with everything loaded, old live events merge in order.
  mergePage(tl, { events: [imported], cursor: null }, { older: true });
  assert.deepEqual(tl.order.map((e) => e.id), [imported.id, tl.order[1].id]);
  const older = userMsg("older still", { ts: at(0.5), seq: 10 });
  assert.equal(addLive(tl, older).length, 1);
  assert.equal(tl.order[0].id, older.id);
});

test("a span's model calls add up to its cost; an unpriced model is never $0", () => {
  const tl = createTimeline();
  const usage = (cost) => ev("model.usage", { span_id: "act1", channel: "inner", payload: { purpose: "activation", cost_usd: cost } });
  addEvents(tl, [spanOpened("activation", { span_id: "act1" }), usage(0.0021), usage(0.0013)]);
  let [span] = buildView(tl);
  assert.equal(span.calls, 2);
  assert.equal(spanCost(span), "$0.0034 · 2 model calls");
  addEvents(tl, [usage(null)]);
  [span] = buildView(tl);
  assert.equal(spanCost(span), "at least $0.0034 · 3 model calls");
  const quiet = createTimeline();
  addEvents(quiet, [spanOpened("activation", { span_id: "act2" }), ev("model.usage", { span_id: "act2", payload: { cost_usd: null } })]);
  assert.equal(spanCost(buildView(quiet)[0]), "unpriced · 1 model call");
  assert.equal(spanCost({ calls: 0 }), "", "no model call, nothing to show");
});

test("bookkeeping after a span joins that span's inner activity; raw kinds never show", () => {
  const tl = createTimeline();
  const s1 = spanOpened("phone", { span_id: "P", channel: "phone" });
  const u = userMsg("when is my flight?", { span_id: "P", channel: "phone" });
  const a = botMsg("07:40.", u.id, { span_id: "P", channel: "phone" });
  const c1 = spanClosed({ span_id: "P" });
  // Written after the call closed, with no span of their own.
  const capsule = ev("context.capsule", { span_id: null, channel: "inner", payload: { text: "Flight 07:40." } });
  const art = ev("thoughtflow.artifact", { span_id: null, channel: "inner", payload: {} });
  const decision = ev("inner.decision", { span_id: null, channel: "inner", payload: { decision: "hold", reason: "quiet_hours" } });
  const sig = ev("inner.signal", { span_id: null, channel: "inner", payload: { source: "timer", type: "due" } });
  addEvents(tl, [s1, u, a, c1, capsule, art, decision, sig]);
  const view = buildView(tl);
  // The span keeps both messages; the three bookkeeping rows fold into its turn's activity;
  // the signal stays a row between spans.
  assert.deepEqual(spanKeys(view), [`span:P(ev:${u.id},ev:${a.id},act:ev:${u.id})`, `ev:${sig.id}`]);
  const act = view[0].items[2];
  assert.deepEqual(act.events.map((e) => e.id), [capsule.id, art.id, decision.id]);
  assert.equal(act.summary, "3 background steps: what I keep in mind, run picture, decision");
  assert.ok(!act.summary.includes("thoughtflow"));
});

test("bookkeeping before any span folds into a line of its own, never a raw row", () => {
  const tl = createTimeline();
  const art = ev("thoughtflow.artifact", { span_id: null, channel: "inner", payload: {} });
  const odd = ev("some.future.kind", { span_id: null, channel: "inner", payload: {} });
  addEvents(tl, [art, odd]);
  const view = buildView(tl);
  assert.deepEqual(view.map((b) => b.type), ["activity"]);
  assert.equal(view[0].summary, "2 background steps: run picture, other step");
});

test("a span's title line uses the first full sentence, never a one-letter fragment", () => {
  assert.equal(firstSentence("H"), null);
  assert.equal(firstSentence("Hello there. How are you?"), "Hello there.");
  assert.equal(firstSentence("Hi. What time is my train?"), "Hi. What time is my train?");
  const tl = createTimeline();
  addEvents(tl, [
    spanOpened("voice", { span_id: "V", channel: "browser_voice" }),
    userMsg("H", { span_id: "V", channel: "browser_voice" }),
    userMsg("What time is my train? It leaves soon.", { span_id: "V", channel: "browser_voice" }),
  ]);
  assert.equal(buildView(tl)[0].summary, "2 messages · “What time is my train?”");
});

test("a task's run picture after its card stays out of the card; it folds on its own", () => {
  const tl = createTimeline();
  const created = ev("task.created", { span_id: "T", channel: "inner", payload: { task_id: "T", data: { goal: "g" } } });
  const done = ev("task.finished", { span_id: "T", channel: "inner", payload: { task_id: "T", data: { answer: "a" } } });
  const art = ev("thoughtflow.artifact", { span_id: null, channel: "inner", payload: {} });
  addEvents(tl, [created, done, art]);
  const view = buildView(tl);
  assert.deepEqual(view.map((b) => b.type), ["span", "activity"]);
  assert.ok(view[0].task);
});

test("drawStart: the newest blocks holding enough items are drawn first, a span counting its items", () => {
  const span = (n) => ({ type: "span", items: Array.from({ length: n }, () => ({})) });
  const one = { type: "event" };
  const blocks = [span(40), one, span(30), one, span(0), span(25)];
  // From the newest: 25, 1 (an empty span still counts), 1, 30 = 57 >= 50: drawing starts at index 2.
  assert.equal(drawStart(blocks, 50), 2);
  assert.equal(drawStart(blocks, 25), 5);
  assert.equal(drawStart(blocks, 1000), 0); // not enough: everything
  assert.equal(drawStart([], 10), 0);
});
