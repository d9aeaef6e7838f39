"""Single sign-on through an OpenID Connect provider: authorization code with PKCE, discovery.

- ``settings.py``: the provider's issuer, client id and secret (env or file), scopes, the
  claim -> role mapping, read once at start;
- ``claims.py``: ``role_for_claims`` and the username a provider's account gets here;
- ``provider.py``: the relying party (authlib for the code flow and PKCE, joserfc for the ID
  token), with one error per way a provider can be misconfigured;
- ``routes.py``: ``/login/oidc`` and its callback, which open a console session.
"""
