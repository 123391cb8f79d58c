"""Make a rendered SVG inert before anyone opens it: shapes, text and styles, nothing that runs.

The D2 source holds only escaped text, so D2 should never emit anything active; this is the
second line, for whatever a future D2 (or a bug in our escaping) lets through. The SVG is
parsed by defusedxml (no DTD, no entities, no external references: a document that has them
is refused whole) and rebuilt from an allowlist: elements that draw are kept, everything
else (``script``, ``foreignObject``, ``a``, ``image``, ``use``, animations, …) is dropped with
its subtree. Attributes lose event handlers (``on*``), any ``href`` that is not a fragment of
this document, and any ``url(…)`` that is not ``#fragment``; a ``<style>`` that imports,
escapes or points anywhere but at an embedded font is dropped. Anything that cannot be judged
fails the whole picture (``UnsafeSvg``): fail closed.
"""

import re
import xml.etree.ElementTree as ET  # serializing only: parsing goes through defusedxml

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import ParseError, fromstring

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
XML_NS = "http://www.w3.org/XML/1998/namespace"
MAX_SVG_BYTES = 20 * 1024 * 1024

# What D2 draws with (and a little more of the same kind): no element here can run, load or link.
ALLOWED = frozenset({
    "svg", "g", "defs", "title", "desc", "style", "rect", "circle", "ellipse", "line", "polyline", "polygon",
    "path", "text", "tspan", "marker", "mask", "clipPath", "pattern", "linearGradient", "radialGradient", "stop",
    "filter", "feGaussianBlur", "feOffset", "feBlend", "feFlood", "feComposite", "feMerge", "feMergeNode",
    "feColorMatrix", "feDropShadow",
})
URL = re.compile(r"url\(\s*(['\"]?)(.*?)\1\s*\)", re.I | re.S)
# Fonts D2 embeds in its <style>; no other document may be pulled in (an SVG image could be one).
EMBEDDED_FONT = re.compile(r"data:(font/[a-z0-9.+-]+|application/(x-)?font-[a-z0-9.+-]+);base64,[a-z0-9+/=\s]*$", re.I)
CSS_REFUSED = re.compile(r"@import|expression\s*\(|javascript:|behavior\s*:|-moz-binding|\\|/\*", re.I)
# What loads something, once the inert url(…)s are taken out: an unclosed url( still loads (to
# the end of the style), and image-set() takes bare strings as addresses.
LOADS = re.compile(r"url\(|image(-set)?\(", re.I)
# Elements that must be gone once the tree is clean: a last look at the bytes written (text
# cannot fake one, its "<" is escaped).
RESIDUE = re.compile(rb"<([\w.-]+:)?(script|foreignobject|iframe|object|embed)\b", re.I)


class UnsafeSvg(ValueError):
    """The SVG could not be made safe (or read at all): no picture rather than a risky one."""


def sanitize_svg(data: bytes) -> bytes:
    """The SVG rebuilt from what can only draw; raises ``UnsafeSvg``."""
    if len(data) > MAX_SVG_BYTES:
        raise UnsafeSvg(f"the SVG is {len(data)} bytes, more than {MAX_SVG_BYTES}")
    try:
        root = fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except (ParseError, DefusedXmlException, ValueError) as exc:
        raise UnsafeSvg(f"the SVG cannot be read safely: {exc}") from exc
    if root.tag != f"{{{SVG_NS}}}svg":
        raise UnsafeSvg(f"not an SVG document (root {root.tag[:100]!r})")
    _clean(root)
    # Written back with SVG as the default namespace, spelled out: ElementTree would otherwise
    # invent prefixes (ns0:svg), which is valid XML but not what an SVG viewer expects.
    root.set("xmlns", SVG_NS)
    out: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    if RESIDUE.search(out):
        raise UnsafeSvg("the SVG still holds active content after cleaning")
    return out


def _clean(element: ET.Element) -> None:
    for child in list(element):
        if not _allowed(child):
            element.remove(child)
            continue
        _clean(child)
    _clean_attributes(element)
    element.tag = _local(element.tag)
    if element.tag == "style":
        if not _css_ok(element.text or "", fonts=True):
            element.text = ""  # the picture loses a style, never its safety
        if len(element):
            raise UnsafeSvg("a <style> with elements inside it")


def _allowed(element: ET.Element) -> bool:
    tag = element.tag
    return isinstance(tag, str) and tag.startswith(f"{{{SVG_NS}}}") and _local(tag) in ALLOWED


def _clean_attributes(element: ET.Element) -> None:
    for name, value in list(element.attrib.items()):
        if not _attribute_ok(name, value):
            del element.attrib[name]
        elif name == f"{{{XLINK_NS}}}href":  # SVG 2 spells it plainly: no xlink namespace to declare
            del element.attrib[name]
            element.set("href", value)


def _attribute_ok(name: str, value: str) -> bool:
    namespace, local = (name[1:].split("}", 1) if name.startswith("{") else ("", name))
    if local.lower().startswith("on") or "javascript:" in value.lower():
        return False
    if namespace == XLINK_NS or local.lower() == "href":
        return namespace in ("", XLINK_NS) and local == "href" and value.strip().startswith("#")
    if namespace == XML_NS:
        return local == "space"
    if namespace:
        return False
    return _css_ok(value, fonts=False)  # presentation attributes and style="" read url() too


def _css_ok(css: str, *, fonts: bool) -> bool:
    """Nothing in ``css`` escapes, imports or loads, but for ``url(#fragment)`` (and embedded fonts)."""
    if CSS_REFUSED.search(css) or not all(_inert_url(m.group(2), fonts=fonts) for m in URL.finditer(css)):
        return False
    return not LOADS.search(URL.sub("", css))


def _inert_url(target: str, *, fonts: bool) -> bool:
    target = target.strip()
    return target.startswith("#") or (fonts and EMBEDDED_FONT.match(target) is not None)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
