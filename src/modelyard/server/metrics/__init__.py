"""Prometheus metrics of the server: the gateway's counts, the controller's state, the GPUs and
every engine's own metrics, rendered by ``/metrics`` in the main process (``docs/gateway.md``)."""
