// What every topbar panel (memory, reminders, people, commitments, tasks, usage) does the same
// way: its sheet opens and closes from a topbar button; opening reads the API; a relevant /chat
// event reads it again (debounced, and only while open unless the panel's badge follows it
// closed); a read asked for while one runs runs once more after it; signing out forgets
// everything, and a late answer of the old sign-in changes nothing; a failed read shows why.
// A panel subclasses Panel and keeps only what is its own: load, apply, render and its actions.

import { HttpError } from "./api.js";
import { setText } from "./dom.js";

/** The panel's button, sheet and close button, by the ids every panel follows: NAME-btn, NAME-panel, NAME-close. */
export function panelElements(name) {
  const $ = (id) => document.getElementById(id);
  return { button: $(`${name}-btn`), sheet: $(`${name}-panel`), closer: $(`${name}-close`) };
}

/** Show a panel's status line: hidden when there is nothing to say, toned when it is a warning. */
export function showStatus(node, text, warn = false) {
  setText(node, text);
  node.hidden = !text;
  node.dataset.tone = warn ? "warn" : "";
}

export class Panel {
  /**
   * @param {{onUnauthorized: () => void}} hooks
   * @param {{button: HTMLElement, sheet: HTMLElement, closer: HTMLElement}} els
   * @param {{debounceMs: number, whileClosed?: boolean, keyboard?: boolean}} options
   *   whileClosed: events refresh a closed panel too (its topbar badge follows them);
   *   keyboard: Escape closes it, and closing from its own button returns focus to the topbar.
   */
  constructor(hooks, els, { debounceMs, whileClosed = false, keyboard = false }) {
    this.hooks = hooks;
    this.els = els;
    this.debounceMs = debounceMs;
    this.whileClosed = whileClosed;
    this.loaded = false;
    this.error = null; // why the last read failed, in words
    this.session = 0; // bumped on sign-out: answers of an older one are dropped
    this.timer = null;
    this.inFlight = null;
    this.again = false;
    els.button.addEventListener("click", () => (this.isOpen ? this.close() : this.open()));
    els.closer.addEventListener("click", () => this.close(keyboard));
    if (keyboard) {
      els.sheet.addEventListener("keydown", (e) => {
        if (e.key === "Escape" && !e.defaultPrevented) {
          e.preventDefault();
          this.close(true);
        }
      });
    }
  }

  // ---- what a panel provides ----------------------------------------------------------

  /** Read the panel's data from the API. */
  async load() {
    throw new Error("a panel reads something");
  }

  /** Keep what load() read. */
  apply(_data) {}

  render() {}

  /** Whether a committed /chat event changes what the panel shows. */
  relevant(_ev) {
    return false;
  }

  /** Why the read failed, in words. */
  errorText(_err) {
    return "Could not be loaded.";
  }

  /** Signed out: drop the panel's own data. */
  reset() {}

  // ---- the shared behaviour -----------------------------------------------------------

  get isOpen() {
    return !this.els.sheet.hidden;
  }

  show() {
    this.els.sheet.hidden = false;
    this.els.button.setAttribute("aria-expanded", "true");
  }

  open() {
    this.show();
    this.render();
    this.refresh();
  }

  close(returnFocus = false) {
    this.els.sheet.hidden = true;
    this.els.button.setAttribute("aria-expanded", "false");
    if (returnFocus) this.els.button.focus();
  }

  /** Signed out: forget everything, and let a late answer of the old session change nothing. */
  clear() {
    this.session += 1;
    // A read of the old session still running is not this session's: the next refresh reads anew.
    this.inFlight = null;
    this.again = false;
    clearTimeout(this.timer);
    this.timer = null;
    this.loaded = false;
    this.error = null;
    this.reset();
    this.close();
    this.render();
  }

  /** A committed event from /chat: read again soon when it is about this panel. */
  eventArrived(ev) {
    if (!this.relevant(ev) || (!this.whileClosed && !this.isOpen)) return;
    this.soon(ev);
  }

  /** Read again once a burst of events settles. */
  soon(_ev) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), this.debounceMs);
  }

  /** After a reconnect: whatever changed meanwhile. */
  reconnected() {
    if (this.isOpen) this.refresh();
  }

  /** The status line's words: the error, "Loading…", or what an empty panel says. */
  statusText(empty, emptyText) {
    return this.error || (!this.loaded ? "Loading…" : empty ? emptyText : "");
  }

  /** Read and show; a refresh asked for while one runs runs once more after it. */
  async refresh() {
    if (this.inFlight) {
      this.again = true;
      return this.inFlight;
    }
    const session = this.session;
    let done = false; // a load that throws at once finishes before `read` is even assigned
    const read = (async () => {
      try {
        const data = await this.load();
        if (session !== this.session) return;
        this.apply(data);
        this.loaded = true;
        this.error = null;
      } catch (err) {
        if (session !== this.session) return;
        if (err instanceof HttpError && err.status === 401) {
          this.hooks.onUnauthorized();
          return;
        }
        this.error = this.errorText(err);
      } finally {
        done = true;
        if (session === this.session) this.inFlight = null;
      }
      this.render();
      if (this.again) {
        this.again = false;
        await this.refresh();
      }
    })();
    if (!done) this.inFlight = read;
    return read;
  }
}
