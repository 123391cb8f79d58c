// The Usage panel's data: 30 bars from the API's day rows, stacked by purpose; money in words.
import assert from "node:assert/strict";
import { test } from "node:test";

import { barLayout, budgetLine, callLine, dailyBars, money, runLine } from "../../client/js/usage.js";

const BODY = {
  from: "2026-11-01T00:00:00+01:00",
  to: "2026-12-01T00:00:00+01:00",
  rows: [
    { key: "2026-11-03", cost_usd: 0.5, calls: 4, unpriced_calls: 1, by_purpose: { owner_turn: 0.2, activation: 0.3 } },
    { key: "2026-11-30", cost_usd: 1.0, calls: 2, unpriced_calls: 0, by_purpose: { task_step: 1.0 } },
  ],
};

test("one bar per day of the range, empty days included, segments in stacking order", () => {
  const bars = dailyBars(BODY);
  assert.equal(bars.length, 30);
  assert.deepEqual([bars[0].day, bars[29].day], ["2026-11-01", "2026-11-30"]);
  assert.deepEqual(bars[2].segments.map((s) => s.purpose), ["owner_turn", "activation"]);
  assert.equal(bars[2].unpriced, 1);
  assert.equal(bars[1].usd, 0);
  const laid = barLayout(bars, 300, 100);
  assert.equal(laid[29].rects[0].height, 100, "the costliest day fills the height");
  assert.equal(laid[2].rects[1].y + laid[2].rects[1].height, laid[2].rects[0].y, "segments stack");
  assert.equal(laid[1].rects.length, 0);
});

test("money: unpriced is never $0", () => {
  assert.equal(money(null), "unpriced");
  assert.equal(money(0), "$0.00");
  assert.equal(money(0.0031), "$0.0031");
  assert.equal(money(12.5), "$12.50");
});

test("today against the daily line, or no budget set", () => {
  assert.deepEqual(budgetLine(0.42, null), { text: "$0.42 today · no budget set", ratio: null });
  assert.deepEqual(budgetLine(0.42, { daily: { limit_usd: null } }).ratio, null);
  const line = budgetLine(2.5, { daily: { limit_usd: 5, spent_usd: 2.5, left_usd: 2.5 } });
  assert.equal(line.text, "$2.50 of $5.00 today");
  assert.equal(line.ratio, 0.5);
});

test("a run and a call in words", () => {
  assert.equal(runLine({ purpose: "activation", calls: 3, cost_usd: 0.12, unpriced_calls: 0 }), "Activations · 3 calls · $0.12");
  assert.equal(
    callLine({ model: "gpt-5.5", purpose: "web_search", input_tokens: 1204, output_tokens: 88, web_search_calls: 1, cost_usd: 0.0187 }),
    "gpt-5.5 · Web search · 1,204 in / 88 out · 1 search · $0.02",
  );
});
