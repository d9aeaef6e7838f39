"""modelyard: deploy, verify, benchmark and operate LLM inference engines behind one gateway."""

__version__ = "0.1.0"
