"""The benchmark: what the exporter costs the queue's database, beside the queue's own reports."""
