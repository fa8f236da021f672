"""convlog: an event-sourced conversation log on Kafka and Postgres — the composition root.

``Settings`` and ``open_event_log`` give a chat app its log (Kafka if
``CONVLOG_KAFKA_BOOTSTRAP`` is set, else the embedded file); ``running_service`` runs the API,
the projector and the summarizer in-process. All are imported on first use: ``import convlog``
pulls in no driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from convlog.runtime.serve import Service, running_service
    from convlog.settings import Settings
    from convlog.wiring import make_producer, open_event_log
else:
    from events._lazy import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "Service": "convlog.runtime.serve",
            "running_service": "convlog.runtime.serve",
            "Settings": "convlog.settings",
            "make_producer": "convlog.wiring",
            "open_event_log": "convlog.wiring",
        },
    )

__all__ = ["Service", "Settings", "make_producer", "open_event_log", "running_service"]
