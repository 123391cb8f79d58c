"""Files only this user may read: mail attachments, the mail OAuth2 refresh token."""

import os
from pathlib import Path


def store_file(root: Path, relative: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to root/relative/name atomically (tmp + rename): every directory below
    ``root`` 0700, the file 0600, so other local users read no mail."""
    directory = root
    for part in relative.parts:
        directory = directory / part
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
    target = directory / name
    if target.resolve().parent != directory.resolve():
        raise ValueError(f"attachment name {name!r} escapes its directory")
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target
