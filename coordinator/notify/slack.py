"""The Slack-compatible body of a notification (``FLEETGATE_WEBHOOK_FORMAT=slack``).

An incoming webhook of Slack (and of Mattermost, Rocket.Chat, Discord's ``/slack`` endpoint)
takes ``{"text": ...}``; Slack also renders ``blocks``. What an operator typed (a reason, a
name) pings nobody, in any of them:

* ``&``, ``<`` and ``>`` are escaped, so Slack's ``<!channel>``, ``<!here>``, ``<@U123>`` and
  Discord's ``<@&role>`` are plain text;
* a zero-width space (U+200B) follows every ``@``, so ``@channel``, ``@here``, ``@all``,
  ``@everyone`` and ``@alice`` (Mattermost, Discord, Rocket.Chat) read the same and mention
  nobody;
* the body says ``"allowed_mentions": {"parse": []}``, Discord's switch for "no mentions at
  all" (the others ignore it).
"""

from __future__ import annotations

from typing import Any, Final

from coordinator.notify.events import Event

ZWSP: Final = "\u200b"
"""Zero-width space: put after ``@``, it keeps a mention from being one."""


def escape(value: str) -> str:
    """Text as a chat shows it and no chat takes as a mention: Slack's escaping of ``&``,
    ``<`` and ``>``, and a zero-width space after each ``@``."""
    escaped = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped.replace("@", "@" + ZWSP)


def slack_body(event: Event) -> dict[str, Any]:
    """``{"text", "blocks", "allowed_mentions"}``: the sentence, then a context line (fleet,
    event, version, when)."""
    sentence = escape(event.text)
    context = [f"fleet *{escape(event.fleet)}*", f"event `{escape(event.event)}`"]
    if event.hold:
        context.append(f"hold `{escape(event.hold)}`")
    if event.version:
        context.append(f"version {event.version}")
    if event.at:
        context.append(escape(event.at))
    return {
        "text": sentence,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": sentence}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]},
        ],
        "allowed_mentions": {"parse": []},
    }


def chat_body(event: Event, fmt: str) -> dict[str, Any]:
    """The body of a chat format (``slack``; every chat format goes through ``escape``)."""
    if fmt == "slack":
        return slack_body(event)
    raise ValueError(f"not a chat format: {fmt}")


__all__ = ["ZWSP", "chat_body", "escape", "slack_body"]
