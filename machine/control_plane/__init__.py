"""Machine programs: see machine/__init__.py."""
