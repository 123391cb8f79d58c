import assert from "node:assert/strict";
import { test } from "node:test";

import { compactionBefore, contextFigures } from "../../client/js/context.js";
import { searchEvents, toJSON, toMarkdown } from "../../client/js/search.js";
import { botMsg, ev, userMsg } from "./helpers.mjs";

test("search finds every word, case- and accent-insensitive, never bookkeeping", () => {
  const u = userMsg("My sister lives in Lisbon");
  const a = botMsg("Noted: your sister lives in **Lisboa**", u.id);
  const term = ev("term.started", { payload: { term_id: "t" } });
  const usage = ev("context.usage", { channel: "inner", payload: { input_tokens: 42 } });
  const events = [u, a, term, usage];
  assert.deepEqual(searchEvents(events, "SISTER lisbon").map((e) => e.id), [u.id]);
  assert.deepEqual(searchEvents(events, "sister").map((e) => e.id), [u.id, a.id]);
  assert.deepEqual(searchEvents([userMsg("Café crème")], "cafe creme").length, 1);
  assert.deepEqual(searchEvents(events, "term").length, 0);
  assert.deepEqual(searchEvents(events, "context used").map((e) => e.id), [usage.id]);
  assert.deepEqual(searchEvents(events, "   "), []);
  // "Quoted phrases" match whole, in order.
  assert.deepEqual(searchEvents(events, '"lives in lisbon"').map((e) => e.id), [u.id]);
  assert.deepEqual(searchEvents(events, '"in lives"').length, 0);
  assert.deepEqual(searchEvents([userMsg("Span 4 message 0"), userMsg("Span 0 message 4")], '"span 0 message"').length, 1);
});

test("export as Markdown and JSON keeps every shown event, drops term bookkeeping", () => {
  const u = userMsg("Hi");
  const a = ev("message", { role: "assistant", parent_id: u.id, payload: { text: "Hello **there**", stopped: true } });
  const term = ev("term.started", { payload: {} });
  const end = ev("conversation.ended", { span_id: null });
  const md = toMarkdown([u, a, term, end], { exportedAt: "X" });
  assert.match(md, /^# Delegate timeline\n\nExported X\.\n/);
  assert.match(md, new RegExp(`## You · ${u.ts}\\n\\nHi\\n`));
  assert.match(md, /## Delegate · .* · stopped\n\nHello \*\*there\*\*/);
  assert.match(md, /\*Conversation ended/);
  const data = JSON.parse(toJSON([u, a, term], { exportedAt: "X" }));
  assert.deepEqual(data.events.map((e) => e.id), [u.id, a.id]);
  assert.equal(data.exported_at, "X");
});

test("context figures come from the timeline: chips and rows agree", () => {
  const c1 = "conv-1";
  const u1 = ev("context.usage", { conversation_id: c1, payload: { input_tokens: 9000, compact_threshold: 10000 } });
  const comp = ev("context.compacted", { conversation_id: c1, payload: { trigger: "manual", input_tokens_before: 9100, input_tokens_after: 1200 } });
  const order = [u1, comp];
  // A restart forgot last_compacted_at: the row on the page still counts.
  let f = contextFigures(order, { conversation_id: c1, last_compacted_at: null, usage: { input_tokens: 9000, compact_threshold: 10000, percent: 90 } });
  assert.equal(f.compaction, comp);
  assert.equal(f.usage.input_tokens, 1200, "after a compaction the context holds its 'after'");
  assert.equal(f.usage.percent, 12);
  assert.equal(compactionBefore(order, comp), 9000, "the row's 'before' is the usage row's figure");
  // After End conversation (a new conversation id) there is no compaction to show.
  f = contextFigures([...order, ev("conversation.ended", { conversation_id: c1, span_id: null })], { conversation_id: "conv-2" });
  assert.equal(f.compaction, null);
  assert.equal(f.usage, null);
  // A failed compaction notice is not a compaction.
  const failed = ev("context.compacted", { conversation_id: c1, payload: { trigger: "manual", status: "failed" } });
  assert.equal(contextFigures([u1, failed], { conversation_id: c1 }).compaction, null);
  // Nothing on the page: the state's figures stand.
  f = contextFigures([], { conversation_id: c1, usage: { input_tokens: 5, compact_threshold: 10, percent: 50 }, capsule: { active: true, updated_at: "T" } });
  assert.equal(f.usage.percent, 50);
  assert.deepEqual(f.capsule, { active: true, updated_at: "T" });
});
