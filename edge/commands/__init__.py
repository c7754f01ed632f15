"""``syncedge`` subcommands of the runtime: ``simulate``, ``precheck``, ``doctor``."""

__all__: list[str] = []
