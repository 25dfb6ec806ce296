"""Secret masking of a task's output: every occurrence of a secret value, and of its common encodings,
is replaced by `***` before the output leaves the Worker.
Touches nothing: pure functions over bytes. Standard library only.

`Masker` is a streaming transformer, one per stream (stdout, stderr), fed pieces of any size; `mask_all`
is the same masking in one call.

What is masked (`patterns`): for a value of at least MIN_MASKED_BYTES bytes, the raw bytes; base64,
standard and URL-safe, with and without `=` padding; percent-encoding as urllib.parse.quote and
quote_plus with safe=""; when the value is valid UTF-8, its JSON string body as json.dumps writes it,
with and without ensure_ascii. A value ending in one newline (`\\n` or `\\r\\n`) also gives the same forms
of the value without it, if that still has MIN_MASKED_BYTES bytes.

Matching: leftmost occurrence first; of those starting at one position the longest; non-overlapping.
The masked stream depends only on the raw stream, never on how it was cut into pieces, so re-masking a
file from its start rebuilds the same bytes.

Limits:
- A value shorter than MIN_MASKED_BYTES is not masked (masking "a" would destroy all output), and no
  pattern shorter than that is used.
- Only the exact forms above are recognised. A transformed value is not: printed reversed, hashed,
  truncated or split by the task itself, other spellings of an encoding (lowercase percent hex, quote's
  default safe="/", other JSON encoders' escapes, base64 wrapped at 76 columns as the base64 tool
  writes it, base64 of the value plus a newline as `echo "$V" | base64` writes it), or base64 of the
  value at a non-aligned position inside a longer base64 text.
- Overlapping occurrences are masked only in part: of "abcd" and "cdef" in "abcdef" the output is
  "***ef", and a value whose occurrences overlap itself ("abab" in "ababab") leaves a tail ("***ab").
- A value ending in a newline masks the newline with it: its raw form is longer than the stripped one.
- A pattern that contains `*` can appear in the output next to a mask (value "abcd" and value "***x":
  "abcdx" gives "***x"). A pattern without `*` never appears in the output.
- The Masker holds back up to the longest pattern less one byte (a 64 KiB value gives percent-encoded
  patterns up to 192 KiB) until more output or the end of the stream comes.
- Output made of near-occurrences of a long pattern costs up to that pattern's length per position.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, quote_plus

MASK: Final = b"***"
MIN_MASKED_BYTES: Final = 4

# Candidates are found by a regular expression over the patterns' first bytes and confirmed by a byte
# comparison: an alternation of whole 64 KiB patterns takes seconds to compile (re parses in Python).
_PREFIX_BYTES: Final = 64


def _forms(value: bytes) -> set[bytes]:
    """The raw bytes of one value and its encodings (shorter ones included: the caller drops them)."""
    b64 = base64.b64encode(value)
    url = base64.urlsafe_b64encode(value)
    forms = {
        value,
        b64,
        b64.rstrip(b"="),
        url,
        url.rstrip(b"="),
        quote(value, safe="").encode("ascii"),
        quote_plus(value, safe="").encode("ascii"),
    }
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return forms
    forms.add(json.dumps(text)[1:-1].encode("utf-8"))
    forms.add(json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8"))
    return forms


def patterns(values: Iterable[bytes]) -> frozenset[bytes]:
    """Every byte string to mask for these secret values (see the module docstring)."""
    found: set[bytes] = set()
    for value in values:
        if len(value) < MIN_MASKED_BYTES:
            continue
        found |= _forms(value)
        stripped = value[:-2] if value.endswith(b"\r\n") else value[:-1] if value.endswith(b"\n") else value
        if stripped != value and len(stripped) >= MIN_MASKED_BYTES:
            found |= _forms(stripped)
    return frozenset(p for p in found if len(p) >= MIN_MASKED_BYTES)


class _Matcher:
    """Finds the leftmost, then longest, pattern occurrences in a buffer."""

    def __init__(self, patterns: Iterable[bytes]) -> None:
        kept = sorted({p for p in patterns if len(p) >= MIN_MASKED_BYTES}, key=lambda p: (-len(p), p))
        self.longest: Final = len(kept[0]) if kept else 0
        # Patterns by their first MIN_MASKED_BYTES bytes, each list longest first.
        self._by_head: dict[bytes, list[bytes]] = {}
        for p in kept:
            self._by_head.setdefault(p[:MIN_MASKED_BYTES], []).append(p)
        prefixes = sorted({p[:_PREFIX_BYTES] for p in kept}, key=lambda p: (-len(p), p))
        self._candidates = re.compile(b"|".join(re.escape(p) for p in prefixes)) if kept else None

    def _longest_at(self, buffer: bytes, start: int) -> int:
        """The length of the longest pattern at `start`, 0 if none."""
        for p in self._by_head.get(buffer[start : start + MIN_MASKED_BYTES], ()):
            if buffer.startswith(p, start):
                return len(p)
        return 0

    def mask(self, buffer: bytes, cut: int, hide: int = 0, joined: bool = False) -> tuple[bytes, int]:
        """Mask `buffer` up to `cut`: (the masked bytes, how many raw bytes they stand for). Bytes below `hide`
        that no occurrence covers are masked too: one MASK for each run of them, none for a run at the buffer's
        start when `joined` (what came before ended with a MASK).

        Only an occurrence starting before `cut` is masked; it may end past `cut` (it is consumed whole).
        The result is the one-shot result when `buffer` starts where the one-shot scan is and either `cut`
        is the end of the stream or `cut <= len(buffer) - (longest - 1)`: then for every position p
        before `cut`, buffer[p : p + longest] is complete, so whether a pattern starts at p, and the
        longest one, is decided by bytes already held; scanning p left to right from the buffer's start
        finds the one-shot matches. A position at or past `cut` may start a pattern whose end is not yet
        fed: it waits, and the caller holds at most `longest - 1` bytes from `cut` on.
        """
        out: list[bytes] = []

        def literal(a: int, b: int) -> None:
            if a < hide and a < b and not (joined and a == 0):
                out.append(MASK)
            out.append(buffer[max(a, hide) : b])

        if self._candidates is None:
            literal(0, cut)
            return b"".join(out), cut
        done = 0  # raw bytes accounted for in `out`
        search = 0
        while search < cut:
            m = self._candidates.search(buffer, search)
            if m is None or m.start() >= cut:
                break
            start = m.start()
            length = self._longest_at(buffer, start)
            if length == 0:  # a prefix only
                search = start + 1
                continue
            literal(done, start)
            out.append(MASK)
            done = search = start + length
        if done < cut:
            literal(done, cut)
            done = cut
        return b"".join(out), done


def mask_all(patterns: Iterable[bytes], data: bytes) -> bytes:
    """`data` with every occurrence of `patterns` replaced by MASK in one call (as a Masker would).

    Patterns shorter than MIN_MASKED_BYTES are ignored.
    """
    masked, _ = _Matcher(patterns).mask(data, len(data))
    return masked


class Masker:
    """Masks one output stream fed in pieces: `feed` each piece in order, then `flush` once."""

    def __init__(self, values: Iterable[bytes]) -> None:
        self._matcher = _Matcher(patterns(values))
        self._buffer = b""
        self._hide = 0  # raw bytes at the buffer's start that are masked whole (after a cut)
        self._joined = False  # the output so far ends with MASK
        self._raw_consumed = 0
        self._emitted = 0
        self._flushed = False

    @property
    def longest(self) -> int:
        """The longest pattern's length (a value's longest form)."""
        return self._matcher.longest

    @property
    def raw_consumed(self) -> int:
        """Raw bytes fed so far."""
        return self._raw_consumed

    @property
    def emitted(self) -> int:
        """Masked bytes returned so far by `feed` and `flush`."""
        return self._emitted

    @property
    def held(self) -> int:
        """Raw bytes fed but not yet masked (at most the longest pattern less one)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> bytes:
        """The masked bytes that can be emitted now; raises ValueError after `flush`."""
        if self._flushed:
            raise ValueError("Masker.feed after flush")
        self._raw_consumed += len(data)
        buffer = self._buffer + data if self._buffer else data
        # A position before the cut has at least `longest` bytes after it in the buffer.
        cut = len(buffer) - (self._matcher.longest - 1) if self._matcher.longest else len(buffer)
        if cut <= 0:
            self._buffer = buffer
            return b""
        masked, done = self._matcher.mask(buffer, cut, self._hide, self._joined)
        self._buffer = buffer[done:]
        self._hide = max(0, self._hide - done)
        self._joined = masked.endswith(MASK) if masked else self._joined
        self._emitted += len(masked)
        return masked

    def cut(self) -> bytes:
        """Bytes of the stream after the last feed were dropped (the spool's cap). The bytes on both sides of the
        cut are masked whole: the held ones (they may start an occurrence whose rest is gone) become one MASK,
        returned, and the next longest - 1 bytes fed (they may end an occurrence whose start is gone) are masked
        where no occurrence covers them. An occurrence that starts after the cut is masked as usual."""
        held, self._buffer = self._buffer, b""
        self._hide = self.longest - 1
        if not held or self._joined:
            return b""
        self._joined = True
        self._emitted += len(MASK)
        return MASK

    def flush(self) -> bytes:
        """The masked rest at the end of the stream; raises ValueError if called twice."""
        if self._flushed:
            raise ValueError("Masker.flush called twice")
        self._flushed = True
        masked, _ = self._matcher.mask(self._buffer, len(self._buffer), self._hide, self._joined)
        self._buffer = b""
        self._emitted += len(masked)
        return masked
