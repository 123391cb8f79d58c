"""Offline stand-in for the OpenAI Responses API.

A real HTTP server that the official `openai` SDK talks to through `base_url`.
Tests script it over `/_standin/*`; everything under `/v1/*` speaks OpenAI's wire
format (see ../shared/docs/openai-wire.md). Its app (`app.create_app`) is not imported
here: a server starts listening before it builds it (`deferred`).
"""

from delegate.openai_standin.settings import Settings

__all__ = ["Settings"]
