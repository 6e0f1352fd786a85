"""A blocking distributed mutex on Redis, with a Rust core."""

from redmutex._redmutex import __version__

__all__ = ["__version__"]
