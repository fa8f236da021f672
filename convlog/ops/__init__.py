"""Operators' tooling behind ``convlog`` subcommands: one module per job, drivers at the edges."""
