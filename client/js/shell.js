// The shell around the timeline: the top bar's actions (a row on a wide screen, a labelled
// menu on a phone), panels as sheets (one open at a time), Escape, and where focus goes.

const $ = (id) => document.getElementById(id);

export class Shell {
  /** @param {object} app  the page (App in app.js): what a streaming answer and search need */
  constructor(app) {
    this.app = app;
    this.bar = document.querySelector(".topbar");
    this.wire();
  }

  wire() {
    const bar = this.bar;
    $("menu-btn").addEventListener("click", () => this.setMenu(bar.dataset.menu !== "open", true));
    // Choosing an action closes the menu; opening a panel closes the other panels first.
    $("actions").addEventListener(
      "click",
      (e) => {
        const btn = e.target instanceof Element ? e.target.closest("button") : null;
        if (!btn) return;
        const target = btn.getAttribute("aria-controls");
        if (target && btn.getAttribute("aria-expanded") !== "true") this.closeSheets(target);
        this.setMenu(false);
      },
      true,
    );
    document.addEventListener("click", (e) => {
      if (bar.dataset.menu === "open" && e.target instanceof Node && !bar.contains(e.target)) this.setMenu(false);
    });
    // A panel's close button gives focus back to what opened it.
    $("sheets").addEventListener("click", (e) => {
      const btn = e.target instanceof Element ? e.target.closest("button[id$='-close']") : null;
      const section = btn && btn.closest("#sheets > section");
      if (section) queueMicrotask(() => this.focusOpener(this.openerOf(section)));
    });
    document.addEventListener("keydown", (e) => this.onEscape(e));
    // Whether a sheet is open, as an attribute the stylesheet reads (on a phone it takes the
    // timeline's place). Panels show and hide themselves: their `hidden` is what is watched.
    const mark = () => {
      $("app").dataset.sheet = document.querySelector("#sheets > section:not([hidden])") ? "open" : "";
    };
    new MutationObserver(mark).observe($("sheets"), { attributes: true, attributeFilter: ["hidden"], subtree: true });
    mark();
  }

  setMenu(open, focusFirst = false) {
    const was = this.bar.dataset.menu === "open";
    this.bar.dataset.menu = open ? "open" : "closed";
    $("menu-btn").setAttribute("aria-expanded", String(open));
    if (open && focusFirst) {
      // On a wide screen the menu holds only the less-used actions; on a phone, all of them.
      const folded = getComputedStyle($("actions-more")).display === "contents" ? $("actions") : $("actions-more");
      const first = [...folded.querySelectorAll("button")].find((b) => !b.disabled && b.offsetParent !== null);
      if (first) first.focus();
    } else if (!open && was && $("actions").contains(document.activeElement)) {
      // A focused action is about to disappear with the menu: keep focus on the menu.
      queueMicrotask(() => document.activeElement === document.body && $("menu-btn").focus());
    }
  }

  /** The id of the button that opens a panel (its aria-controls). */
  openerOf(section) {
    const btn = document.querySelector(`[aria-controls="${CSS.escape(section.id)}"]:not(#menu-btn)`);
    return btn ? btn.id : "menu-btn";
  }

  /** Focus the button that opened something, or the menu that holds it when it is folded away. */
  focusOpener(id) {
    const btn = $(id);
    if (btn && btn.offsetParent !== null && !btn.disabled) btn.focus();
    else if ($("menu-btn").offsetParent !== null) $("menu-btn").focus();
    else $("input").focus();
  }

  /** Close every open panel but `keep`, through its own close control (it knows its state). */
  closeSheets(keep = null) {
    for (const section of document.querySelectorAll("#sheets > section:not([hidden])")) {
      if (section.id === keep) continue;
      const close = section.querySelector("button[id$='-close']");
      if (close) close.click();
      else section.hidden = true;
    }
    if (keep !== "search-bar" && !$("search-bar").hidden && keep) this.app.find.close();
  }

  /**
   * Escape, once nothing closer handled it: the menu, then the panel that has focus, then a
   * streaming answer (stopped), then any open panel or search.
   */
  onEscape(e) {
    if (e.key !== "Escape" || $("app").hidden) return;
    if (e.defaultPrevented) {
      // A panel closed itself and gave focus to its button, which on a phone is folded in the menu.
      queueMicrotask(() => {
        const a = document.activeElement;
        if (!a || a === document.body || a.offsetParent === null) this.focusOpener("menu-btn");
      });
      return;
    }
    if (document.querySelector("dialog[open]")) return; // the dialog closes itself
    if (this.bar.dataset.menu === "open") {
      e.preventDefault();
      this.setMenu(false);
      $("menu-btn").focus();
      return;
    }
    const focused = document.activeElement && document.activeElement.closest ? document.activeElement.closest("#sheets > section") : null;
    if (!focused && this.app.streaming()) {
      e.preventDefault();
      this.app.composer.stop();
      return;
    }
    const open = focused || [...document.querySelectorAll("#sheets > section:not([hidden])")].pop();
    if (open) {
      e.preventDefault();
      const opener = this.openerOf(open);
      const close = open.querySelector("button[id$='-close']");
      if (close) close.click();
      else open.hidden = true;
      this.focusOpener(opener);
      return;
    }
    if (!$("search-bar").hidden) {
      e.preventDefault();
      this.app.find.close();
      this.focusOpener("search-btn");
    }
  }
}
