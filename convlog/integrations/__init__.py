"""convlog as the memory of agent frameworks: one optional module per framework, each built on
:mod:`convlog.client` only (install the framework with its extra, e.g. ``convlog[pydantic-ai]``)."""
