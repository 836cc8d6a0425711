"""Request bodies of the code-judge HTTP API (the upstream schema; violations answer 422)."""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field


class SubmissionType(str, Enum):
    PYTHON = "python"
    # Accepted for schema compatibility; answered with reason `invalid_input` (only Python is executed).
    CPP = "cpp"
    MATH = "math"


class Submission(BaseModel):
    sub_id: str | int | None = None  # echoed back; a uuid4 when absent
    type: SubmissionType
    solution: str
    input: str | None = None  # stdin
    expected_output: str | None = None
    options: dict[str, str] | None = None  # accepted and ignored, as upstream


class BatchSubmission(BaseModel):
    sub_id: str | int | None = None
    type: Literal["batch"] = "batch"
    submissions: list[Submission] = Field(min_length=1)
