// The composer and the chat controls: sending (over the socket, over HTTP when it does not
// confirm), Retry, edit-and-resend, Stop, Regenerate, Copy.

import { HttpError, api } from "./api.js";
import { h } from "./dom.js";
import { addPending, updatePending } from "./timeline.js";

const $ = (id) => document.getElementById(id);

// A message sent over the socket that is neither acknowledged nor committed by then is
// re-sent over HTTP with the same client_msg_id (stored once either way).
const WS_CONFIRM_MS = 4000;

export function newClientId() {
  if (globalThis.crypto && typeof crypto.randomUUID === "function") {
    try {
      return crypto.randomUUID();
    } catch {
      /* insecure context: fall through */
    }
  }
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export class Composer {
  /** @param {object} app  the page (App in app.js): its timeline, socket, pane and toasts */
  constructor(app) {
    this.app = app;
    this.editing = null; // the user message being edited (its new version supersedes it)
    this.controlInFlight = null; // "stop" or "regenerate" until the server answers it
    this.wire();
  }

  wire() {
    const input = $("input");
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      this.send();
    });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
        e.preventDefault();
        this.send();
      }
    });
    input.addEventListener("input", () => this.autosize());
    input.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.editing) {
        e.preventDefault(); // the edit is what Escape undoes here, not a panel or the answer
        this.cancelEdit();
      }
    });
    $("stop-btn").addEventListener("click", () => this.stop());
    $("edit-cancel").addEventListener("click", () => this.cancelEdit());
    for (const b of document.querySelectorAll(".starter")) {
      b.addEventListener("click", () => {
        input.value = b.dataset.prompt;
        this.send();
      });
    }
    // Copy buttons inside rendered code blocks (markdown.js builds them; the click lives here).
    $("timeline").addEventListener("click", (e) => {
      const btn = e.target instanceof Element ? e.target.closest(".code-copy") : null;
      if (!btn) return;
      const code = btn.closest(".md-code")?.querySelector("pre code");
      if (code) this.copy(code.textContent, btn);
    });
  }

  send() {
    const app = this.app;
    const input = $("input");
    const text = input.value;
    if (!text.trim()) return;
    const cid = newClientId();
    const supersedes = this.editing ? this.editing.id : null;
    addPending(app.tl, { client_msg_id: cid, text });
    if (supersedes) app.tl.pending.get(cid).supersedes = supersedes;
    this.cancelEdit(false);
    input.value = "";
    this.autosize();
    app.pane.forceBottom = true;
    app.pane.renderNow();
    const frame = { type: "message", text, client_msg_id: cid };
    if (supersedes) frame.supersedes = supersedes;
    if (app.conn && app.conn.status === "live" && app.conn.send(frame)) {
      setTimeout(() => {
        const p = app.tl.pending.get(cid);
        if (p && p.status === "sending") this.postMessage(cid);
      }, WS_CONFIRM_MS);
    } else {
      this.postMessage(cid);
    }
  }

  async postMessage(cid) {
    const app = this.app;
    const p = app.tl.pending.get(cid);
    if (!p || p.posting) return;
    p.posting = true;
    updatePending(app.tl, cid, { status: "sending" });
    app.pane.scheduleRender();
    try {
      const res = await api.send(p.text, cid, p.supersedes);
      updatePending(app.tl, cid, { status: "sent", event_id: (res && res.event_id) || null });
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return app.showSignIn("Your session ended. Sign in again.");
      updatePending(app.tl, cid, { status: "failed" });
      app.toast("Your message was not sent. Use Retry to try again.", "warn");
    } finally {
      p.posting = false;
      app.pane.scheduleRender();
    }
  }

  autosize() {
    const input = $("input");
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, Math.round(window.innerHeight * 0.4))}px`;
  }

  stop() {
    const app = this.app;
    const turn = app.streaming();
    if (!turn || !app.conn) return;
    if (app.conn.send({ type: "stop", turn_id: turn })) {
      // Stop disables itself (and then goes): focus goes on to the composer, not the page.
      if (document.activeElement === $("stop-btn")) $("input").focus();
      this.controlInFlight = "stop";
      app.status.updateControls();
    } else app.toast("Not connected: try again in a moment.", "warn");
  }

  regenerate(ev) {
    const app = this.app;
    if (!ev || !ev.parent_id || !app.conn) return;
    if (!app.conn.send({ type: "regenerate", turn_id: ev.parent_id })) {
      app.toast("Not connected: try again in a moment.", "warn");
      return;
    }
    this.controlInFlight = "regenerate";
    app.pane.forceBottom = true;
    app.status.updateControls();
  }

  /** The server answered a Stop or Regenerate (done or refused): the controls are free again. */
  controlAnswered() {
    this.controlInFlight = null;
    this.app.status.updateControls();
  }

  startEdit(ev) {
    if (!ev) return;
    this.editing = ev;
    const input = $("input");
    input.value = (ev.payload && ev.payload.text) || "";
    $("edit-bar").hidden = false;
    $("send-btn").textContent = "Resend";
    this.autosize();
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  }

  cancelEdit(clear = true) {
    if (!this.editing) return;
    this.editing = null;
    $("edit-bar").hidden = true;
    $("send-btn").textContent = "Send";
    if (clear) {
      $("input").value = "";
      this.autosize();
    }
  }

  async copy(text, button) {
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch {
      // No clipboard API (an insecure origin): the old way, through a selected textarea.
      const area = h("textarea", { class: "sr-only", "aria-hidden": "true" });
      area.value = text;
      document.body.appendChild(area);
      area.select();
      try {
        ok = document.execCommand("copy");
      } catch {
        ok = false;
      }
      area.remove();
    }
    if (button) {
      button.dataset.copied = ok ? "true" : "false";
      const label = button.querySelector(".msg-action-label") || button;
      const was = button.dataset.label || label.textContent;
      button.dataset.label = was;
      label.textContent = ok ? "Copied" : "Copy failed";
      clearTimeout(button._copyTimer);
      button._copyTimer = setTimeout(() => {
        label.textContent = was;
        delete button.dataset.copied;
      }, 2000);
    }
    $("announcer").textContent = ok ? "Copied to the clipboard" : "Could not copy";
  }
}
