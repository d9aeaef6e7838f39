"""Clusters on Ray: the head (``head.py``), joining workers (``join.py``), the workers with their
GPUs read by an NVML probe task on each node (``workers.py``, ``probe.py``), the cluster token
(``token.py``). Ray is imported only when a cluster is used."""
