"""``pb_utils.TritonError`` and ``pb_utils.TritonModelException``, and the error text helpers.

``TritonError`` is a value a model puts in an ``InferenceResponse``, not an exception (as in
Triton, where it is a plain bound class); ``TritonModelException`` is what models raise.
``python_error_text`` renders an exception the way Triton's stub reports it (pybind11's
``error_already_set::what()``): ``"<Type>: <message>\\n\\nAt:\\n  <file>(<line>): <function>"``
with the innermost frame first.
"""

from __future__ import annotations

import os
import traceback
from types import TracebackType

from ....errors import ErrorCode, error_from_code
from ....errors import TritonError as CoreTritonError

__all__ = ["TritonError", "TritonModelException", "python_error_text"]

# Frames inside this package are ours, not the model's: Triton's equivalents are C++ and
# never show in its "At:" lists, so ours are left out too.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class TritonError:
    """An error to answer a request with: a message and a Triton error code.

    ``TritonError("not found", TritonError.NOT_FOUND)``; the code defaults to INTERNAL.
    """

    __slots__ = ("_message", "_code")

    UNKNOWN = ErrorCode.UNKNOWN
    INTERNAL = ErrorCode.INTERNAL
    NOT_FOUND = ErrorCode.NOT_FOUND
    INVALID_ARG = ErrorCode.INVALID_ARG
    UNAVAILABLE = ErrorCode.UNAVAILABLE
    UNSUPPORTED = ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = ErrorCode.ALREADY_EXISTS
    CANCELLED = ErrorCode.CANCELLED

    def __init__(self, message: str, code: int = ErrorCode.INTERNAL) -> None:
        if message is None:
            raise TypeError("TritonError() message must be a str, not None")
        if code is None:
            raise TypeError("TritonError() code must be an error code, not None")
        try:
            self._code = ErrorCode(int(code))
        except ValueError:
            raise ValueError(f"TritonError() got an unknown error code {code!r}") from None
        self._message = str(message)

    def message(self) -> str:
        return self._message

    def code(self) -> ErrorCode:
        return self._code

    def _to_core(self) -> CoreTritonError:
        """The infercore typed error with the same code and message."""
        return error_from_code(self._code, self._message)

    @classmethod
    def _from_core(cls, error: CoreTritonError) -> TritonError:
        return cls(error.message, error.code)

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError(code={self._code.name}, message={self._message!r})"


class TritonModelException(Exception):
    """Raised by models (and by pb_utils on misuse) to fail what they are doing."""

    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


def python_error_text(exc: BaseException, *, skip_frames: int = 1) -> str:
    """``"<Type>: <message>"`` plus the model's frames, innermost first, as Triton shows them.

    ``skip_frames`` drops the outermost traceback entries: the caller's own frame, which
    called into the model.
    """
    text = f"{type(exc).__name__}: {exc}"
    tb: TracebackType | None = exc.__traceback__
    for _ in range(skip_frames):
        if tb is None:
            break
        tb = tb.tb_next
    frames = [
        frame
        for frame in traceback.extract_tb(tb)
        if not os.path.abspath(frame.filename).startswith(_PACKAGE_DIR + os.sep)
    ]
    if not frames:
        return text
    lines = [f"  {frame.filename}({frame.lineno}): {frame.name}" for frame in reversed(frames)]
    return text + "\n\nAt:\n" + "\n".join(lines) + "\n"
