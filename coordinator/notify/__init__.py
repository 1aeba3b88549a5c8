"""Notifications: every audit event and alert of a fleet, POSTed to the receivers of
``FLEETGATE_WEBHOOK_URLS`` by ``fleetgate serve``.

One module per noun::

    settings   NotifySettings (from the FLEETGATE_WEBHOOK_* settings), receiver labels
    events     a stream entry as an Event: its JSON body and its sentence (text)
    slack      the Slack-compatible body
    webhook    signed POSTs (HMAC-SHA256), one Receiver per URL with its retries
    alerts     alerts (a forgotten pause) into the events stream, once per fleet
    consumer   Notifier: the audit and events streams through a consumer group

The layer sits above ``coordinator.fleet`` and below ``coordinator.web``, which starts a
``Notifier`` in ``fleetgate serve``.
"""
