"""``syncedge`` subcommands of the runtime: ``simulate``, ``precheck``, ``doctor``, ``cache``."""

__all__: list[str] = []
