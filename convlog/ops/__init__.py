"""Operators' jobs behind ``convlog`` subcommands, one module per job, drivers at the edges.

``replay``, ``positions``, ``dead_letters``, ``export``, ``retention``, ``rebuilding`` (rebuild
and drop; its worker process is ``rebuild_worker``) and ``verifying``; ``common`` holds what the
long-running ones share and ``resources`` the connections they open.
"""
