"""raylog's Kafka listener: a Ray actor per broker speaking Kafka's wire protocol, and the
handlers that translate each Kafka API to calls on raylog's actors."""
