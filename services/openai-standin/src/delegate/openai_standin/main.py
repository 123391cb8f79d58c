"""Process entry point: settings -> logging -> uvicorn."""

import logging

import uvicorn

from delegate.openai_standin.app import create_app
from delegate.openai_standin.settings import Settings
from delegate.openai_standin.streaming import install_drop_log_filter


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s openai-standin %(name)s: %(message)s",
    )


def run() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    install_drop_log_filter()
    uvicorn.run(
        create_app(settings),
        host=settings.standin_host,
        port=settings.standin_port,
        log_level=settings.log_level.lower(),
        # Stalled requests (scripted) must not hold shutdown hostage.
        timeout_graceful_shutdown=1,
        log_config=None,  # keep our format (service name on every line)
    )
