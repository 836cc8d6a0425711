"""Request bodies of the code-judge HTTP API (the upstream schema; violations answer 422)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field


def _encodable(text: str) -> str:
    # JSON may carry lone surrogates ("\ud800"), which are not text: nothing could run, store or echo them.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid Unicode text: {exc.reason} at position {exc.start}") from None
    return text


Text = Annotated[str, AfterValidator(_encodable)]


class SubmissionType(str, Enum):
    PYTHON = "python"
    CPP = "cpp"  # compiled with g++ -O2 and run in the same sandbox (see cpp.py)
    # Accepted for schema compatibility; answered with reason `invalid_input` (upstream has no executor for it).
    MATH = "math"


class Submission(BaseModel):
    sub_id: Text | int | None = None  # echoed back; a uuid4 when absent
    type: SubmissionType
    solution: Text
    input: Text | None = None  # stdin
    expected_output: Text | None = None
    options: dict[str, str] | None = None  # accepted and ignored, as upstream


class BatchSubmission(BaseModel):
    sub_id: Text | int | None = None
    type: Literal["batch"] = "batch"
    submissions: list[Submission] = Field(min_length=1)
