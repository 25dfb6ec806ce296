"""Secret masking of task output (worker/qinglong/worker/masking.py): which encodings of a value are
masked, that a Masker fed any cutting of a stream gives the one-shot `mask_all` output, that `mask_all`
agrees with a plain regular-expression reference (leftmost, then longest), and the bookkeeping.
Touches nothing.
"""

from __future__ import annotations

import base64
import itertools
import random
import re
from collections.abc import Iterable, Sequence

import pytest

from qinglong.worker.masking import MASK, MIN_MASKED_BYTES, Masker, mask_all, patterns

# Its nine forms are all different: padding, '+' and '/' in base64, a space, non-ASCII, JSON escapes.
VALUE = 'p?>ss wörd"\t'.encode()
FORMS = [
    VALUE,
    b"cD8+c3Mgd8O2cmQiCQ==",
    b"cD8+c3Mgd8O2cmQiCQ",
    b"cD8-c3Mgd8O2cmQiCQ==",
    b"cD8-c3Mgd8O2cmQiCQ",
    b"p%3F%3Ess%20w%C3%B6rd%22%09",
    b"p%3F%3Ess+w%C3%B6rd%22%09",
    b'p?>ss w\\u00f6rd\\"\\t',
    'p?>ss wörd\\"\\t'.encode(),
]


def reference(pats: Iterable[bytes], data: bytes) -> bytes:
    """The specification: one alternation of the patterns, longest first, substituted left to right."""
    kept = sorted({p for p in pats if len(p) >= MIN_MASKED_BYTES}, key=lambda p: (-len(p), p))
    if not kept:
        return data
    return re.sub(b"|".join(re.escape(p) for p in kept), MASK, data)


def stream(values: Iterable[bytes], pieces: Iterable[bytes]) -> bytes:
    """What a Masker emits for these pieces, checking the holdback bound after each feed."""
    values = list(values)
    longest = max((len(p) for p in patterns(values)), default=0)
    masker = Masker(values)
    out = []
    for piece in pieces:
        out.append(masker.feed(piece))
        assert masker.held <= max(longest - 1, 0)
    out.append(masker.flush())
    return b"".join(out)


def cut(data: bytes, points: Sequence[int]) -> list[bytes]:
    bounds = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def test_the_forms_of_a_value() -> None:
    assert patterns([VALUE]) == frozenset(FORMS)
    for form in FORMS:
        assert mask_all(patterns([VALUE]), b"<" + form + b">") == b"<***>"
        assert stream([VALUE], [b"a ", form, b" b"]) == b"a *** b"


def test_a_value_ending_in_a_newline_is_also_masked_without_it() -> None:
    for value, json_form in ((b"tok3n-value\n", b"tok3n-value\\n"), (b"tok3n-value\r\n", b"tok3n-value\\r\\n")):
        pats = patterns([value])
        assert {value, json_form, b"tok3n-value", b"dG9rM24tdmFsdWU=", b"dG9rM24tdmFsdWU"} <= pats
        assert mask_all(pats, b"x=tok3n-value;") == b"x=***;"
        assert mask_all(pats, b"x=dG9rM24tdmFsdWU=;") == b"x=***;"
        assert mask_all(pats, b"x=" + value + b"y") == b"x=***y"  # the newline goes with the raw form
    assert patterns([b"tok3n-value"]) < patterns([b"tok3n-value\n"])
    assert b"tok3n-value" not in patterns([b"tok3n-value\n\n"])  # one newline only


def test_a_value_of_the_minimum_length_is_masked_but_not_its_shorter_stripped_form() -> None:
    pats = patterns([b"abc\n"])
    assert b"abc\n" in pats
    assert b"YWJjCg==" in pats
    assert b"abc" not in pats
    assert all(len(p) >= MIN_MASKED_BYTES for p in pats)
    assert mask_all(pats, b"abc abc\n") == b"abc ***"


def test_short_values_are_not_masked() -> None:
    assert MIN_MASKED_BYTES == 4
    assert patterns([b"", b"a", b"abc", b"\n", b"a\r\n"]) == frozenset()
    assert mask_all(patterns([b"abc"]), b"abcabc") == b"abcabc"
    assert stream([b"abc"], [b"abc", b"abc"]) == b"abcabc"
    assert mask_all([b"abc", b"", b"xy"], b"abc xy") == b"abc xy"  # short patterns given directly too
    assert mask_all(patterns([b"abcd"]), b"abcabcd") == b"abc***"


def test_no_values_pass_everything_through() -> None:
    masker = Masker([])
    for piece in (b"abc", b"", b"\x00\xff***", b"x" * 100_000):
        assert masker.feed(piece) == piece
        assert masker.held == 0
    assert masker.flush() == b""
    assert masker.emitted == masker.raw_consumed == 100_008
    assert Masker([b"ab"]).feed(b"abab") == b"abab"  # values all too short: no patterns
    assert mask_all([], b"abc") == b"abc"


