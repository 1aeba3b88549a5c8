"""A process's life, for both sides' entry points: signals, the two-phase shutdown and exit
statuses (``shutdown``), the slow-client guard of their HTTP servers (``slowclients``) and
tracing (``tracing``: OpenTelemetry spans, imported only with the otel extra). Imports only the
leaves; never ``link``, ``control``, ``service`` or ``coordinator``."""
