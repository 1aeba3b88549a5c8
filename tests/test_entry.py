"""Decoding one work entry read as raw bytes, and what its dead letter keeps."""

from __future__ import annotations

import pytest

from replica.service.entry import MalformedEntry, dead_letter_fields, decode, read_entries


def test_a_good_entry_becomes_a_work_item_keeping_its_raw_fields() -> None:
    fields = {b"item": b'{"id": "\xc3\xa9"}', b"trace": b"t-1"}
    work = decode("1-0", fields, "read")
    assert work.item == {"id": "é"} and work.fields == fields and work.runs == 0


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({b"other": b"x"}, "no 'item' field"),
        ({b"item": b'"\xff\xfe"'}, "item is not UTF-8"),
        ({b"item": b"{not json"}, "item is not JSON: "),
        ({b"item": b"[" * 5000 + b"]" * 5000}, "item is not JSON this replica can read"),
    ],
)
def test_an_entry_that_is_not_an_item_says_why(fields: dict[bytes, bytes], reason: str) -> None:
    with pytest.raises(MalformedEntry) as info:
        decode("1-0", fields, "read")
    assert info.value.reason.startswith(reason)


def test_a_dead_letter_keeps_every_field_whole() -> None:
    long = b"\xff" * 10_000
    kept = dead_letter_fields({b"item": long, b"error": b"producer's own", b"\xfe": b"v"})
    assert kept == {b"item": long, b"field:error": b"producer's own", b"field:\xfe": b"v"}
    assert dead_letter_fields(None) == {}


def test_read_replies_of_both_protocols_give_their_entries() -> None:
    entries = [(b"1-0", {b"item": b"1"})]
    assert read_entries([[b"s", entries]]) == entries
    assert read_entries({b"s": [entries]}) == entries
    assert read_entries(None) == read_entries([]) == read_entries({}) == []
