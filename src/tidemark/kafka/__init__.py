"""Kafka and Azure Event Hubs (its Kafka endpoint): the source's options, its secrets, and the Kafka admin API."""
