"""Settings we pass through to OpenAI, bounded as the API bounds them.

A value outside these bounds would make every request carrying it fail (HTTP 400, or a Realtime
``error``); as a settings type it stops the start instead (``settings_check.load_settings``).
The bounds are those of OpenAI's published OpenAPI spec.
"""

from typing import Annotated

from pydantic import Field

# ContextManagement.compact_threshold: integer, minimum 1000.
CompactThreshold = Annotated[
    int, Field(ge=1000, description="the Responses API refuses a compact_threshold below 1000")
]
# RealtimeTruncation retention_ratio: a fraction of the post-instruction tokens.
RetentionRatio = Annotated[
    float, Field(ge=0, le=1, description="Realtime truncation keeps a fraction of the context, 0 to 1")
]
