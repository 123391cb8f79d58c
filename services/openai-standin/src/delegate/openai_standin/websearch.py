"""The built-in web search tool (openai-wire.md 2.3, 3.2, 5.5): whether the fake
model searches, what it "finds", and how its answer cites what it found.

Nothing leaves the machine. Results come from the script or are invented,
deterministically, from the query on example.* hosts (plus the request's
`filters.allowed_domains`, so a domain filter still leaves something to cite).
Citations look like the real ones: an inline `([host](url))` in the text, and a
`url_citation` annotation whose `[start_index, end_index)` spans exactly it.
"""

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

TOOL_TYPES = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"})
SOURCES_INCLUDE = "web_search_call.action.sources"

# Search content is billed as input tokens; more context, more tokens (a guess at scale).
_CONTEXT_TOKENS = {"low": 120, "medium": 300, "high": 700}
_QUERY_LIMIT = 120
_SLUG_WORDS = 6
_INVENTED_HOSTS = (
    ("example.org", "Example.org"),
    ("news.example.com", "Example News"),
    ("docs.example.net", "Example Docs"),
)
_MAX_DOMAIN_RESULTS = 3
# Characters that would continue a URL, so a shorter URL is not "found" inside a longer one.
_URL_CONTINUES = re.compile(r"[\w/\-~%?=&#+]")


@dataclass(frozen=True)
class SearchResult:
    url: str
    title: str = ""
    snippet: str = ""

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or self.url

    @property
    def label(self) -> str:
        return self.title or self.host


@dataclass(frozen=True)
class SearchTool:
    """The request's web search settings, read leniently."""

    allowed_domains: tuple[str, ...] | None = None
    context_size: str = "medium"
    location: dict[str, Any] | None = None


def is_search_tool(tool: object) -> bool:
    return isinstance(tool, dict) and tool.get("type") in TOOL_TYPES


def find_tool(tools: list[dict[str, Any]]) -> SearchTool | None:
    tool = next((t for t in tools if is_search_tool(t)), None)
    if tool is None:
        return None
    raw_filters = tool.get("filters")
    filters: dict[str, Any] = raw_filters if isinstance(raw_filters, dict) else {}
    domains = filters.get("allowed_domains")
    size = tool.get("search_context_size")
    location = tool.get("user_location")
    return SearchTool(
        allowed_domains=tuple(_bare_domain(d) for d in domains if _bare_domain(d)) if domains else None,
        context_size=size if size in _CONTEXT_TOKENS else "medium",
        location=location if isinstance(location, dict) else None,
    )


def may_search(tool_choice: object, max_tool_calls: object) -> bool:
    """Whether `tool_choice` / `max_tool_calls` leave the model free to search."""
    if tool_choice == "none":
        return False
    if isinstance(max_tool_calls, int) and not isinstance(max_tool_calls, bool) and max_tool_calls < 1:
        return False
    if isinstance(tool_choice, dict):
        kind = tool_choice.get("type")
        if kind == "allowed_tools":
            allowed = tool_choice.get("tools") or []
            return any(is_search_tool(t) for t in allowed)
        return kind in TOOL_TYPES
    return True


def search_forced(tool_choice: object) -> bool:
    if tool_choice == "required":
        return True
    if not isinstance(tool_choice, dict):
        return False
    if tool_choice.get("type") == "allowed_tools":
        return tool_choice.get("mode") == "required"
    return tool_choice.get("type") in TOOL_TYPES


def query_from(text: str | None) -> str:
    """The model's query: the user's words, whitespace collapsed and clipped."""
    query = " ".join((text or "").split())
    return query if len(query) <= _QUERY_LIMIT else query[: _QUERY_LIMIT - 1].rstrip() + "…"


def invent_results(query: str, tool: SearchTool | None) -> list[SearchResult]:
    """Deterministic results for `query`, filtered by the tool's allowed domains."""
    slug = "-".join(re.findall(r"[a-z0-9]+", query.lower())[:_SLUG_WORDS]) or "results"
    near = _near(tool.location if tool else None)
    results = [
        SearchResult(
            url=f"https://{host}/{slug}",
            title=f"{name}: {query}",
            snippet=f"{name} has an overview of “{query}”{near}.",
        )
        for host, name in _INVENTED_HOSTS
    ]
    domains = tool.allowed_domains if tool else None
    if not domains:
        return results
    # A real search restricted to some domains finds pages on those domains.
    results += [
        SearchResult(
            url=f"https://{domain}/{slug}", title=f"{domain}: {query}", snippet=f"{domain} covers “{query}”{near}."
        )
        for domain in domains[:_MAX_DOMAIN_RESULTS]
    ]
    return _unique([r for r in results if allowed(r.url, domains)])


