"""Subcommand groups of the ``syncedge`` command that live in ``edge`` (each module has a
``register(subparsers)`` listed under the ``syncedge.commands`` entry points)."""
