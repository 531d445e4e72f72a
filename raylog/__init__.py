"""raylog: a distributed, partitioned, replicated commit log on Ray, with Kafka's design."""

__version__ = "0.1.0"
