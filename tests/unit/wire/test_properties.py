"""Properties every wire message holds, for every message family (every module of qinglong.wire.ALL_MESSAGES,
so a new module is covered the day it joins it). Touches nothing.

Round trip with stable canonical bytes; every mutation of a valid message is refused with its own
WireError; arbitrary bytes and arbitrary JSON-ish values raise nothing but WireError.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.wire import ALL_MESSAGES, Message
from tests.unit.wire.kit import (
    FAST,
    FEW,
    FUZZ,
    Mutation,
    assert_only_wire_errors,
    assert_round_trip,
    check_json_ish,
    check_mutation,
    messages,
    mutation_kinds,
)

FAMILIES: dict[str, tuple[type[Message], ...]] = {
    module.rsplit(".", 1)[1]: tuple(m for m in ALL_MESSAGES if m.__module__ == module)
    for module in dict.fromkeys(m.__module__ for m in ALL_MESSAGES)
}
MUTATIONS = [(name, kind) for name, family in FAMILIES.items() for kind in mutation_kinds(family)]


@pytest.mark.parametrize("family", FAMILIES)
@FAST
@given(data=st.data())
def test_every_valid_message_round_trips(family: str, data: st.DataObject) -> None:
    assert_round_trip(data.draw(messages(FAMILIES[family])))


@pytest.mark.parametrize(("family", "kind"), MUTATIONS)
@FEW
@given(data=st.data())
def test_every_mutation_is_refused(family: str, kind: Mutation, data: st.DataObject) -> None:
    check_mutation(data, FAMILIES[family], kind)


@pytest.mark.parametrize("family", FAMILIES)
@FAST
@given(data=st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_wire_errors(family: str, data: bytes) -> None:
    for cls in FAMILIES[family]:
        assert_only_wire_errors(cls, data)


@pytest.mark.parametrize("family", FAMILIES)
@FUZZ
@given(data=st.data())
def test_arbitrary_json_raises_only_wire_errors(family: str, data: st.DataObject) -> None:
    check_json_ish(data, FAMILIES[family])
