"""Offline stand-in for the OpenAI Responses API.

A real HTTP server that the official `openai` SDK talks to through `base_url`.
Tests script it over `/_standin/*`; everything under `/v1/*` speaks OpenAI's wire
format (see ../shared/docs/openai-wire.md).
"""

from delegate.openai_standin.app import create_app
from delegate.openai_standin.settings import Settings

__all__ = ["Settings", "create_app"]
