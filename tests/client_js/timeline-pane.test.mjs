import assert from "node:assert/strict";
import { test } from "node:test";

import { touchedBlocks } from "../../client/js/timeline-pane.js";
import { addEvents, createTimeline } from "../../client/js/timeline.js";
import { buildView } from "../../client/js/timeline-view.js";
import { botMsg, ev, spanClosed, spanOpened, userMsg } from "./helpers.mjs";

/** Six closed spans of one question and answer each: `spans[i]` holds the events of span i. */
function history() {
  const spans = [];
  for (let i = 0; i < 6; i += 1) {
    const span_id = `span-${i}`;
    const q = userMsg(`question ${i}`, { span_id });
    spans.push([spanOpened("interaction", { span_id }), q, botMsg(`answer ${i}`, q.id, { span_id }), spanClosed({ span_id })]);
  }
  return spans;
}

test("a live event updates the newest blocks only, and the block of any event it names", () => {
  const spans = history();
  const tl = createTimeline();
  addEvents(tl, spans.flat());
  const sms = spans[0][2];
  // A delivery report for the first span's answer, arriving now: it names that message.
  const delivery = ev("delivery", { span_id: null, channel: "sms", payload: { event_id: sms.id, status: "delivered" } });
  addEvents(tl, [delivery]);
  const blocks = buildView(tl);
  const keys = blocks.map((b) => b.key);
  const only = touchedBlocks(blocks, [delivery]);
  const spanKey = (i) => blocks.find((b) => b.type === "span" && b.span_id === `span-${i}`).key;
  assert.ok(only.has(spanKey(0)), "the block of the message the delivery is about");
  for (const key of keys.slice(-3)) assert.ok(only.has(key), "the newest blocks");
  for (const i of [1, 2]) assert.ok(!only.has(spanKey(i)), `span ${i} is left alone`);
  // Nothing live, nothing named: the newest blocks alone.
  assert.deepEqual([...touchedBlocks(blocks, [])].sort(), keys.slice(-3).sort());
});
