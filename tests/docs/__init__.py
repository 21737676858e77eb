"""The README and the docs tell the truth: their commands work, the files they name exist."""
