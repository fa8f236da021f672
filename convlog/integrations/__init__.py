"""Drop-in convlog history for the chat frameworks apps already use: one module per framework
(``convlog.integrations.<name>``), each an optional extra (``convlog[agents]``, ``[pydantic-ai]``,
``[langchain]``); it imports only ``convlog.client`` and its framework, and the core never imports it."""
