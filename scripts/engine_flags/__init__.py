"""Readers of engine wheels for scripts/extract_engine_flags.py (ast only, nothing imported)."""
