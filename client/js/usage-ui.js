// The Usage panel (topbar "Usage" button) and the topbar's "today" spend chip.
// It reads GET /api/usage (30 days by day, stacked by purpose, and the costliest runs) and
// GET /api/usage/budget (today against the daily line; absent: "no budget set"), on sign-in,
// after a reconnect and, debounced, whenever a model.usage event is committed.

import { api, HttpError } from "./api.js";
import { h, setText } from "./dom.js";
import { Panel, panelElements } from "./panel.js";
import { barLayout, budgetLine, callLine, dailyBars, money, PURPOSES, refreshesUsage, runLine } from "./usage.js";

const $ = (id) => document.getElementById(id);
const SVG_NS = "http://www.w3.org/2000/svg";
const CHART_W = 600;
const CHART_H = 150;
const REFRESH_DEBOUNCE_MS = 1000; // a turn's few calls are one request

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  for (const child of children) node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  return node;
}

export class UsagePanel extends Panel {
  /** @param {{onUnauthorized: () => void, toast: (text: string, tone?: string) => void, jumpTo: (id: string) => void}} hooks */
  constructor(hooks) {
    // Closed, events still refresh it: the topbar's spend today follows them.
    super(hooks, panelElements("usage"), { debounceMs: REFRESH_DEBOUNCE_MS, whileClosed: true });
    this.body = null;
    this.budget = null;
    this.calls = new Map(); // span id -> its calls (the hover detail), read once
  }

  open() {
    this.show();
    this.refresh(); // nothing to draw before the first answer
  }

  load() {
    return Promise.all([api.usage(), this.readBudget()]);
  }

  apply([body, budget]) {
    this.body = body;
    this.budget = budget;
  }

  relevant(ev) {
    return refreshesUsage(ev);
  }

  soon(ev) {
    if (ev && ev.span_id) this.calls.delete(ev.span_id);
    super.soon(ev);
  }

  errorText(err) {
    return `Usage could not be read: ${err.message}`;
  }

  reset() {
    this.body = null;
    this.budget = null;
    this.calls.clear();
    setText($("spend-today"), "Today: –");
  }

  async readBudget() {
    try {
      return await api.budget();
    } catch (err) {
      if (err instanceof HttpError && err.status !== 401) return null; // no budgets here (404) or not answering
      throw err;
    }
  }

  render() {
    // A failed read keeps what the last good one drew, and says why above it.
    if (this.error) return setText($("usage-status"), this.error);
    if (!this.body) return;
    const bars = dailyBars(this.body);
    const today = bars.length ? bars[bars.length - 1] : { usd: 0, day: "" };
    const line = budgetLine(today.usd, this.budget);
    setText($("spend-today"), `Today: ${money(today.usd)}`);
    $("spend-today").dataset.over = line.ratio !== null && line.ratio >= 1 ? "true" : "false";
    setText($("usage-today"), line.text);
    const total = bars.reduce((sum, b) => sum + b.usd, 0);
    const unpriced = (this.body.unpriced_models || []).length
      ? ` · unpriced: ${this.body.unpriced_models.join(", ")}` : "";
    setText($("usage-status"), `${money(total)} in ${bars.length} days${unpriced}`);
    this.drawChart(bars);
    this.showDay(today);
    this.drawTop(this.body.top || []);
  }

  drawChart(bars) {
    const chart = $("usage-chart");
    chart.replaceChildren();
    // Nothing spent: say so, instead of an empty box of invisible bars.
    const calls = bars.reduce((sum, b) => sum + b.calls, 0);
    const empty = !bars.some((b) => b.usd > 0);
    chart.toggleAttribute("hidden", empty); // an SVG element has no `hidden` property
    $("usage-empty").hidden = !empty;
    $("usage-day").hidden = empty; // "$0.00 · 0 calls" and a legend of nothing add no news
    $("usage-legend").hidden = empty;
    setText($("usage-empty-text"), calls
      ? `${calls} model ${calls === 1 ? "call" : "calls"} in these days, none with a known price.`
      : "What Delegate's model calls cost shows here, day by day, once it answers or works on its own.");
    for (const bar of barLayout(bars, CHART_W, CHART_H)) {
      const label = `${bar.day}: ${money(bar.usd)}`;
      const group = svg("g", { class: "spend-bar", tabindex: "0", "data-day": bar.day, "aria-label": label });
      group.appendChild(svg("title", {}, label));
      // An invisible full-height target, so an empty or tiny day can be hovered too.
      group.appendChild(svg("rect", { x: bar.x, y: 0, width: bar.width, height: CHART_H, class: "spend-hit" }));
      for (const r of bar.rects) {
        group.appendChild(svg("rect", {
          x: r.x, y: r.y, width: r.width, height: Math.max(r.height, 0.5), fill: r.colour, "data-purpose": r.purpose,
        }, svg("title", {}, `${bar.day} · ${r.words}: ${money(r.usd)}`)));
      }
      const show = () => this.showDay(bar);
      group.addEventListener("mouseenter", show);
      group.addEventListener("focus", show);
      chart.appendChild(group);
    }
    const legend = $("usage-legend");
    legend.replaceChildren(...PURPOSES.map(([key, words, colour]) => h("li", { "data-purpose": key },
      h("span", { class: "spend-swatch", "aria-hidden": "true" }, svg("svg", { width: 10, height: 10 },
        svg("rect", { width: 10, height: 10, fill: colour, "data-purpose": key }))), words)));
  }

  showDay(bar) {
    const parts = (bar.segments || []).map((s) => `${s.words} ${money(s.usd)}`);
    const unpriced = bar.unpriced ? ` · ${bar.unpriced} unpriced` : "";
    setText($("usage-day"), `${bar.day}: ${money(bar.usd)} · ${bar.calls} calls${unpriced}${parts.length ? ` (${parts.join(", ")})` : ""}`);
  }

  drawTop(runs) {
    const list = $("usage-top");
    if (!runs.length) {
      list.replaceChildren(h("li", { class: "muted small" }, "No activations or tasks in these days."));
      return;
    }
    list.replaceChildren(...runs.map((run) => {
      const detail = h("ul", { class: "spend-calls", hidden: true });
      const button = h("button", { type: "button", class: "ghost spend-run", "data-span": run.span_id,
        title: "Show this run on the timeline" }, runLine(run));
      const item = h("li", {}, button, detail);
      const hover = () => this.showCalls(run.span_id, detail);
      item.addEventListener("mouseenter", hover);
      button.addEventListener("focus", hover);
      button.addEventListener("click", async () => {
        const calls = await this.readCalls(run.span_id);
        if (calls.length) this.hooks.jumpTo(calls[0].id);
      });
      return item;
    }));
  }

  async readCalls(spanId) {
    if (!this.calls.has(spanId)) {
      const body = await api.usageCalls(spanId);
      this.calls.set(spanId, body.calls || []);
    }
    return this.calls.get(spanId);
  }

  async showCalls(spanId, detail) {
    try {
      const calls = await this.readCalls(spanId);
      detail.replaceChildren(...calls.map((call) => h("li", { class: "small" }, callLine(call))));
      detail.hidden = false;
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) this.hooks.onUnauthorized();
    }
  }
}
