"""Device emulators used by the tests and the benchmark (no hardware needed)."""

__all__: list[str] = []
