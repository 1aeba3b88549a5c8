"""What ``fleetgate serve`` watches in the background, for every fleet.

* ``fleet`` (``OverdueWatcher``): one fleet's checks: overdue pauses logged and raised for
  notification, a state hash Redis lost restored, maintenance windows audited;
* ``fleets`` (``FleetsWatcher``): the one task that runs those checks for the default fleet and
  every fleet of the registry, reads and prunes the registry, and never dies.

The names import from here as they did when this was one module. Both modules log under this
package's logger (``coordinator.web.watcher.*``), so a level set on ``coordinator.web.watcher``
covers the watcher whole.
"""

from coordinator.web.watcher.fleet import UNREACHABLE, OverdueWatcher, Unreadable
from coordinator.web.watcher.fleets import REGISTRY_INTERVAL, FleetsWatcher

__all__ = ["REGISTRY_INTERVAL", "UNREACHABLE", "FleetsWatcher", "OverdueWatcher", "Unreadable"]