def test_binary_values() -> None:
    value = b"\x00\xff\xfb\xff\xbe\x00\n\x00"
    pats = patterns([value])
    assert value in pats
    assert value[:-1] not in pats  # it ends in \x00, not in a newline
    assert base64.b64encode(value) in pats
    assert b"%00%FF%FB%FF%BE%00%0A%00" in pats
    data = b"\xff" + value + b"\x00" + base64.urlsafe_b64encode(value).rstrip(b"=") + b"\x00"
    assert mask_all(pats, data) == b"\xff***\x00***\x00"
    assert stream([value], [bytes([b]) for b in data]) == b"\xff***\x00***\x00"


def test_invalid_utf8_has_no_json_forms() -> None:
    value = b"\xc3\x28secret\xff"
    pats = patterns([value])
    b64 = base64.b64encode(value)
    url = base64.urlsafe_b64encode(value)
    percent = b"%C3%28secret%FF"
    assert pats == {value, b64, b64.rstrip(b"="), url, url.rstrip(b"="), percent}
    assert mask_all(pats, b"[" + value + b"]") == b"[***]"


def test_leftmost_then_longest() -> None:
    # One value a prefix of another: the longer wins at the same start.
    pats = [b"abcd", b"abcdef"]
    assert mask_all(pats, b"abcdefg abcdx") == b"***g ***x"
    # One value inside another: the enclosing one starts first.
    pats = [b"bcde", b"abcdefgh"]
    assert mask_all(pats, b"abcdefgh abcdefg") == b"*** a***fg"
    # Overlapping values: the leftmost wins and the rest of the other stays.
    pats = [b"cdef", b"abcd"]
    assert mask_all(pats, b"abcdef") == b"***ef"
    assert mask_all(pats, b"xcdefabcd") == b"x******"
    # A value overlapping itself: non-overlapping occurrences, left to right.
    assert mask_all([b"abab"], b"ababab abababab") == b"***ab ******"
    for pats in ([b"abcd", b"abcdef"], [b"bcde", b"abcdefgh"], [b"cdef", b"abcd"], [b"abab"]):
        for data in (b"abcdefg abcdx", b"abcdefgh abcdefg", b"abcdef", b"xcdefabcd", b"ababab abababab"):
            assert mask_all(pats, data) == reference(pats, data)


def test_a_long_value_s_start_that_does_not_complete() -> None:
    # 64 bytes or more of a long value's start, then a real occurrence one byte later.
    value = b"a" * 70 + b"Z"
    data = b"a" * 71 + b"Z" + b"a" * 69 + b"Z" + b"a" * 80
    expected = b"a***" + b"a" * 69 + b"Z" + b"a" * 80
    assert mask_all([value], data) == expected == reference([value], data)
    assert stream([value], cut(data, range(0, len(data), 5))) == expected


def test_the_longer_of_two_values_waits_for_its_end() -> None:
    masker = Masker([b"abcd", b"abcdefgh"])
    out = masker.feed(b"xxabcd")
    assert out == b""  # "abcd" might still become "abcdefgh"
    out += masker.feed(b"efg")
    out += masker.feed(b"h-abcdzzzz")
    out += masker.flush()
    assert out == b"xx***-***zzzz"


def test_a_value_split_across_two_feeds() -> None:
    masker = Masker([b"hunter22"])
    first = masker.feed(b"password: hunt")  # longest pattern: "aHVudGVyMjI=" (12 bytes), so 11 held
    assert first == b"pas"
    assert masker.held == 11
    rest = masker.feed(b"er22 ok\n") + masker.flush()
    assert first + rest == b"password: *** ok\n"


def test_every_single_cut_equals_the_one_shot() -> None:
    values = [VALUE, b"abcd", b"abcdefgh", b"\x00\xffk3y\n"]
    pats = patterns(values)
    text = b"".join([b"a ", *FORMS, b" abcdefg abcdabcdefgh \x00\xffk3y\n \x00\xffk3y ", base64.b64encode(b"abcd")])
    expected = mask_all(pats, text)
    assert expected == reference(pats, text)
    assert expected.count(MASK) == len(FORMS) + 6
    for point in range(len(text) + 1):
        assert stream(values, cut(text, [point])) == expected, point
    rng = random.Random(20240601)  # noqa: S311 - reproducible cuts, not a secret
    for _ in range(300):
        points = [rng.randrange(len(text) + 1) for _ in range(rng.randrange(1, 12))]
        assert stream(values, cut(text, points)) == expected, points
    assert stream(values, [bytes([b]) for b in text]) == expected


