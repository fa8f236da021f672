"""The ``convlog`` command line: ``main`` parses and dispatches (the console script is
``convlog.cli.main:main``), ``commands_*`` hold each group's subcommands (argument parsing and
printing only; events are printed by :mod:`convlog.render`)."""
