"""server/api."""
