"""The framework adapters' tests run without network: the Agents SDK's tracing (which exports
to OpenAI by default) is off."""

from __future__ import annotations

import os

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "true")
