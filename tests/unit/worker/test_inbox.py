"""The journal record's typed view (worker/qinglong/worker/inbox.py): a record written before task output
was shipped (with the `receipts` of an uploaded log) still loads, and saves without them. Touches nothing.
"""

from __future__ import annotations

from qinglong.wire.offer import OfferOffered, parse_offer_response
from qinglong.worker.inbox import Inbox
from tests.unit.wire.test_offer import offered


def test_a_record_with_the_receipts_of_an_uploaded_log_loads_and_drops_them() -> None:
    offer = parse_offer_response(offered())
    assert isinstance(offer, OfferOffered)
    inbox = Inbox.accepted(offer, "session-1", 0).replace(exit_code=0)
    data = inbox.to_data()
    assert "receipts" not in data
    old = {**data, "receipts": [{"artifactId": "a", "kind": "log", "sha256": "0" * 64, "size": 1}]}
    assert Inbox.from_data(old) == inbox
    assert Inbox.from_data(old).to_data() == data
