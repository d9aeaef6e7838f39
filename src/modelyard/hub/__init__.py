"""Model files from hubs, checked: Hugging Face and ModelScope listings, resumable verified
downloads, manifests and offline bundles. A library: it imports nothing from server, services,
control or cli; ``modelyard.downloads`` runs it as server-owned tasks.

- ``reference.py``: ``hf://ORG/NAME[@REV]`` / ``ms://...`` -> ``ModelReference``
- ``files.py``: ``RemoteFile``, ``RepoListing``, ``select_files`` (include / exclude / quantisation)
- ``source.py``: the ``HubSource`` protocol; ``huggingface.py``, ``modelscope.py`` implement it
- ``transfer.py``: one file (resume with Range, stall timeout, back-off, hash check, stop)
- ``download.py``: a repository's files in parallel into a model directory
- ``disk.py``: the disk space check before the first byte
- ``manifest.py``: every file with size and SHA-256; cheap and full checks of a directory
- ``bundle.py``: export and import of offline bundles (a tar with the manifest first)
"""
