"""Servers convlog runs on this machine: the embedded Postgres of the embedded defaults
(``embedded_pg``), and the local Kafka and Postgres services for development and CI
(``devservices``, ``kafka_service``, ``kafka_cluster`` — three nodes —, ``kafka_wire``,
``postgres_service``, ``processes``; ``_services`` is package data: the Kafka broker's Maven pom)."""
