"""Model tasks run by the server: pulls from hubs, bundle imports and exports (``DownloadManager``).

- ``options.py``: ``DownloadOptions``, every setting with its environment variable (``SETTINGS``)
- ``manager.py``: ``DownloadManager``, started and stopped by the server's lifespan
- ``runners.py``: what each task kind does in its thread
- ``records.py``: the task rows (``model_tasks``) and the models they fill
- ``progress.py``: ``TaskProgress``, live per-file and total bytes, rates and time left

Imports point one way: this package uses ``hub``, ``modeldir`` and ``store``; the API
(``services/model_tasks.py``, ``server/api/tasks.py``) uses it.
"""

from modelyard.downloads.manager import DownloadManager
from modelyard.downloads.options import SETTINGS, DownloadOptions

__all__ = ["SETTINGS", "DownloadManager", "DownloadOptions"]
