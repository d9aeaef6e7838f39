"""Helpers for tests and demos: tiny real model directories built offline."""
