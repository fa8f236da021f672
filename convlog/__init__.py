"""convlog: an event-sourced conversation log on Kafka and Postgres."""