def test_bookkeeping() -> None:
    masker = Masker([b"s3cret"])  # longest pattern: "czNjcmV0" (8 bytes), so at most 7 held
    out = masker.feed(b"one s3c")
    assert (masker.raw_consumed, masker.held, masker.emitted) == (7, 7, 0)
    assert out == b""
    out += masker.feed(b"ret two czNjcmV")
    assert out == b"one *** two "
    assert (masker.raw_consumed, masker.held, masker.emitted) == (22, 7, len(out))
    out += masker.feed(b"")
    assert (masker.raw_consumed, masker.held, masker.emitted) == (22, 7, len(out))
    out += masker.feed(b"0")
    assert out == b"one *** two ***"
    assert (masker.raw_consumed, masker.held, masker.emitted) == (23, 0, len(out))
    out += masker.flush()
    assert out == b"one *** two ***"
    assert (masker.raw_consumed, masker.held, masker.emitted) == (23, 0, len(out))


def test_a_match_extending_into_the_held_part_is_consumed() -> None:
    masker = Masker([b"abcd", b"abcdefgh"])  # longest 12 ("YWJjZGVmZ2g="): at most 11 held
    out = masker.feed(b"0123456789abcdefgh")  # cut at 7: nothing starts before it
    assert (out, masker.held) == (b"0123456", 11)
    out += masker.feed(b"!" * 5)  # cut at 5: "abcdefgh" starts at 3 and ends at 11
    assert out == b"0123456789***"
    assert masker.held == 5
    assert out + masker.flush() == b"0123456789***!!!!!"


def test_nothing_after_flush() -> None:
    masker = Masker([b"abcd"])
    assert masker.feed(b"xab") == b""
    assert masker.flush() == b"xab"
    with pytest.raises(ValueError, match="after flush"):
        masker.feed(b"cd")
    with pytest.raises(ValueError, match="twice"):
        masker.flush()
    assert (masker.raw_consumed, masker.emitted, masker.held) == (3, 3, 0)


def test_the_same_stream_masks_the_same_whatever_the_pieces() -> None:
    values = [b"abcdefgh", b"fghij"]
    data = b"abcdefghij fghijabcdefgh" * 3
    outputs = {stream(values, cut(data, range(step, len(data), step))) for step in range(1, len(data) + 1)}
    assert len(outputs) == 1
    assert outputs == {mask_all(patterns(values), data)}


def test_a_value_of_64_kib() -> None:
    rng = random.Random(7)  # noqa: S311 - a reproducible value, not a secret
    value = rng.randbytes(64 * 1024)
    pats = patterns([value])
    percent = max(pats, key=len)
    assert len(percent) > 2 * 64 * 1024
    data = b"head " + value + b" mid " + base64.b64encode(value) + b" " + percent + b" tail"
    pieces = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    assert stream([value], pieces) == b"head *** mid *** *** tail"


def _random_case(rng: random.Random) -> tuple[list[bytes], bytes]:
    """Secret values without '*' and a text of random bytes, values, their encodings and parts."""
    alphabet = [b for b in range(256) if b != ord("*")]
    values = []
    for _ in range(rng.randrange(1, 6)):
        kind = rng.randrange(4)
        size = rng.randrange(1, 24)
        if kind == 0:
            value = bytes(rng.choice(alphabet) for _ in range(size))
        elif kind == 1:
            value = "".join(rng.choice('abcé"\\\t /+?=%ü') for _ in range(size)).encode()
        elif kind == 2:
            value = bytes(rng.choice(b"abcd") for _ in range(size))  # values overlapping each other
        else:
            value = b"a" * rng.randrange(60, 80) + bytes(rng.choice(b"ab") for _ in range(size))  # long, alike
        values.append(value + b"\n" if rng.random() < 0.2 else value)
    forms = sorted(patterns(values))
    parts = []
    for _ in range(rng.randrange(0, 30)):
        choice = rng.random()
        if forms and choice < 0.4:
            parts.append(rng.choice(forms))
        elif forms and choice < 0.55:
            form = rng.choice(forms)
            parts.append(form[: rng.randrange(len(form))])  # an incomplete occurrence
        elif choice < 0.7:
            parts.append(rng.choice(values))
        else:
            parts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))))
    return values, b"".join(parts)


def test_random_streams() -> None:
    rng = random.Random(12345)  # noqa: S311 - reproducible cases, not a secret
    masked_some = 0
    for _ in range(200):
        values, data = _random_case(rng)
        pats = patterns(values)
        expected = mask_all(pats, data)
        assert expected == reference(pats, data)
        points = [rng.randrange(len(data) + 1) for _ in range(rng.randrange(0, 20))]
        assert stream(values, cut(data, points)) == expected
        size = rng.randrange(1, 40)
        assert stream(values, [data[i : i + size] for i in range(0, len(data), size)]) == expected
        assert not any(b"*" in p for p in pats)
        for p in pats:
            assert p not in expected, (values, data, p)
        masked_some += MASK in expected
    assert masked_some > 150, masked_some
