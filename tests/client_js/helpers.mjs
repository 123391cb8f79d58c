// Event builders for the client unit tests: shaped exactly like the ledger's EVENT.

let counter = 0;

/** A fixed-width UTC timestamp `n` seconds after a base time. */
export function at(n) {
  const base = Date.UTC(2026, 0, 5, 9, 0, 0);
  const ms = base + Math.floor(n * 1000);
  const micro = String(Math.round((n * 1e6) % 1e6)).padStart(6, "0");
  return `${new Date(ms).toISOString().slice(0, 19)}.${micro}Z`;
}

export function ev(kind, fields = {}) {
  counter += 1;
  const seq = fields.seq ?? counter;
  return {
    id: fields.id ?? `0193-${String(seq).padStart(6, "0")}`,
    ts: fields.ts ?? at(seq),
    seq,
    conversation_id: fields.conversation_id ?? "c1",
    span_id: fields.span_id === undefined ? "s1" : fields.span_id,
    kind,
    channel: fields.channel ?? "text",
    role: fields.role ?? null,
    parent_id: fields.parent_id ?? null,
    payload: fields.payload ?? {},
  };
}

export const userMsg = (text, f = {}) => ev("message", { role: "user", ...f, payload: { text, ...(f.payload || {}) } });
export const botMsg = (text, parent, f = {}) => ev("message", { role: "assistant", parent_id: parent, ...f, payload: { text } });
export const spanOpened = (type, f = {}) => ev("span.opened", { ...f, payload: { type } });
export const spanClosed = (f = {}) => ev("span.closed", { ...f, payload: { reason: "idle" } });
