"""server/gateway."""
