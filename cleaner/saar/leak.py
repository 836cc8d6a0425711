"""Does a deep replacement's reasoning still refer to the error that purification hid?

A deep splice keeps a turn that was written *after* the model saw the error. If its reasoning says
"the previous code raised a NameError, let me fix it", the purified trajectory refers to something
that no longer exists in it. Such turns are counted (`saar_deep_mentions_error`), not altered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Phrases a model uses when it reacts to a failed run (checked case-insensitively).
_REACTION = re.compile(
    r"\b(?:"
    r"(?:previous|last|earlier|above|prior|first) (?:attempt|code|call|run|try|version|execution)"
    r"|(?:an?|the|that|this) error (?:occurred|was raised|happened|says|message)"
    r"|(?:got|gave|raised|threw|throws|hit) (?:an?|the) (?:error|exception)"
    r"|traceback"
    r"|fix (?:the|this|that) (?:error|bug|issue|mistake)"
    r"|(?:let me|i'll|i will|i need to) (?:fix|correct|retry)"
    r"|try(?:ing)? again"
    r"|(?:code|call|execution|it) failed"
    r")\b",
    re.IGNORECASE,
)
# Lines of the error text shorter than this are too generic to count as a quotation.
_MIN_QUOTED_LINE = 16


def mentions_error(reasoning: str, error_texts: Iterable[str], exception_types: Iterable[str | None]) -> bool:
    """True if `reasoning` names a hidden exception type, quotes a line of a hidden error, or reacts to a failure."""
    for exception_type in exception_types:
        if exception_type and re.search(rf"\b{re.escape(exception_type)}\b", reasoning):
            return True
    for error_text in error_texts:
        for line in error_text.splitlines():
            line = line.strip()
            if len(line) >= _MIN_QUOTED_LINE and line in reasoning:
                return True
    return _REACTION.search(reasoning) is not None
