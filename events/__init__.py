"""convlog: an event-sourced conversation log for LLM applications."""
