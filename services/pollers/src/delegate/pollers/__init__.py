"""Email in (IMAP by UID) and out (SMTP) — skeleton until the email issue."""
