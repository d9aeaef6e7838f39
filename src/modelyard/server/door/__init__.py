"""Bounds at the door: what a request may weigh before any work is done for it.

Every limit is checked before authentication and before a body is read, so that a client
without credentials costs the server at most the limit:

- the request line and headers (bytes and count): ``http_protocol.py``, inside uvicorn's HTTP
  parser, answered ``431``; the time they may take, and how many connections may be sending
  theirs at once: ``http_protocol.py`` too, answered ``408``;
- the body, per route (``/v1``, ``/api/v1``, the YAML import): ``body_limit.py``, an ASGI layer in
  front of everything else, answered ``413`` naming the limit, from ``Content-Length`` before a
  byte of the body is read, or as soon as a chunked body passes it;
- JSON nesting: ``json_depth.py``, checked as the body arrives (the REST API's bodies at the
  door, the gateway's after the key), answered ``400``.

The limits themselves are settings (``limits.py``), each with its environment variable.
"""
