"""Backends: the plugin interface (``base``) and the built-in backends, loaded lazily."""
