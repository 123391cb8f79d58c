// The gateway's HTTP API. The HttpOnly session cookie authenticates every call; the
// token itself is only ever sent once, in the sign-in request body. Bodies are always JSON:
// the gateway refuses text/plain and form bodies (what a foreign page could send).

/** A non-2xx answer. The gateway's error body is {"error": {"code", "message"}, …extra}. */
export class HttpError extends Error {
  constructor(status, body) {
    const err = (body && typeof body.error === "object" && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.body = body;
    this.code = err.code || null;
  }
}

async function request(method, path, body, headers = {}) {
  const init = { method, credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json", ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  let data = null;
  try {
    data = await res.json();
  } catch {
    data = null;
  }
  if (!res.ok) throw new HttpError(res.status, data);
  return data;
}

export const api = {
  state: () => request("GET", "/api/state"),
  timeline: (before) => request("GET", before ? `/api/timeline?before=${encodeURIComponent(before)}` : "/api/timeline"),
  signIn: (token) => request("POST", "/api/session", { token }),
  signOut: () => request("DELETE", "/api/session"),
  signOutEverywhere: () => request("DELETE", "/api/sessions"),
  send: (text, clientMsgId, supersedes) =>
    request("POST", "/api/messages", supersedes ? { text, client_msg_id: clientMsgId, supersedes } : { text, client_msg_id: clientMsgId }),
  compact: () => request("POST", "/api/compact"),
  endConversation: () => request("POST", "/api/conversation/end"),
  reminders: () => request("GET", "/api/reminders"),
  cancelReminder: (id) => request("DELETE", `/api/reminders/${encodeURIComponent(id)}`),
  memorySearch: (q, limit) => request("GET", `/api/memory/search?q=${encodeURIComponent(q)}&limit=${encodeURIComponent(limit)}`),
  memories: () => request("GET", "/api/memories?include_retired=true"),
  people: () => request("GET", "/api/people"),
  person: (id) => request("GET", `/api/people/${encodeURIComponent(id)}`),
  forgetPerson: (id) => request("DELETE", `/api/people/${encodeURIComponent(id)}`),
  commitments: (state) => request("GET", `/api/commitments?state=${encodeURIComponent(state || "open")}`),
  editMemory: (id, text, type) => request("PATCH", `/api/memories/${encodeURIComponent(id)}`, type ? { text, type } : { text }),
  forgetMemory: (id) => request("DELETE", `/api/memories/${encodeURIComponent(id)}`),
  tasks: () => request("GET", "/api/tasks"),
  task: (id) => request("GET", `/api/tasks/${encodeURIComponent(id)}`),
  // The same key again (a retried click after a lost answer) gets the task it made, not a second one.
  createTask: (body, key) => request("POST", "/api/tasks", body, key ? { "Idempotency-Key": key } : {}),
  usage: (from, to) => request("GET", from ? `/api/usage?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}` : "/api/usage"),
  usageCalls: (spanId) => request("GET", `/api/usage/calls?span_id=${encodeURIComponent(spanId)}`),
  budget: () => request("GET", "/api/usage/budget"),
  // Web Push (push.js): the server's VAPID key, this browser's subscription
  pushKey: () => request("GET", "/api/push/key"),
  subscribePush: (subscription) => request("POST", "/api/push/subscriptions", subscription),
  unsubscribePush: (id) => request("DELETE", `/api/push/subscriptions/${encodeURIComponent(id)}`),
  controlTask: (id, action) => request("POST", `/api/tasks/${encodeURIComponent(id)}/${encodeURIComponent(action)}`),
};
