// The Usage panel's data: pure, no DOM, no network (GET /api/usage, GET /api/usage/budget).
//
// The chart is our own SVG: 30 stacked bars (one per day, one segment per purpose) are a few
// rectangles, and drawing them here keeps the page free of a vendored library and of the inline
// styles a canvas chart needs, which the Content-Security-Policy forbids.

/** Purposes in stacking order (bottom first), with their words and colours. */
export const PURPOSES = [
  ["owner_turn", "Your turns", "#4f7cff"],
  ["voice", "Voice", "#11a683"],
  ["activation", "Activations", "#e8893b"],
  ["task_step", "Tasks", "#b35ce6"],
  ["web_search", "Web search", "#d6b400"],
  ["memory_extraction", "Memory", "#7c8a9c"],
  ["capsule", "What I keep in mind", "#5bb8d9"],
  ["compaction", "Summaries", "#c2566b"],
];
const WORDS = Object.fromEntries(PURPOSES.map(([key, words]) => [key, words]));

export function purposeWords(purpose) {
  return WORDS[purpose] || purpose;
}

/** "$0.42", "$0.0031", "$12.50"; null (an unpriced model) is "unpriced", never $0. */
export function money(usd) {
  if (usd === null || usd === undefined) return "unpriced";
  if (usd === 0) return "$0.00";
  if (Math.abs(usd) < 0.01) return `$${usd.toPrecision(2)}`;
  return `$${usd.toFixed(2)}`;
}

/** The days from `first` to `last` (YYYY-MM-DD, both included). */
export function daysBetween(first, last) {
  const out = [];
  const at = new Date(`${first}T00:00:00Z`);
  const end = new Date(`${last}T00:00:00Z`);
  while (at <= end) {
    out.push(at.toISOString().slice(0, 10));
    at.setUTCDate(at.getUTCDate() + 1);
  }
  return out;
}

/** The owner's day of an instant, as the API's `to` (exclusive) gives the day after the last. */
export function dayOf(isoWithOffset) {
  return String(isoWithOffset).slice(0, 10);
}

/** One bar per day of the range (empty days included), its segments by purpose. */
export function dailyBars(body) {
  const rows = new Map((body.rows || []).map((row) => [row.key, row]));
  const first = dayOf(body.from);
  const after = new Date(`${dayOf(body.to)}T00:00:00Z`);
  after.setUTCDate(after.getUTCDate() - 1);
  return daysBetween(first, after.toISOString().slice(0, 10)).map((day) => {
    const row = rows.get(day);
    const split = (row && row.by_purpose) || {};
    const segments = PURPOSES.filter(([key]) => split[key] > 0).map(([key, words, colour]) => ({
      purpose: key, words, colour, usd: split[key],
    }));
    return {
      day,
      usd: row ? row.cost_usd : 0,
      calls: row ? row.calls : 0,
      unpriced: row ? row.unpriced_calls || 0 : 0,
      segments,
    };
  });
}

/** Bar geometry in a `width`×`height` box: each segment a rectangle, tallest day at the top. */
export function barLayout(bars, width, height) {
  const top = Math.max(...bars.map((b) => b.usd), 0);
  const scale = top > 0 ? height / top : 0;
  const slot = width / Math.max(bars.length, 1);
  const barWidth = Math.max(slot * 0.7, 1);
  return bars.map((bar, i) => {
    let y = height;
    const x = i * slot + (slot - barWidth) / 2;
    const rects = bar.segments.map((seg) => {
      const h = seg.usd * scale;
      y -= h;
      return { ...seg, x, y, width: barWidth, height: h };
    });
    return { ...bar, x, width: barWidth, rects };
  });
}

/** Today against the daily line: "$0.42 of $5.00 today", or "no budget set". */
export function budgetLine(todayUsd, budget) {
  const daily = budget && budget.daily;
  if (!daily || daily.limit_usd === null || daily.limit_usd === undefined) {
    return { text: `${money(todayUsd)} today · no budget set`, ratio: null };
  }
  const ratio = daily.limit_usd > 0 ? todayUsd / daily.limit_usd : 1;
  return { text: `${money(todayUsd)} of ${money(daily.limit_usd)} today`, ratio };
}

/** A run of the ranking as one line: "Activation · 3 calls · $0.12". */
export function runLine(run) {
  const calls = `${run.calls} call${run.calls === 1 ? "" : "s"}`;
  const cost = run.unpriced_calls ? `${money(run.cost_usd)} + ${run.unpriced_calls} unpriced` : money(run.cost_usd);
  return `${purposeWords(run.purpose)} · ${calls} · ${cost}`;
}

/** One call of a run, for the hover detail: "gpt-5.5 · 1,204 in / 88 out · $0.0087". */
export function callLine(call) {
  const searches = call.web_search_calls ? ` · ${call.web_search_calls} search${call.web_search_calls === 1 ? "" : "es"}` : "";
  return `${call.model} · ${purposeWords(call.purpose)} · ${call.input_tokens.toLocaleString("en")} in / ${call.output_tokens.toLocaleString("en")} out${searches} · ${money(call.cost_usd)}`;
}

/** Whether a committed /chat event changes the figures. */
export function refreshesUsage(ev) {
  return Boolean(ev) && ev.kind === "model.usage";
}
