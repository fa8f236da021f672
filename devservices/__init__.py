"""The local Kafka and Postgres services for development and CI — never shipped (not in the wheel).

``python -m devservices up|env|status|down`` (``make services-up``; :mod:`devservices.cli`) starts
a Kafka broker (``kafka_service``) or a three-node cluster (``kafka_cluster``; ``kafka_wire``
reads their metadata over a socket) and a Postgres (:mod:`convlog.embedded.postgres_server`, as
the embedded defaults run it); ``_services`` holds the Kafka broker's Maven pom. It builds on
:mod:`convlog.embedded`; nothing in the product imports it (an import contract)."""
