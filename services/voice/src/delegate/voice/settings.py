from delegate.runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    realtime_retention_ratio: float = 0.8  # REALTIME_RETENTION_RATIO
    openai_realtime_model: str = "gpt-realtime"  # OPENAI_REALTIME_MODEL
