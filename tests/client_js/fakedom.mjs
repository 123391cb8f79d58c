// A minimal document for testing DOM builders in Node. It has no HTML parser at all:
// setting innerHTML/outerHTML or calling insertAdjacentHTML throws, so a renderer that
// passes here builds nodes only.

class Node {
  constructor(doc) {
    this.ownerDocument = doc;
    this.childNodes = [];
    this.parentNode = null;
  }
  appendChild(child) {
    if (child.nodeType === 11) {
      for (const c of [...child.childNodes]) this.appendChild(c);
      child.childNodes = [];
      return child;
    }
    if (child.parentNode) child.parentNode.childNodes.splice(child.parentNode.childNodes.indexOf(child), 1);
    child.parentNode = this;
    this.childNodes.push(child);
    return child;
  }
  removeChild(child) {
    const i = this.childNodes.indexOf(child);
    if (i < 0) throw new Error("not a child");
    this.childNodes.splice(i, 1);
    child.parentNode = null;
    return child;
  }
  insertBefore(child, ref) {
    if (!ref) return this.appendChild(child);
    if (child.parentNode) child.parentNode.childNodes.splice(child.parentNode.childNodes.indexOf(child), 1);
    child.parentNode = this;
    this.childNodes.splice(this.childNodes.indexOf(ref), 0, child);
    return child;
  }
  replaceChildren(...nodes) {
    for (const c of this.childNodes) c.parentNode = null;
    this.childNodes = [];
    for (const n of nodes) this.appendChild(typeof n === "string" ? new Text(this.ownerDocument, n) : n);
  }
  remove() {
    if (this.parentNode) this.parentNode.removeChild(this);
  }
  get firstChild() {
    return this.childNodes[0] || null;
  }
  get nextSibling() {
    if (!this.parentNode) return null;
    const siblings = this.parentNode.childNodes;
    return siblings[siblings.indexOf(this) + 1] || null;
  }
  get textContent() {
    return this.childNodes.map((c) => c.textContent).join("");
  }
  set textContent(value) {
    this.childNodes = [];
    if (value !== "") this.appendChild(new Text(this.ownerDocument, String(value)));
  }
}

class Text extends Node {
  constructor(doc, data) {
    super(doc);
    this.nodeType = 3;
    this.data = data;
  }
  get textContent() {
    return this.data;
  }
}

class Fragment extends Node {
  constructor(doc) {
    super(doc);
    this.nodeType = 11;
  }
}

function forbidden() {
  throw new Error("HTML parsing is not allowed in renderers");
}

class Element extends Node {
  constructor(doc, tag) {
    super(doc);
    this.nodeType = 1;
    this.tagName = tag.toUpperCase();
    this.attributes = new Map();
    this.className = "";
  }
  setAttribute(name, value) {
    this.attributes.set(name, String(value));
  }
  getAttribute(name) {
    return this.attributes.has(name) ? this.attributes.get(name) : null;
  }
  set innerHTML(_) {
    forbidden();
  }
  get innerHTML() {
    return forbidden();
  }
  set outerHTML(_) {
    forbidden();
  }
  insertAdjacentHTML() {
    forbidden();
  }
}

export function fakeDocument() {
  const doc = {
    createElement: (tag) => new Element(doc, tag),
    // SVG icons: the namespace is not modelled, only the tree.
    createElementNS: (_ns, tag) => new Element(doc, tag),
    createTextNode: (data) => new Text(doc, data),
    createDocumentFragment: () => new Fragment(doc),
  };
  return doc;
}

/** A compact, readable serialisation: <tag attr="v">children</tag>, text escaped. */
export function serialize(node) {
  if (node.nodeType === 3) return node.data.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const inner = node.childNodes.map(serialize).join("");
  if (node.nodeType === 11) return inner;
  const tag = node.tagName.toLowerCase();
  const attrs = [...node.attributes].map(([k, v]) => ` ${k}="${v}"`).join("");
  const cls = node.className ? ` class="${node.className}"` : "";
  return `<${tag}${cls}${attrs}>${inner}</${tag}>`;
}

/** Every element in the tree, depth first. */
export function elements(node, out = []) {
  for (const c of node.childNodes) {
    if (c.nodeType === 1) {
      out.push(c);
      elements(c, out);
    }
  }
  return out;
}
