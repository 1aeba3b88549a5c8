"""Label selectors and replica labels (Kubernetes syntax): one parser both sides use."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replica.contract.selectors import (
    EQUALS,
    EXISTS,
    IN,
    NOT_EQUALS,
    NOT_EXISTS,
    NOT_IN,
    Requirement,
    Selector,
    canonical_selector,
    check_labels,
    format_labels,
    parse_labels,
    parse_selector,
)
from replica.errors import ContractError

LABELS = {"zone": "eu-west-1a", "version": "1.4.2", "app.kubernetes.io/name": "orders"}


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("zone=eu-west-1a", True),
        ("zone==eu-west-1a", True),
        ("zone = eu-west-1a", True),
        ("zone=eu-west-1b", False),
        ("zone!=eu-west-1b", True),
        ("zone!=eu-west-1a", False),
        ("team!=payments", True),  # absent: != holds
        ("zone in (eu-west-1a, eu-west-1b)", True),
        ("zone in (eu-west-1b)", False),
        ("zone notin (eu-west-1b,us-east-1a)", True),
        ("zone notin (eu-west-1a)", False),
        ("team notin (payments)", True),  # absent: notin holds
        ("team in (payments)", False),
        ("zone", True),
        ("team", False),
        ("!team", True),
        ("!zone", False),
        ("zone=eu-west-1a,version=1.4.2", True),
        ("zone=eu-west-1a, version!=1.4.2", False),
        ("app.kubernetes.io/name=orders,!canary", True),
        ("zone in(eu-west-1a),version notin(1.4.1)", True),
        ("zone=", False),
        ("team=", False),  # = needs the label there
    ],
)
def test_a_selector_matches_as_kubernetes_does(text: str, selected: bool) -> None:
    assert parse_selector(text).matches(LABELS) is selected


def test_an_empty_value_is_a_value() -> None:
    assert parse_selector("tier=").matches({"tier": ""})
    assert not parse_selector("tier=").matches({})
    assert parse_selector("tier in (a,)").matches({"tier": ""})


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("zone=a,", "expected a label key"),
        (",zone=a", "expected a label key"),
        ("zone=a b", "expected , between requirements"),
        ("zone>3", "label key"),
        ("zone in a", "needs a list of values"),
        ("zone in (a", "expected , or )"),
        ("zone in ()", "at least one value"),
        ("zone notin (a b)", "expected , or )"),
        ("-zone=a", "label key"),
        ("zone=-a", "value"),
        ("Bad_Prefix/zone=a", "prefix"),
        ("zone=" + "a" * 64, "value"),
        ("k" * 64, "label key"),
        ("zone=a\x1b", "control characters"),
        ("!zone=a", "expected , between requirements"),
        ("x" * 1001, "at most 1000"),
    ],
)
def test_a_bad_selector_is_refused_with_one_line_naming_why(text: str, why: str) -> None:
    with pytest.raises(ContractError, match=re.escape(why)) as info:
        parse_selector(text)
    assert "\n" not in str(info.value)


def test_the_canonical_form_sorts_set_values_and_drops_spaces() -> None:
    assert canonical_selector(" zone  in (b , a),version!=1 ,  !x") == \
        "zone in (a,b),version!=1,!x"
    assert canonical_selector("zone==a") == "zone=a"


def test_labels_are_read_and_checked_by_the_kubernetes_rules() -> None:
    assert parse_labels("zone=eu-west-1a, version=1.4.2") == {"zone": "eu-west-1a",
                                                              "version": "1.4.2"}
    assert parse_labels("") == {}
    assert parse_labels("tier=") == {"tier": ""}
    assert format_labels({"zone": "a", "app": "b"}) == "app=b,zone=a"
    for bad, why in [("zone", "not key=value"), ("zone=a,zone=b", "twice"),
                     ("zone=eu west", "value"), ("-x=1", "label key"),
                     (",".join(f"k{i}=v" for i in range(65)), "at most 64")]:
        with pytest.raises(ContractError, match=why):
            parse_labels(bad)
    with pytest.raises(ContractError):
        check_labels({"zone": 3})  # type: ignore[dict-item]


# -- properties

_NAME = st.from_regex(r"[a-z0-9]([a-z0-9_.-]{0,8}[a-z0-9])?", fullmatch=True)
_KEY = st.one_of(_NAME, st.builds(lambda p, n: f"{p}/{n}",
                                  st.from_regex(r"[a-z]{1,5}(\.[a-z]{1,4})?", fullmatch=True),
                                  _NAME))
_VALUE = st.one_of(st.just(""), _NAME)
_SMALL_KEYS = st.sampled_from(["zone", "version", "team", "example.com/tier"])
_SMALL_VALUES = st.sampled_from(["", "a", "b", "eu-west-1a", "1.4.2"])


@st.composite
def _requirements(draw: st.DrawFn, keys: st.SearchStrategy[str] = _KEY,
                  values: st.SearchStrategy[str] = _VALUE) -> Requirement:
    op = draw(st.sampled_from([EQUALS, NOT_EQUALS, IN, NOT_IN, EXISTS, NOT_EXISTS]))
    key = draw(keys)
    if op in (EXISTS, NOT_EXISTS):
        return Requirement(key, op)
    if op in (EQUALS, NOT_EQUALS):
        return Requirement(key, op, (draw(values),))
    vals = draw(st.sets(values, min_size=1, max_size=4).filter(lambda s: s != {""}))
    return Requirement(key, op, tuple(sorted(vals)))


def _spelled(req: Requirement, spaces: str, double: bool) -> str:
    """``req`` written as an operator might, with extra spaces and ``==`` for ``=``."""
    s = spaces
    if req.op == EXISTS:
        return f"{s}{req.key}{s}"
    if req.op == NOT_EXISTS:
        return f"{s}!{s}{req.key}{s}"
    if req.op in (EQUALS, NOT_EQUALS):
        op = "==" if double and req.op == EQUALS else req.op
        return f"{s}{req.key}{s}{op}{s}{req.values[0]}{s}"
    return f"{s}{req.key} {req.op}{s}({s}{(s + ',' + s).join(req.values)}{s}){s}"


def _reference(req: Requirement, labels: dict[str, str]) -> bool:
    """What Kubernetes documents each operator to mean, written out separately."""
    has = req.key in labels
    if req.op == EXISTS:
        return has
    if req.op == NOT_EXISTS:
        return not has
    if req.op in (EQUALS, IN):
        return has and labels[req.key] in req.values
    return not has or labels[req.key] not in req.values


@given(st.lists(_requirements(), min_size=1, max_size=5), st.sampled_from(["", " ", "  "]),
       st.booleans())
def test_any_selector_written_any_way_parses_to_its_requirements(
    reqs: list[Requirement], spaces: str, double: bool
) -> None:
    text = ",".join(_spelled(r, spaces, double) for r in reqs)
    parsed = parse_selector(text)
    assert parsed == Selector(tuple(reqs))
    assert parse_selector(str(parsed)) == parsed


@given(st.lists(_requirements(_SMALL_KEYS, _SMALL_VALUES), min_size=1, max_size=4),
       st.dictionaries(_SMALL_KEYS, _SMALL_VALUES, max_size=4))
def test_a_selector_matches_exactly_when_every_requirement_holds(
    reqs: list[Requirement], labels: dict[str, str]
) -> None:
    selector = parse_selector(",".join(str(r) for r in reqs))
    assert selector.matches(labels) is all(_reference(r, labels) for r in reqs)


@given(st.text(alphabet=st.sampled_from(list("az09=!(),. -_/\tinot")), max_size=40))
def test_any_text_parses_or_is_refused_with_a_contract_error(text: str) -> None:
    try:
        selector = parse_selector(text)
    except ContractError as exc:
        assert "\n" not in str(exc)
        return
    assert parse_selector(str(selector)) == selector


@given(st.dictionaries(_KEY, _VALUE, max_size=10))
def test_labels_print_back_to_themselves(labels: dict[str, str]) -> None:
    assert parse_labels(format_labels(labels)) == labels
