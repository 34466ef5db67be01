"""Standard output and error write U+FFFD for a lone surrogate, where text leaves the process.

Why: a ``str`` can hold a lone surrogate (a ``"\\ud800"`` escape in JSON or YAML, an argument or a
variable of bytes that are not UTF-8, which Python decodes with ``surrogateescape``), and UTF-8
has no encoding for one. Printed, it fails the command with ``UnicodeEncodeError`` (standard
output's default, ``strict``), or writes bytes that are not UTF-8 (``surrogateescape``: UTF-8 mode,
the C locale) for whatever reads the pipe to trip on. Every process's entry point calls
:func:`replace_lone_surrogates_on_output` once: each lone surrogate is then written as U+FFFD, a
pair as the character it stands for (``workflows/text/untrusted_text.py``), whatever printed it
(``print``, rich, a log handler). On a stream in another encoding, what it cannot encode is "?".
"""

from __future__ import annotations

import codecs
import io
import sys

from workflows.text.untrusted_text import without_lone_surrogates

ERRORS = "deerflow-replace-surrogates"


def _replacement(error: UnicodeError) -> tuple[bytes, int]:
    """The codec error handler: what the encoder could not encode, encoded as it can (as bytes: the
    UTF-8 encoder takes a replacement ``str`` only when it is ASCII)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = without_lone_surrogates(error.object[error.start:error.end])
    try:
        return text.encode(error.encoding), error.end
    except UnicodeEncodeError:
        return b"?" * len(text), error.end


def replace_lone_surrogates_on_output() -> None:
    """Standard output and error encode with :func:`_replacement` from now on."""
    codecs.register_error(ERRORS, _replacement)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=ERRORS)
