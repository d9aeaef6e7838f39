"""One TLS context for every HTTP client a test process makes.

``httpx.Client()`` builds a TLS context of its own unless given one, loading certifi's CA bundle:
about 25 ms of CPU per client. Test helpers make a client per call, and a wait polls every 100 ms
(``ServeProcess.answering`` while a server starts, a deployment's state until it runs), so a
waiting test spent a quarter of a core on CA bundles, on a host whose cores the servers it waits
for need. The servers under test speak plain HTTP; the context is the one httpx would build,
made once per process (an ``ssl.SSLContext`` may be shared by clients and threads).

Usage::

    httpx.Client(base_url=url, verify=shared_tls_context())
    httpx.get(url, verify=shared_tls_context())
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CA bundle, verifying), built once per process."""
    return httpx.create_ssl_context()
