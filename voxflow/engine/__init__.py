"""The engine: requests, stage queues, batch scheduling, stage workers and metrics."""
