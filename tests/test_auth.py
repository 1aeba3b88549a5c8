"""Tokens map to named operators with a role; anything unreadable is refused at start-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.settings import CoordinatorSettings
from coordinator.web.auth import (
    Operator,
    Role,
    TokenEntry,
    TokenStore,
    bearer_token,
    load_tokens_file,
)
from replica.errors import ConfigError

ADMIN = "admin-token-0123456789"
VIEW = "view-token-0123456789"


def settings(**values: object) -> CoordinatorSettings:
    return CoordinatorSettings.model_validate(values)


def test_the_admin_and_view_tokens_map_to_their_configured_names_and_roles() -> None:
    store = TokenStore.from_settings(
        settings(admin_token=ADMIN, admin_name="alice", view_token=VIEW, view_name="grafana")
    )
    assert store.authenticate(ADMIN) == Operator("alice", Role.ADMIN)
    assert store.authenticate(VIEW) == Operator("grafana", Role.VIEW)
    assert store.has_admin and len(store) == 2


def test_a_wrong_empty_or_oversized_token_authenticates_nobody() -> None:
    store = TokenStore.from_settings(settings(admin_token=ADMIN))
    for token in (None, "", ADMIN[:-1], ADMIN + "x", "x" * 10_000, "ünïcode"):
        assert store.authenticate(token) is None


def test_without_an_admin_token_the_store_says_so() -> None:
    assert not TokenStore.from_settings(settings(view_token=VIEW)).has_admin
    assert not TokenStore.from_settings(settings(admin_token="  ")).has_admin


def test_the_environment_sets_tokens_and_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGATE_ADMIN_TOKEN", ADMIN)
    monkeypatch.setenv("FLEETGATE_ADMIN_NAME", "oncall")
    store = TokenStore.from_settings(CoordinatorSettings())
    assert store.authenticate(ADMIN) == Operator("oncall", Role.ADMIN)
    assert ADMIN not in repr(CoordinatorSettings())


def test_a_json_tokens_file_names_several_operators(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(
        json.dumps(
            [
                {"name": "alice", "token": "alice-token-0123456789", "role": "admin"},
                {"name": "dash", "token": "dash-token-0123456789", "role": "view"},
            ]
        )
    )
    store = TokenStore.from_settings(settings(tokens_file=str(path)))
    assert store.authenticate("alice-token-0123456789") == Operator("alice", Role.ADMIN)
    assert store.authenticate("dash-token-0123456789") == Operator("dash", Role.VIEW)


def test_a_json_object_tokens_file_takes_names_from_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"bob": {"token": "bob-token-0123456789"}}))
    assert load_tokens_file(path) == [TokenEntry("bob", "bob-token-0123456789", Role.ADMIN)]


def test_a_line_tokens_file_reads_name_token_and_optional_role(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# operators\n\nalice:alice-token-0123456789\nbot:bot-token-0123456789:view\n")
    assert load_tokens_file(path) == [
        TokenEntry("alice", "alice-token-0123456789", Role.ADMIN),
        TokenEntry("bot", "bot-token-0123456789", Role.VIEW),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("alice\n", "line 1: expected name:token"),
        ("ok:ok-token-0123456789\nbob:tok:root\n", "line 2: role must be admin or view"),
        ("[1, 2]", "entry 0 is not an object"),
        ('{"a": {"role": "admin"}}', "needs a string name and token"),
        ("[{", "is not valid JSON"),
        ("a:same-token-0123456789\nb:same-token-0123456789\n", "have the same token"),
        ("a:has space\n", "without spaces"),
        ("a:a-token-0123456789:view:orders,Bad Name\n", "line 1: fleets: 'Bad Name' is not a fleet"),
        ("a:a-token-0123456789:view:,\n", "line 1: fleets is empty"),
        ("a:b:c:d:e\n", "line 1: expected name:token"),
        ('[{"name": "a", "token": "a-token-0123456789", "fleets": "orders"}]', "fleets must be a list"),
        ('[{"name": "a", "token": "a-token-0123456789", "fleets": []}]', "entry 0: fleets is empty"),
        ('[{"name": "a", "token": "a-token-0123456789", "fleets": ["../x"]}]', "is not a fleet name"),
    ],
)
def test_a_bad_tokens_file_is_a_config_error_naming_the_place(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "tokens"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        TokenStore.from_settings(settings(tokens_file=str(path)))


def test_a_missing_tokens_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read tokens file"):
        load_tokens_file(tmp_path / "absent")


def test_a_short_token_works_but_is_logged_as_weak(caplog: pytest.LogCaptureFixture) -> None:
    store = TokenStore([("tiny", "abc", Role.ADMIN)])
    assert store.authenticate("abc") == Operator("tiny", Role.ADMIN)
    assert "shorter than 16 characters" in caplog.text
    assert "abc" not in caplog.text


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer   abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("", None),
        (None, None),
    ],
)
def test_the_bearer_token_is_read_from_the_authorization_header(
    header: str | None, token: str | None
) -> None:
    assert bearer_token(header) == token


def test_only_an_admin_can_write() -> None:
    assert Operator("a", Role.ADMIN).can_write
    assert not Operator("v", Role.VIEW).can_write


@pytest.mark.parametrize("name", ["", "   ", "al\nice", "bob\x1b[31m", "a" * 101, "x\ud800y"])
def test_an_operator_name_that_could_not_be_a_by_is_refused_without_echoing_it(
    tmp_path: Path, name: str
) -> None:
    """An operator's name becomes the ``by`` of their changes: the contract's rule for ``by``."""
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([{"name": name, "token": "a-token-0123456789", "role": "admin"}]))
    with pytest.raises(ConfigError, match="operator name: by must be 1 to 100") as caught:
        TokenStore.from_settings(settings(tokens_file=str(path)))
    if name.strip():
        assert name.strip() not in str(caught.value)



def test_a_tokens_file_entry_may_limit_its_token_to_some_fleets(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([
        {"name": "orders-oncall", "token": "orders-token-0123456789", "role": "admin",
         "fleets": ["orders", "orders-eu"]},
        {"name": "alice", "token": "alice-token-0123456789"},
    ]))
    store = TokenStore.from_settings(settings(tokens_file=str(path)))
    limited = store.authenticate("orders-token-0123456789")
    assert limited == Operator("orders-oncall", Role.ADMIN, frozenset({"orders", "orders-eu"}))
    assert limited.may_use("orders") and limited.may_use("orders-eu")
    assert not limited.may_use("email")
    everyone = store.authenticate("alice-token-0123456789")
    assert everyone is not None and everyone.fleets is None and everyone.may_use("email")


def test_a_line_of_the_tokens_file_may_limit_its_token_to_some_fleets(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("dash:dash-token-0123456789:view:orders, email\n")
    assert load_tokens_file(path) == [
        TokenEntry("dash", "dash-token-0123456789", Role.VIEW, frozenset({"orders", "email"}))
    ]
