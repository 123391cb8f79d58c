"""web_search: the Responses API's built-in web search, as a plain tool voice can call too.

One separate Responses call per search through the official SDK (metered: ``model.usage`` with
purpose ``web_search``, billed to the tool call); the answer text and the cited URLs come back
as the tool output.
"""

from typing import Any, Final

from delegate.runtime.metering import Cause, Meter
from delegate.runtime.openai_client import LazyOpenAI

from ..base import CURRENT_CALL, FAILED, UNAVAILABLE, Tool, ToolError, object_schema
from ..settings import ToolSettings

SOURCES_INCLUDE: Final = "web_search_call.action.sources"


def citations(response: Any) -> list[tuple[str, str]]:
    """(url, title): the answer's url_citations first, then other search sources, each once."""
    seen: dict[str, str] = {}
    items = response.output or []
    for item in items:
        if item.type == "message":
            for part in item.content or []:
                for ann in getattr(part, "annotations", None) or []:
                    if getattr(ann, "type", "") == "url_citation" and ann.url not in seen:
                        seen[ann.url] = getattr(ann, "title", "") or ""
    for item in items:
        if item.type == "web_search_call":
            for src in getattr(getattr(item, "action", None), "sources", None) or []:
                url = getattr(src, "url", None)
                if url and url not in seen:
                    seen[url] = ""
    return list(seen.items())


def search_cause() -> Cause:
    """The search is billed to the tool call that asked for it, on its turn's channel."""
    call = CURRENT_CALL.get()
    if call is None:
        return Cause("web_search")
    return Cause("web_search", call.channel, call.call_id, conversation_id=call.conversation_id,
                 span_id=call.span_id, parent_id=call.event_id)


def web_search_tool(settings: ToolSettings, meter: Meter) -> tuple[Tool, LazyOpenAI]:
    # Without a key the offline stand-in at OPENAI_BASE_URL answers; the SDK still wants one.
    # The SDK loads with the first search (the agent's turns usually loaded it already).
    client = LazyOpenAI(
        timeout=settings.web_search_timeout_s, max_retries=None, without_key="",
        endpoint={"api_key": settings.openai_api_key or "offline", "base_url": settings.openai_base_url or None},
    )

    async def handler(args: dict[str, Any]) -> str:
        sdk = await client.get()
        import openai  # loaded by now

        try:
            # Without the include the search call carries no sources: only what the answer
            # text happens to cite would be listed.
            response = await meter.create(
                sdk, search_cause(), model=settings.openai_model, input=args["query"],
                tools=[{"type": "web_search"}], include=[SOURCES_INCLUDE],
            )
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise ToolError(UNAVAILABLE, f"web search could not reach the model API: {exc}") from exc
        except openai.APIStatusError as exc:
            raise ToolError(FAILED, f"web search failed: HTTP {exc.status_code}: {exc.message}") from exc
        text = response.output_text or "(the search returned no answer text)"
        cited = citations(response)
        if not cited:
            return text
        sources = "\n".join(f"- {url}" + (f" ({title})" if title else "") for url, title in cited)
        return f"{text}\n\nSources:\n{sources}"

    tool = Tool(
        "web_search",
        "Search the web for fresh information; returns an answer with the cited URLs.",
        object_schema({"query": {"type": "string", "minLength": 1, "maxLength": 2000,
                                 "description": "what to find out, as a full question"}}, ["query"]),
        handler,
        ("local", "web"),
        timeout_s=settings.web_search_timeout_s + 5,
    )
    return tool, client
