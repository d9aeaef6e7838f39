"""Clusters on Ray: the head ``modelyard serve --cluster`` runs (``head.py``) and the server's
hold on the cluster (``server_cluster.py``), hosts joining with ``modelyard worker join``
(``join.py``; what both share about ``ray start``: ``ray_processes.py``), the workers with their
GPUs read by an NVML probe task on each node (``workers.py``, ``probe.py``), the cluster token
(``token.py``), and the models on the workers: what runs there (``model_copies.py``), the survey of
which worker has which model (``model_survey.py``), pushes (``model_push.py``). Ray is imported
only when a cluster is used."""
