"""The jobs both sides of the composition root run: ``convlog serve`` schedules retention
(:mod:`convlog.runtime`), operators run it and the export it archives with by command
(:mod:`convlog.ops` via the CLI). Below both, so that neither imports the other."""
