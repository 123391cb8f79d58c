from delegate.runtime.settings import ServiceSettings


class Settings(ServiceSettings):
    imap_host: str | None = None  # IMAP_HOST: unset -> email off
    imap_port: int = 993
    imap_user: str = ""
    imap_password: str = ""
    imap_tls: str = "ssl"
    imap_mailbox: str = "INBOX"
    smtp_host: str | None = None  # SMTP_HOST: unset -> email replies off
    smtp_port: int = 465
    smtp_user: str = ""
    smtp_password: str = ""
    smtp_tls: str = "ssl"
    smtp_from: str = ""
    owner_email: str | None = None

    @property
    def email_enabled(self) -> bool:
        return bool(self.imap_host)
