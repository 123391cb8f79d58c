// Tiny DOM helpers: elements from tag + attributes + children, text only through textContent.

const SVG_NS = "http://www.w3.org/2000/svg";

/** h("div", {class: "x", "aria-label": "y"}, child, "text") — strings become text nodes. */
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

/** Set text only when it changed, so re-renders do not disturb selection or screen readers. */
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

// 24×24 stroke icons (our own simple paths).
const ICONS = {
  text: ["M4 5h16v11H8l-4 4z"],
  mic: ["M12 3a3 3 0 0 1 3 3v6a3 3 0 0 1-6 0V6a3 3 0 0 1 3-3z", "M5 11a7 7 0 0 0 14 0", "M12 18v3"],
  phone: [
    "M5 4h4l2 5-2.5 1.5a11 11 0 0 0 5 5L15 13l5 2v4a2 2 0 0 1-2 2A16 16 0 0 1 3 6a2 2 0 0 1 2-2z",
  ],
  sms: ["M4 5h16v11H8l-4 4z", "M8 10h.01", "M12 10h.01", "M16 10h.01"],
  mail: ["M3 6h18v12H3z", "M3 7l9 6 9-6"],
  clip: ["M20 11l-8.5 8.5a5 5 0 0 1-7-7L13 4a3.5 3.5 0 0 1 5 5l-8.5 8.5a2 2 0 0 1-3-3L14 7"],
  inner: ["M12 3l2.5 6.5L21 12l-6.5 2.5L12 21l-2.5-6.5L3 12l6.5-2.5z"],
  chevron: ["M9 6l6 6-6 6"],
  alert: ["M12 4l9 16H3z", "M12 10v4", "M12 17h.01"],
  spark: ["M12 4v4", "M12 16v4", "M4 12h4", "M16 12h4"],
  send: ["M4 12l16-8-6 16-3-7z"],
  compact: ["M4 8h16", "M7 12h10", "M10 16h4"],
  end: ["M5 4v16", "M5 5h11l-2 4 2 4H5"],
  out: ["M15 4h4v16h-4", "M10 8l-4 4 4 4", "M6 12h10"],
  outAll: ["M15 4h4v16h-4", "M10 8l-4 4 4 4", "M6 12h10", "M14 8l-4 4 4 4"],
  copy: ["M9 9h10v11H9z", "M5 15V4h10"],
  regenerate: ["M20 11a8 8 0 1 0-2.3 5.7", "M20 4v7h-7"],
  edit: ["M4 20h4L19 9l-4-4L4 16z", "M13 7l4 4"],
  stop: ["M7 7h10v10H7z"],
  search: ["M11 4a7 7 0 1 1 0 14 7 7 0 0 1 0-14z", "M20 20l-4-4"],
  menu: ["M4 7h16", "M4 12h16", "M4 17h16"],
  usage: ["M3 20h18", "M6 20v-7", "M11 20V6", "M16 20v-10"],
  download: ["M12 4v11", "M7 10l5 5 5-5", "M5 20h14"],
  help: ["M12 3a9 9 0 1 1 0 18 9 9 0 0 1 0-18z", "M9.5 9a2.5 2.5 0 1 1 3.5 2.3c-.6.3-1 .9-1 1.6V14", "M12 17h.01"],
  bell: ["M6 16v-5a6 6 0 0 1 12 0v5l2 2H4z", "M10 21a2 2 0 0 0 4 0"],
  capsule: ["M8 4h8a4 4 0 0 1 0 8H8a4 4 0 0 1 0-8z", "M12 4v8", "M6 16h12", "M8 20h8"],
  people: ["M9 4a3.5 3.5 0 1 1 0 7 3.5 3.5 0 0 1 0-7z", "M3 20a6 6 0 0 1 12 0", "M16 4.5a3.5 3.5 0 0 1 0 6.5", "M18 14a5 5 0 0 1 3 6"],
  promise: ["M8 5H5v16h14V5h-3", "M9 3h6v4H9z", "M9 14l2 2 4-4"],
  notify: ["M6 16v-5a6 6 0 0 1 12 0v5l2 2H4z", "M10 21a2 2 0 0 0 4 0", "M3 9a9 9 0 0 1 2.5-5", "M21 9a9 9 0 0 0-2.5-5"],
};

export function icon(name, className = "icon") {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", className);
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  for (const d of ICONS[name] || ICONS.text) {
    const path = document.createElementNS(SVG_NS, "path");
    path.setAttribute("d", d);
    svg.appendChild(path);
  }
  return svg;
}

/**
 * Make `parent`'s children match `items` (by key) in order, reusing nodes.
 * `nodes` is the key → node map for this parent; `make(item)` builds, `update(node, item)` refreshes.
 */
export function reconcile(parent, nodes, items, make, update) {
  const keep = new Set();
  let ref = parent.firstChild;
  for (const item of items) {
    keep.add(item.key);
    let node = nodes.get(item.key);
    if (!node) {
      node = make(item);
      nodes.set(item.key, node);
    } else if (update) {
      update(node, item);
    }
    if (node === ref) ref = ref.nextSibling;
    else parent.insertBefore(node, ref);
  }
  for (const [key, node] of nodes) {
    if (!keep.has(key)) {
      node.remove();
      nodes.delete(key);
    }
  }
}
