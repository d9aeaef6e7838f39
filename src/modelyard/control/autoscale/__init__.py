"""Autoscaling on load: a deployment's replicas follow one of its engines' signals (``policy.py``
decides, ``loop.py`` feeds it and applies its decisions; ``config.py`` is what a user writes)."""
