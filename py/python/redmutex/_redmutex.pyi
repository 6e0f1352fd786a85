"""Type stubs for the native module; keep in step with py/src/lib.rs."""

__version__: str
