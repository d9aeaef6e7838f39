"""Model files from hubs, checked: Hugging Face and ModelScope listings, resumable verified
downloads, manifests and offline bundles. A library: it imports nothing from server, services,
control or cli; ``modelyard.downloads`` runs it as server-owned tasks.

- ``reference.py``: ``hf://ORG/NAME[@REV]`` / ``ms://...`` -> ``ModelReference``
- ``identifiers.py``: the rules of repository ids and revisions (``InvalidModelReference``)
- ``files.py``: ``RemoteFile``, ``RepoListing``, ``select_files`` (include / exclude / quantisation)
- ``source.py``: the ``HubSource`` protocol; ``huggingface.py``, ``modelscope.py`` implement it
- ``transfer.py``: one file (resume with Range, stall timeout, back-off, hash check, stop)
- ``download.py``: a repository's files in parallel into a model directory
- ``disk.py``: the disk space check before the first byte
- ``manifest.py``: every file with size and SHA-256; cheap and full checks of a directory
- ``verification.py``: how each file was checked (SHA-256, git blob id, size only) and the summary
- ``bundle.py``: export and import of offline bundles (a tar with the manifest first)
"""
