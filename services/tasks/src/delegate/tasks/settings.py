"""The tasks service's one settings class (env var names as in interfaces.md)."""

from pathlib import Path

from pydantic import Field

from delegate.runtime.settings import ServiceSettings
from delegate.runtime.spend import BudgetSettings


class Settings(ServiceSettings, BudgetSettings):  # BUDGET_* and OWNER_TIMEZONE: task steps stop at the line
    # Which addresses the browser tool may reach: comma-separated host patterns with an
    # optional :port ("docs.example.com", "*.example.org:8443", "127.0.0.1:8080"). Listed hosts
    # are reachable whatever they resolve to; the rest only when TASKS_ALLOW_PUBLIC and every
    # address they resolve to is public (loopback, private, link-local and the like are refused).
    tasks_allowed_hosts: str = ""  # TASKS_ALLOWED_HOSTS
    tasks_allow_public: bool = True  # TASKS_ALLOW_PUBLIC
    # Chromium to drive (Debian's by default); the browser tool never downloads one.
    tasks_browser_path: str = ""  # TASKS_BROWSER_PATH; empty: chromium-headless-shell or chromium on PATH
    tasks_page_timeout_s: float = Field(default=20.0, gt=0)  # TASKS_PAGE_TIMEOUT_S: one navigation
    tasks_page_text_chars: int = Field(default=6000, ge=200, le=100_000)  # TASKS_PAGE_TEXT_CHARS given to the model

    tasks_max_concurrent: int = Field(default=2, ge=1, le=32)  # TASKS_MAX_CONCURRENT: running at once
    # Defaults of a task's budget (a task may ask for its own, up to the model's limits).
    tasks_max_steps: int = Field(default=40, ge=1, le=1000)  # TASKS_MAX_STEPS
    tasks_max_seconds: float = Field(default=1800.0, gt=0)  # TASKS_MAX_SECONDS
    tasks_max_tokens: int = Field(default=400_000, ge=1)  # TASKS_MAX_TOKENS
    tasks_workdir_max_mb: float = Field(default=200.0, gt=0)  # TASKS_WORKDIR_MAX_MB
    # Failed actions and failed evaluations in a row that end a task ("failures").
    tasks_max_failures: int = Field(default=4, ge=1, le=100)  # TASKS_MAX_FAILURES

    openai_model: str = "gpt-5.5"  # OPENAI_MODEL
    tasks_model: str = ""  # TASKS_MODEL; empty: OPENAI_MODEL
    openai_timeout_seconds: float = Field(default=120.0, gt=0)  # OPENAI_TIMEOUT_SECONDS

    # The runner is a singleton (one process runs the tasks); a standby takes over this long
    # after the leader dies.
    tasks_lease_ttl: float = Field(default=3.0, gt=0)  # TASKS_LEASE_TTL
    # Draw run pictures (D2 -> SVG) for tasks and inner-plane activations.
    tasks_thoughtflow: bool = True  # TASKS_THOUGHTFLOW

    @property
    def model_name(self) -> str:
        return self.tasks_model or self.openai_model

    @property
    def workdirs(self) -> Path:
        return self.runtime_data_dir / "copilot-workdir" / "tasks"

    @property
    def thoughtflow_dir(self) -> Path:
        return self.runtime_data_dir / "thoughtflow"
