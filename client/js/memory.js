// Memory for the panel and the whole-timeline search: pure data and row builders, no network.
//
// The memory service owns semantic memory (every change is a `memory.fact.*` event in the
// ledger); the gateway lists facts at GET /api/memories, edits one with PATCH, forgets one
// with DELETE, and searches facts, episodes and messages together at GET /api/memory/search.
// A fact, an episode or a message is always traceable to ledger events: "show source"
// jumps to the first of them on the timeline.

import { append, h } from "./dom.js";
import { channelInfo, formatTime, fullTime } from "./format.js";

export const FACT_TYPES = ["adaptation", "preference", "commitment", "fact"];

// Group headings (the panel) and the one-word tag (an edit's type choice, search badges).
const TYPE_WORDS = {
  adaptation: { group: "How you like to be answered", tag: "adaptation" },
  preference: { group: "Preferences", tag: "preference" },
  commitment: { group: "Commitments", tag: "commitment" },
  fact: { group: "Facts", tag: "fact" },
};

const KIND_WORDS = { fact: "Fact", episode: "Episode", message: "Message" };

/** The facts in a GET /api/memories answer (`{"facts": [...]}`, or a bare list). */
export function factsFrom(body) {
  const list = Array.isArray(body) ? body : body && Array.isArray(body.facts) ? body.facts : [];
  return list.filter((f) => f && typeof f === "object" && typeof f.id === "string" && f.id && typeof f.text === "string");
}

/** The results of a GET /api/memory/search answer, best first (the server's order). */
export function resultsFrom(body) {
  const list = body && Array.isArray(body.results) ? body.results : [];
  return list.filter((r) => r && typeof r === "object" && typeof r.kind === "string" && typeof r.text === "string");
}

export function typeGroupLabel(type) {
  return (TYPE_WORDS[type] || TYPE_WORDS.fact).group;
}

export function typeTag(type) {
  return (TYPE_WORDS[type] || TYPE_WORDS.fact).tag;
}

export function kindLabel(kind) {
  return KIND_WORDS[kind] || String(kind || "");
}

function ms(ts) {
  const t = ts ? Date.parse(ts) : NaN;
  return Number.isNaN(t) ? 0 : t;
}

/**
 * What the panel lists, grouped by type (adaptations first: they shape every answer).
 * Without `history` only active facts; with it superseded and forgotten ones too, after the
 * active ones. `only` (fact ids, best first) narrows to a search's matches in its order.
 */
export function factGroups(facts, { history = false, only = null } = {}) {
  const rank = only ? new Map(only.map((id, i) => [id, i])) : null;
  const shown = (facts || []).filter((f) => (history || (f.status || "active") === "active") && (!rank || rank.has(f.id)));
  const retired = (f) => ((f.status || "active") === "active" ? 0 : 1);
  shown.sort((a, b) =>
    rank
      ? rank.get(a.id) - rank.get(b.id)
      : retired(a) - retired(b) || ms(b.valid_at) - ms(a.valid_at) || (a.id < b.id ? -1 : 1),
  );
  const groups = [];
  for (const type of FACT_TYPES) {
    const inGroup = shown.filter((f) => (FACT_TYPES.includes(f.type) ? f.type : "fact") === type);
    if (inGroup.length) groups.push({ type, label: typeGroupLabel(type), facts: inGroup });
  }
  return groups;
}

/** The fact ids of a search's results, best first, each once. */
export function factMatches(results) {
  const ids = [];
  for (const r of results || []) if (r.kind === "fact" && r.id && !ids.includes(r.id)) ids.push(r.id);
  return ids;
}

/** When a fact was forgotten: its forgotten step's time, else when it last changed. */
function forgottenAt(fact) {
  const step = (fact.history || []).find((c) => c && c.kind === "memory.fact.forgotten");
  return (step && step.ts) || fact.updated_at || null;
}

/**
 * A retired fact's line: "replaced by “…” · 3 Mar 14:05" or "forgotten · 14:05"; "" for an
 * active one. `byId` finds the successor's words.
 */
export function retiredText(fact, byId = new Map(), now = new Date()) {
  const status = fact.status || "active";
  if (status === "superseded") {
    const next = fact.superseded_by ? byId.get(fact.superseded_by) : null;
    const by = next ? `replaced by “${next.text}”` : "replaced";
    return fact.invalid_at ? `${by} · no longer true since ${formatTime(fact.invalid_at, now)}` : by;
  }
  if (status === "forgotten") {
    const when = forgottenAt(fact);
    return when ? `forgotten · ${formatTime(when, now)}` : "forgotten";
  }
  return "";
}

/** The timeline event a fact's "show source" opens: its first citation. */
export function factSource(fact) {
  const ids = fact && Array.isArray(fact.event_ids) ? fact.event_ids : [];
  return ids.find((id) => typeof id === "string" && id) || null;
}

/** Where a search result jumps: a message itself, an episode's first turn, a fact's first citation. */
export function resultTarget(result) {
  if (!result) return null;
  const first = factSource(result);
  if (result.kind === "message") return result.id || first;
  return first || (result.kind === "episode" ? result.id || null : null);
}

/** A /chat event after which the facts may have changed. */
export function refreshesMemory(ev) {
  return !!ev && typeof ev.kind === "string" && ev.kind.startsWith("memory.fact.");
}

/** The one-line details of a search result: time, speaker, channel, type. */
export function resultMeta(result, now = new Date()) {
  const parts = [];
  if (result.ts) parts.push(formatTime(result.ts, now));
  if (result.speaker) parts.push(result.speaker);
  if (result.channel) parts.push(channelInfo(result.channel).label);
  if (result.kind === "fact" && result.type && result.type !== "fact") parts.push(typeTag(result.type));
  return parts.join(" · ");
}

