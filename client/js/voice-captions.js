// Live captions of a browser call, pure: what the `transcript` frames said, until the
// ledger's committed messages say it for good.

const norm = (text) => String(text || "").replace(/\s+/g, " ").trim();

/**
 * Live captions: one provisional bubble per spoken turn, grown by `transcript` frames and
 * replaced by the committed `message` (channel browser_voice) that says the same thing.
 * A non-final text that extends the caption replaces it (a running transcript); any other
 * is a delta and is appended; a final one settles the caption. The commit may come first
 * (a greeting spoken before the page attached is written before its caption arrives): it is
 * remembered and takes the caption away once that is final. A commit that finds its caption
 * still growing hides it at once but keeps it until final, so the last frames of that turn
 * do not start a caption of their own.
 */
export class Captions {
  constructor() {
    this.items = []; // {key, role, text, final, committed: the commit's text once hidden}
    this.early = []; // commits no caption matched yet: {role, text}
    this.count = 0;
  }

  add(frame) {
    const { role, text, final } = frame || {};
    if ((role !== "user" && role !== "assistant") || typeof text !== "string") return false;
    let cap = null;
    for (let i = this.items.length - 1; i >= 0; i -= 1) {
      if (this.items[i].role === role && !this.items[i].final) {
        cap = this.items[i];
        break;
      }
    }
    if (!cap) {
      if (!text.trim()) return false;
      this.count += 1;
      cap = { key: `cap:${this.count}`, role, text: "", final: false, committed: null };
      this.items.push(cap);
    }
    if (final) {
      cap.text = text || cap.text;
      cap.final = true;
    } else {
      cap.text = text.startsWith(cap.text) ? text : cap.text + text;
    }
    if (cap.committed) {
      // Hidden, waiting for the rest of the words its commit already holds.
      if (cap.final || norm(cap.text).length >= cap.committed.length) {
        this.items.splice(this.items.indexOf(cap), 1);
        if (!cap.final) this.early.push({ role, text: cap.committed }); // its final frame is still to come
      }
      return false;
    }
    const said = norm(cap.text);
    const k = this.early.findIndex((e) => e.role === role && (e.text === said || (cap.final && said.startsWith(e.text))));
    if (k >= 0) {
      this.early.splice(k, 1);
      this.items.splice(this.items.indexOf(cap), 1);
    }
    return true;
  }

  /** A committed event arrived: the caption it stands for goes (now, or once it is final). */
  committed(ev) {
    if (!ev || ev.kind !== "message" || ev.channel !== "browser_voice") return false;
    if (ev.role !== "user" && ev.role !== "assistant") return false;
    const text = norm(ev.payload && ev.payload.text);
    if (!text) return false;
    // The same words, or a cut-off answer (barge-in) whose caption ran further, or a caption
    // still growing towards the committed words.
    const i = this.items.findIndex((c) => {
      if (c.role !== ev.role || c.committed) return false;
      const said = norm(c.text);
      return said === text || said.startsWith(text) || (!c.final && text.startsWith(said));
    });
    if (i < 0) {
      this.early.push({ role: ev.role, text });
      if (this.early.length > 20) this.early.shift();
      return false;
    }
    const cap = this.items[i];
    const said = norm(cap.text);
    if (!cap.final && said !== text && text.startsWith(said)) {
      cap.committed = text; // still growing towards the committed words
      return true;
    }
    this.items.splice(i, 1);
    // A final frame with these words may still come: it must not bring the caption back. (A
    // cut-off answer's caption ran further than its commit; its response sends nothing more.)
    if (!cap.final && said === text) this.early.push({ role: ev.role, text });
    return true;
  }

  /** The captions to show: those no committed message stands for yet. */
  visible() {
    return this.items.filter((c) => !c.committed);
  }

  clear() {
    const had = this.items.length > 0;
    this.items = [];
    this.early = [];
    return had;
  }
}
