"""The Slack-compatible body of a notification (``FLEETGATE_WEBHOOK_FORMAT=slack``).

An incoming webhook of Slack (and of Mattermost, Rocket.Chat, Discord's ``/slack`` endpoint)
takes ``{"text": ...}``; Slack also renders ``blocks``. What an operator typed (a reason, a
name) is escaped (``&``, ``<``, ``>``), so a reason such as ``<!channel>`` pings nobody.
"""

from __future__ import annotations

from typing import Any

from coordinator.notify.events import Event


def escape(value: str) -> str:
    """Slack's escaping of text: ``&``, ``<`` and ``>``."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(event: Event) -> dict[str, Any]:
    """``{"text", "blocks"}``: the sentence, then a context line (fleet, event, version, when)."""
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
    }


__all__ = ["escape", "slack_body"]
