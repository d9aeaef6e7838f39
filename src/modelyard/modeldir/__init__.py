"""modeldir."""
