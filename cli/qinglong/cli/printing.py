"""How commands print an answer: a creating command's new id (or the answer as JSON), a document as JSON or text,
a table of rows. Touches stdout and stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any


def created(args: argparse.Namespace, new_id: str, answer: dict[str, Any], sentence: str) -> int:
    """What a creating command prints: the answer as JSON (--json), else the new id alone; --verbose: the sentence
    on stderr."""
    print(json.dumps(answer, indent=2) if args.json else new_id)
    if args.verbose:
        print(sentence, file=sys.stderr)
    return 0


def emit(args: argparse.Namespace, document: Mapping[str, Any], text: str) -> int:
    """The document as JSON (--json), else the text."""
    print(json.dumps(document, indent=2) if args.json else text)
    return 0


def status_set(args: argparse.Namespace, done: Mapping[str, Any], what: str, id_key: str, more: str = "") -> int:
    """What disable and enable print: the thing, its new status, whether it already had it (and `more`)."""
    already = "" if done["changed"] else " (already)"
    return emit(args, done, f"{what} {done['name']} {done[id_key]}: {done['status']}{already}{more}")


def when(ms: Any) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "-"
    return str(value)


def plural(count: int, noun: str, nouns: str = "") -> str:
    """`1 Run`, `2 Runs`, `0 events` (`nouns`: an irregular plural)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> str:
    """The one table style: upper-case headers, columns padded to their widest cell; None is '-', booleans yes/no,
    lists space-separated."""
    cells = [[h.upper() for h in headers]] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)
