"""The long-running processes: ``serve`` (API, projector and summarizer in one process),
``projecting``, ``summarizing``, the HTTP and metrics servers, logging and the append guard.
Settings become the concrete log and producer in :mod:`convlog.wiring`."""
