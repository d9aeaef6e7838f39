"""A real OpenID Connect provider for the sign-in tests: django-oidc-provider in a small Django site.

Not a double: the provider's own discovery, authorization (with PKCE), token, JWKS and userinfo
endpoints, its login form, its users and groups. ``serve.py`` starts it; ``provider.py`` is how
the tests reach it (started by ``.ci/run`` through ``scripts/test-oidc-provider.sh``, or by the
fixture itself when run by hand).
"""