def allowed(url: str, domains: tuple[str, ...]) -> bool:
    """True if `url` is on one of `domains` or a subdomain of one."""
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d or host.endswith("." + d) for d in domains)


def answer(query: str, results: list[SearchResult], linked: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """The default answer: one sentence per result, each cited inline (unless not `linked`)."""
    text = f"Offline stand-in: I searched the web for “{query}”"
    if not results:
        return text + " and found nothing.", []
    builder = _Cited(text + ".")
    for result in results:
        builder.add(f" {(result.snippet or result.label).rstrip('. ')}")
        if linked:  # "Sentence ([host](url))." is how real answers cite inline.
            builder.add(" ")
            builder.cite(result)
        builder.add(".")
    return builder.text, builder.annotations


def cite(text: str, results: list[SearchResult], append: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """Annotate scripted `text`: every result URL it mentions is cited where it
    stands (the whole `([label](url))` / `[label](url)` when written as a link);
    results it does not mention get a citation appended, unless `append` is off."""
    annotations: list[dict[str, Any]] = []
    missing: list[SearchResult] = []
    for result in _unique(results):
        span = _find_url(text, result.url)
        if span is None:
            missing.append(result)
        else:
            annotations.append(_annotation(result, *span))
    builder = _Cited(text, annotations)
    if append:
        for result in missing:
            builder.add(" ")
            builder.cite(result)
    builder.annotations.sort(key=lambda a: (a["start_index"], a["end_index"]))
    return builder.text, builder.annotations


def sources(results: list[SearchResult]) -> list[dict[str, str]]:
    return [{"type": "url", "url": r.url} for r in _unique(results)]


def context_tokens(tool: SearchTool | None, searches: int) -> int:
    return searches * _CONTEXT_TOKENS[tool.context_size if tool else "medium"]


def echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A web search tool as the response echoes it: defaults filled in (an omitted
    location means the United States, openai-wire.md 2.3)."""
    if not is_search_tool(tool):
        return tool
    location = tool.get("user_location")
    blank = {"type": "approximate", "city": None, "country": None, "region": None, "timezone": None}
    echoed: dict[str, Any] = {
        "search_context_size": "medium",
        **tool,
        "user_location": {**blank, **location} if isinstance(location, dict) else {**blank, "country": "US"},
    }
    if tool["type"] in ("web_search", "web_search_2025_08_26"):
        echoed.setdefault("filters", None)
    return echoed


class _Cited:
    """Text under construction with its url_citation annotations."""

    def __init__(self, text: str, annotations: list[dict[str, Any]] | None = None) -> None:
        self.text = text
        self.annotations = list(annotations or [])

    def add(self, text: str) -> None:
        self.text += text

    def cite(self, result: SearchResult) -> None:
        start = len(self.text)
        self.text += f"([{result.host}]({result.url}))"
        self.annotations.append(_annotation(result, start, len(self.text)))


def _annotation(result: SearchResult, start: int, end: int) -> dict[str, Any]:
    # end_index is exclusive: text[start_index:end_index] is the cited span (as observed).
    return {"type": "url_citation", "start_index": start, "end_index": end, "url": result.url, "title": result.label}


def _find_url(text: str, url: str) -> tuple[int, int] | None:
    start = text.find(url)
    while start != -1:
        end = start + len(url)
        following = text[end : end + 2]
        continues = bool(following) and bool(_URL_CONTINUES.match(following[0]))
        if following[:1] == "." and len(following) == 2 and not following[1].isspace():
            continues = True  # "…/page.html" is another URL, "…/page." ends a sentence
        if not continues:
            return _widen(text, start, end)
        start = text.find(url, start + 1)
    return None


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    """Grow a bare URL span to the markdown link around it, and its parentheses."""
    if text[start - 2 : start] == "](" and text[end : end + 1] == ")":
        bracket = text.rfind("[", 0, start - 2)
        if bracket != -1:
            start, end = bracket, end + 1
    if start > 0 and text[start - 1] == "(" and text[end : end + 1] == ")":
        start, end = start - 1, end + 1
    return start, end


def _unique(results: list[SearchResult]) -> list[SearchResult]:
    first: dict[str, SearchResult] = {}
    for result in results:
        first.setdefault(result.url, result)
    return list(first.values())


def _bare_domain(domain: str) -> str:
    # Lenient: "https://Example.org/" means example.org.
    value = domain.strip().lower()
    value = value.split("://", 1)[-1]
    return value.split("/", 1)[0].removeprefix("www.") if value else ""


def _near(location: dict[str, Any] | None) -> str:
    if not location:
        return ""
    place = ", ".join(str(location[k]) for k in ("city", "region", "country") if location.get(k))
    return f" for readers near {place}" if place else ""
