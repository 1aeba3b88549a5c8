"""Notifications: every audit event and alert of a fleet, POSTed to the receivers of
``FLEETGATE_WEBHOOK_URLS`` by ``fleetgate serve``.

One module per noun::

    settings   NotifySettings (from the FLEETGATE_WEBHOOK_* settings), receiver labels
    events     a stream entry as an Event: its JSON body and its sentence (text)
    slack      the Slack-compatible body, in which what an operator typed mentions nobody
    webhook    signed POSTs (Standard Webhooks), one Receiver per URL with its retries
    alerts     alerts (a forgotten pause) into the events stream, once per fleet
    streams    the streams read as raw bytes, an entry decoded on its own
    lane       one receiver's consumer group: its entries in hand, acks and claims
    follow     Follower: every fleet of the registry that has a state
    consumer   Notifier: a Lane per receiver on the default fleet's streams, and a Follower

The layer sits above ``coordinator.fleet`` and below ``coordinator.web``, which starts a
``Notifier`` in ``fleetgate serve``.
"""
