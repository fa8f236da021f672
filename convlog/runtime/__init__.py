"""The long-running processes and their wiring: ``serve`` (API, projector and summarizer in one
process), ``projecting``, ``summarizing``, the HTTP and metrics servers, logging, the append guard
and ``wiring`` (settings to the concrete log and producer)."""
