"""Deployment presets: tested recipes (backend, version, GPUs, engine flags) per model and engine
version, in ``catalog.yaml``; ``modelyard deploy MODEL --preset NAME`` fills a deployment from one.
A library: it imports the estimator and the doctor, nothing of the server.

- ``catalog.py``: ``Preset``, ``load_presets``, ``get_preset``, ``presets_for(architecture)``
- ``fit.py``: ``fitting_gpus(preset, facts)``, the GPU types a preset fits per the estimator
"""

from modelyard.presets.catalog import Preset, get_preset, load_presets, presets_for

__all__ = ["Preset", "get_preset", "load_presets", "presets_for"]
