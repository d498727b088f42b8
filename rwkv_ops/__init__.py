"""Placeholder: this family's operator is not built yet."""
