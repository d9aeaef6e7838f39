"""The web console's page routes: sign-in, the pages (server-rendered shells whose scripts read the
REST API with the session), and the assets that ship in the package (no CDN)."""
