"""The opaque `encrypted_content` of compaction items.

OpenAI's blob is encrypted; ours is a Fernet-looking base64 wrapper around JSON
that only this server reads back, so later requests carrying the item can be
"understood" by the fake model. Clients must treat it as opaque.
"""

import base64
import binascii
import json
import zlib
from typing import Any

# Fernet tokens start with 0x80 and a timestamp, hence "gAAAAA..." in base64.
_MAGIC = b"\x80\x00\x00\x00\x00standin1"


def seal(payload: dict[str, Any]) -> str:
    raw = _MAGIC + zlib.compress(json.dumps(payload, separators=(",", ":")).encode())
    return base64.urlsafe_b64encode(raw).decode()


def unseal(token: str) -> dict[str, Any]:
    """Decode a blob made by `seal`; ValueError for anything else."""
    try:
        raw = base64.urlsafe_b64decode(token.encode())
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64") from exc
    if not raw.startswith(_MAGIC):
        raise ValueError("not made by this stand-in")
    try:
        payload = json.loads(zlib.decompress(raw[len(_MAGIC) :]))
    except (zlib.error, json.JSONDecodeError) as exc:
        raise ValueError("corrupt payload") from exc
    if not isinstance(payload, dict):
        raise ValueError("corrupt payload")
    return payload
