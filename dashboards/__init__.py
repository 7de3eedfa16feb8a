"""The Grafana dashboard: its generator, the ConfigMap wrapper and the preview renderer."""