/** A fact's text as the edit box ends it: trimmed, inner blank runs kept as the owner typed them. */
export function cleanEdit(text) {
  return String(text || "").trim();
}

/**
 * One fact of the panel. `mode`: "view", "edit" (text box, type, Save/Cancel) or "confirm"
 * (forget it: Forget/Keep). `error` is shown inline, under it. The handlers get the fact.
 */
export function factRow(fact, { byId = new Map(), now = new Date(), mode = "view", draft = null, draftType = null, error = "", busy = false, on = {} } = {}) {
  const status = fact.status || "active";
  const active = status === "active";
  const call = (name, ...args) => () => on[name] && on[name](fact, ...args);
  const retired = retiredText(fact, byId, now);
  const source = factSource(fact);
  const row = h("li", { class: `memory-fact memory-${status}`, "data-fact-id": fact.id, "data-status": status, "data-type": fact.type || "fact" });
  if (mode === "edit" && active) {
    const boxId = `memory-edit-${fact.id}`;
    const typeId = `memory-type-${fact.id}`;
    const box = h("textarea", { id: boxId, class: "memory-edit-text", rows: "2", maxlength: "2000", "aria-describedby": `${boxId}-hint` });
    box.value = draft ?? fact.text;
    const select = h(
      "select",
      { id: typeId, class: "memory-edit-type" },
      FACT_TYPES.map((t) => h("option", { value: t, text: typeTag(t), selected: t === (draftType || fact.type || "fact") })),
    );
    const save = h("button", { type: "button", class: "primary small memory-save", text: busy ? "Saving…" : "Save", disabled: busy });
    const cancel = h("button", { type: "button", class: "ghost small memory-cancel", text: "Cancel", disabled: busy });
    save.addEventListener("click", () => on.save && on.save(fact, box.value, select.value));
    cancel.addEventListener("click", call("cancel"));
    box.addEventListener("input", () => on.draft && on.draft(fact, box.value, select.value));
    select.addEventListener("change", () => on.draft && on.draft(fact, box.value, select.value));
    box.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        if (on.save) on.save(fact, box.value, select.value);
      } else if (e.key === "Escape") {
        e.preventDefault();
        e.stopPropagation(); // Escape here ends the edit, not the panel
        if (on.cancel) on.cancel(fact);
      }
    });
    append(row, [
      h("label", { for: boxId, class: "sr-only", text: "Fact text" }),
      box,
      h("span", { id: `${boxId}-hint`, class: "sr-only", text: "Enter saves, Shift+Enter adds a new line, Escape cancels." }),
      h("div", { class: "memory-edit-actions" }, h("label", { for: typeId, class: "muted small", text: "Type" }), select, save, cancel),
    ]);
  } else {
    const text = h("span", { class: "memory-text", text: fact.text });
    append(row, [
      h(
        "div",
        { class: "memory-main" },
        active ? null : h("span", { class: "sr-only", text: status === "superseded" ? "Replaced: " : "Forgotten: " }),
        text,
        h(
          "span",
          { class: "memory-meta" },
          h("span", { class: "memory-type", text: typeTag(fact.type) }),
          fact.valid_at ? h("time", { class: "memory-when", datetime: fact.valid_at, title: fullTime(fact.valid_at), text: formatTime(fact.valid_at, now) }) : null,
          retired ? h("span", { class: "memory-retired", text: retired }) : null,
        ),
      ),
    ]);
    const actions = h("div", { class: "memory-actions" });
    if (mode === "confirm" && active) {
      append(actions, [
        h("span", { class: "memory-confirm-text", text: "Forget this? Delegate will not use it again." }),
        h("button", { type: "button", class: "danger small memory-forget-yes", text: busy ? "Forgetting…" : "Forget", disabled: busy, "aria-label": `Forget: ${fact.text}`, onclick: call("forget") }),
        h("button", { type: "button", class: "ghost small memory-forget-no", text: "Keep", disabled: busy, onclick: call("cancel") }),
      ]);
    } else {
      if (active) {
        append(actions, [
          h("button", { type: "button", class: "ghost small memory-edit", text: "Edit", "aria-label": `Edit: ${fact.text}`, onclick: call("edit") }),
          h("button", { type: "button", class: "ghost small memory-forget", text: "Forget", "aria-label": `Forget: ${fact.text}`, onclick: call("confirm") }),
        ]);
      }
      append(actions, [
        h("button", {
          type: "button",
          class: "ghost small memory-source",
          text: "Show source",
          "aria-label": `Show where this was said: ${fact.text}`,
          title: source ? "Show the message this was learned from" : "No source on the timeline",
          disabled: !source,
          onclick: source ? call("source", source) : null,
        }),
      ]);
    }
    row.appendChild(actions);
  }
  if (error) row.appendChild(h("p", { class: "form-error memory-error", role: "alert", text: error }));
  return row;
}

/** One match of the whole-timeline search: kind badge, text, when/who/where; a click jumps to it. */
export function resultRow(result, { now = new Date(), onJump } = {}) {
  const target = resultTarget(result);
  const meta = resultMeta(result, now);
  const button = h(
    "button",
    {
      type: "button",
      class: "search-result-btn",
      disabled: !target,
      title: target ? "Show it on the timeline" : "Not on the timeline",
      onclick: target && onJump ? () => onJump(target, result) : null,
    },
    h("span", { class: `kind-badge kind-${result.kind}`, text: kindLabel(result.kind) }),
    h("span", { class: "search-result-text", text: result.text }),
    meta ? h("span", { class: "search-result-meta muted small", text: meta }) : null,
  );
  return h("li", { class: "search-result", "data-kind": result.kind, "data-result-id": result.id || "", "data-target": target || "" }, button);
}
