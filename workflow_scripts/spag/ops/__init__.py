"""Operations: what runs the research core on machines and clusters, apart from it.

Device checks (``device``), cluster launch shapes (``cluster``), preflight, run
status, provenance records, trackers, shard journals, base-model preparation, engine
sizing and the allocator settings. The research core (``spag.game``,
``spag.training``, ``spag.generation``, ``spag.evaluation``, ``spag.data``) imports
only what this module exports; the steps' command lines (``spag.commands``) join the
two halves.
"""

from spag.ops.device import DEVICES, family_device, select_device
from spag.ops.tracking import (
    DEFAULT_DIR as TRACKING_DIR,
)
from spag.ops.tracking import (
    ENV_PROJECT,
    ENV_REPORT_TO,
    ENV_RUN_NAME,
    ENV_TRACKING_DIR,
    apply_environment,
    check_trackers_available,
    folder_name,
    guard_tracker_callbacks,
    parse_report_to,
    tracker_environment,
)

__all__ = [
    "DEVICES",
    "ENV_PROJECT",
    "ENV_REPORT_TO",
    "ENV_RUN_NAME",
    "ENV_TRACKING_DIR",
    "TRACKING_DIR",
    "apply_environment",
    "check_trackers_available",
    "family_device",
    "folder_name",
    "guard_tracker_callbacks",
    "parse_report_to",
    "select_device",
    "tracker_environment",
]
