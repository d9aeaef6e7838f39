"""``modelyard tune``: which engine and which parameters serve a workload best on these GPUs.

The candidates (``space.py``) are pruned before anything starts by the doctor and the estimator
(``pruning.py``), then measured with the bench through the server (``server_deployer.py``,
``measure.py``) by successive halving under a budget (``tuner.py``), every step kept in a journal
so that an interrupted tune resumes (``journal.py``); ``report.py`` says who won, for which SLO,
and how to deploy it. ``session.run_tune`` puts them together. See docs/tune.md.
"""
