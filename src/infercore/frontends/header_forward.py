"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: which request
headers (gRPC metadata) become string parameters of the inference request.

As tritonserver: a header is forwarded when the pattern matches anywhere in its name,
ignoring case (Triton prefixes the pattern with RE2's ``(?i)`` and partially matches);
the header's value replaces a request parameter of the same name. A pattern that does
not compile forwards nothing (RE2 refuses it and Triton's match then never succeeds);
the start-up log says so. Python's ``re`` stands in for RE2: the patterns both take mean
the same; ``re``'s extensions (look-arounds, back-references) are RE2 errors instead.
"""

from __future__ import annotations

import logging
import re

__all__ = ["compile_forward_pattern"]

logger = logging.getLogger(__name__)


def compile_forward_pattern(pattern: str, flag: str) -> re.Pattern[str] | None:
    """The compiled ``pattern`` of ``flag`` (None: nothing is forwarded)."""
    if not pattern:
        return None
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        logger.error("--%s '%s' is not a valid regular expression (%s): no header is "
                     "forwarded", flag, pattern, exc)
        return None
