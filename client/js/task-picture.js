// A finished task's run picture in the Tasks panel's detail: the picture is drawn after the
// task ends, so it is asked for until it is there (a 404 right after the end: still rendering),
// with a Retry when asking gave up, and why it could not be drawn when the service says so.

import { h } from "./dom.js";
import { diagramAfter, runPicture } from "./tasks.js";

export class RunPicture {
  /** @param {{onUnauthorized: () => void, changed: () => void}} hooks  changed: the detail should draw again */
  constructor(hooks) {
    this.hooks = hooks;
    this.asking = null; // the picture being asked for: {url, status, tries, timer, why}
  }

  stop() {
    if (this.asking) clearTimeout(this.asking.timer);
    this.asking = null;
  }

  /** Ask for the run picture until it is drawn (a 404 right after the end: still rendering). */
  async check() {
    const dg = this.asking;
    if (!dg) return;
    clearTimeout(dg.timer);
    dg.status = "checking";
    this.hooks.changed();
    let status = 0;
    let code = null;
    try {
      const res = await fetch(dg.url, { credentials: "same-origin", cache: "no-store" });
      status = res.status;
      if (!res.ok) {
        const body = await res.json().catch(() => null);
        const err = (body && typeof body.error === "object" && body.error) || {};
        code = err.code || null;
        dg.why = [err.message, body && body.detail].filter((x) => typeof x === "string" && x).join(": ");
      }
    } catch {
      status = 0;
    }
    if (this.asking !== dg) return;
    dg.tries += 1;
    const next = diagramAfter(status, dg.tries, code);
    if (next.status === "signed-out") return this.hooks.onUnauthorized();
    dg.status = next.status;
    if (next.retryIn) dg.timer = setTimeout(() => this.check(), next.retryIn);
    this.hooks.changed();
  }

  retry() {
    if (!this.asking) return;
    this.asking.tries = 0;
    this.check();
  }

  /** Draw the picture's part of the detail `d` (d.picture, d.pictureSig) for `task`. */
  render(d, task) {
    const plan = runPicture(task);
    if (plan.show && (!this.asking || this.asking.url !== plan.url)) {
      this.stop();
      this.asking = { url: plan.url, status: "checking", tries: 0, timer: null };
      queueMicrotask(() => this.check());
    }
    if (!plan.show && this.asking) this.stop();
    const dg = this.asking;
    const status = plan.show && dg ? dg.status : "none";
    const sig = `${status}|${plan.url}|${plan.why}|${(dg && dg.why) || ""}`;
    if (d.pictureSig === sig) return;
    d.pictureSig = sig;
    d.picture.dataset.status = status;
    if (!plan.show) {
      d.picture.replaceChildren(h("p", { class: "muted small", text: plan.why }));
      return;
    }
    const retry = () => h("button", { type: "button", class: "ghost small task-picture-retry", text: "Retry", onclick: () => this.retry() });
    if (status === "ready") {
      const img = h("img", { class: "task-picture-img", src: plan.url, alt: "The run picture: how the task went, step by step" });
      img.addEventListener("error", () => {
        if (this.asking && this.asking.url === plan.url) {
          this.asking.status = "failed";
          this.hooks.changed();
        }
      });
      d.picture.replaceChildren(
        h("a", { class: "task-picture-link", href: plan.url, target: "_blank", rel: "noopener", title: "Open the run picture in a new tab" }, img),
        h("a", { class: "task-picture-open small", href: plan.url, target: "_blank", rel: "noopener", text: "Open the run picture in a new tab" }),
      );
    } else if (status === "checking" || status === "drawing") {
      d.picture.replaceChildren(h("p", { class: "muted small", role: "status", text: "Drawing the run picture…" }));
    } else if (status === "missing") {
      d.picture.replaceChildren(h("p", { class: "muted small", role: "status" }, "The run picture is not ready yet. ", retry()));
    } else if (status === "unrendered") {
      d.picture.replaceChildren(h("p", { class: "small task-picture-error", role: "status", text: `The run picture could not be drawn${dg.why ? ` (${dg.why})` : ""}.` }));
    } else {
      d.picture.replaceChildren(h("p", { class: "small task-picture-error", role: "status" }, "The run picture could not be loaded. ", retry()));
    }
  }
}
