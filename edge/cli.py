"""The ``syncedge`` command line.

Subcommand groups are plug-ins of the ``syncedge.commands`` group (``edge/plugins.py``): the
packages above ``edge`` (``firmware_bridge``, ``export``) contribute theirs there, so ``edge``
imports neither (see docs/architecture.md). Each entry is a ``register(subparsers)``
function that adds one subparser whose ``func`` attribute takes the parsed
``argparse.Namespace`` and returns an exit code. Registration must stay cheap: heavy
libraries are imported inside ``func``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence

from edge import __version__
from edge.commands.helptext import STATE_ROOT_HELP
from edge.errors import EdgeError, Terminated, missing_dependency
from edge.plugins import entries, load

__all__ = ["Terminated", "build_parser", "join_negative_values", "main", "run_parsed"]

ENTRY_POINT_GROUP = "syncedge.commands"  # read through edge.plugins

#: Options whose value is a comma-separated list of numbers that may start with a minus
#: sign (joint readings): argparse would take ``-0.59,0.1`` for an option.
NUMBER_LIST_OPTIONS = ("--start-joints", "--joint-state")
_NEGATIVE = re.compile(r"^-\.?\d")


def join_negative_values(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--start-joints -0.5,...`` written as ``--start-joints=-0.5,...`` (the
    :data:`NUMBER_LIST_OPTIONS` followed by a value that starts with a minus sign and a
    digit), so that a joint state copied from a controller parses as given."""
    out = list(argv)
    i = 0
    while i < len(out) - 1:
        if out[i] in NUMBER_LIST_OPTIONS and _NEGATIVE.match(out[i + 1]):
            out[i:i + 2] = [f"{out[i]}={out[i + 1]}"]
        i += 1
    return out


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every installed subcommand group."""
    parser = argparse.ArgumentParser(
        prog="syncedge",
        description=(
            "Edge runtime for calibration-conditioned robot world models: record a visual "
            "calibration episode on a cell, cache its context, and simulate what actions "
            "will do in that cell, offline."
        ),
        epilog=STATE_ROOT_HELP,
    )
    parser.add_argument("--version", action="version", version=f"syncedge {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in sorted(entries(ENTRY_POINT_GROUP)):
        register = load(ENTRY_POINT_GROUP, name)
        register(sub)
    _describe_from_help(parser)
    return parser


def _describe_from_help(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand without a description its one-line help as one, so that its
    own ``--help`` says what it does (recursively, for command groups)."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, child in action.choices.items():
            if child.description is None and helps.get(name):
                text = helps[name]
                child.description = text[:1].upper() + text[1:] + (
                    "" if text.endswith(".") else ".")
            _describe_from_help(child)


#: Set when SIGTERM arrived (the exception a command re-raises may be its own).
_TERMINATED = {"signal": False}


def _on_sigterm(signum: int, frame: object) -> None:
    _TERMINATED["signal"] = True
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    SIGTERM is handled as Ctrl-C is (:class:`Terminated`) while the command runs, and the
    handler before it is put back on return. Ctrl-C while the command line is read (the
    plug-ins load) prints one line and gives 130. See :func:`run_parsed` for exit codes.
    """
    _TERMINATED["signal"] = False
    try:
        before = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave signals alone
        before = None
    try:  # every way out (a return, --help's SystemExit, an error) puts the handler back
        try:
            parser = build_parser()
            args = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None
                                                          else argv))
            logging.basicConfig(
                level=logging.DEBUG if args.verbose else logging.INFO,
                format="%(levelname)s %(name)s: %(message)s",
            )
            if not args.verbose:  # PyOpenGL (MuJoCo rendering) logs accelerators at INFO
                logging.getLogger("OpenGL").setLevel(logging.WARNING)
            if not getattr(args, "func", None):
                parser.print_help()
                return 2
        except KeyboardInterrupt:
            term = _TERMINATED["signal"]
            print(f"syncedge: {'terminated' if term else 'interrupted'} before the command "
                  f"started; nothing was written", file=sys.stderr)
            return 143 if term else 130
        return run_parsed(args)
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def run_parsed(args: argparse.Namespace) -> int:
    """Run a parsed subcommand (``args.func``) and return its exit code.

    Project errors (:class:`edge.errors.EdgeError`), file errors and a missing optional
    library (named with its extra, :func:`edge.errors.missing_dependency`) print one line on
    stderr and give exit code 2 (an error class's own ``exit_code`` where it has one:
    75 for a held bundle lock, :class:`edge.bundle.format.BundleBusyError`); Ctrl-C prints one line and gives 130, SIGTERM
    (:class:`Terminated`, through :func:`main`) 143; a closed stdout (the
    output piped into ``head``) ends quietly with 141; anything else is a bug: its traceback
    is printed and the exit code is :data:`EXIT_INTERNAL_ERROR` (70), never 1, which
    commands use for a result (``precheck``: no candidate passes; ``calibrate check``: the
    coverage failed).
    """
    _TERMINATED["signal"] = False
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        term = isinstance(exc, Terminated) or _TERMINATED["signal"]
        print(f"syncedge {args.command}: {'terminated (SIGTERM)' if term else 'interrupted'} "
              f"(outputs are written all at once, so none was left half-written)",
              file=sys.stderr)
        return 143 if term else 130
    except BrokenPipeError:  # the reader went away (``syncedge ... | head``): stop quietly
        try:  # the interpreter's last flush of stdout then has nowhere to fail
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a file descriptor (captured)
            pass
        return 141  # 128 + SIGPIPE, as a shell pipeline reports it
    except (EdgeError, OSError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, EdgeError) \
                and not getattr(exc, "filename", None):
            # an OSError of ours (device gone, timeout) is a project error (one line, above);
            # one without a file is not expected here
            return _internal_error(args)
        print(f"syncedge {args.command}: error: {_file_error(exc)}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except ImportError as exc:
        hint = missing_dependency(exc, _command_line(args))
        if hint is None:
            return _internal_error(args)
        print(f"syncedge {args.command}: error: {hint}", file=sys.stderr)
        return 2
    except Exception:
        return _internal_error(args)


#: The exit code of an unexpected error (a bug): EX_SOFTWARE of BSD's sysexits.h, apart
#: from the 1 that commands give as a result.
EXIT_INTERNAL_ERROR = 70


def _internal_error(args: argparse.Namespace) -> int:
    """Print the exception being handled with its traceback and say it is a bug."""
    import traceback

    traceback.print_exc()
    print(f"syncedge {args.command}: internal error (the traceback above is a bug; please "
          f"report it with the command line): exit {EXIT_INTERNAL_ERROR}", file=sys.stderr)
    return EXIT_INTERNAL_ERROR


def _command_line(args: argparse.Namespace) -> str:
    """The command that ran, ``"syncedge bundle keys add"``: each group stores its chosen
    subcommand as ``<name>_command`` (``bundle_command``, then ``keys_command``)."""
    words = [str(args.command)]
    while isinstance(getattr(args, f"{words[-1]}_command", None), str):
        words.append(getattr(args, f"{words[-1]}_command"))
    return " ".join(["syncedge", *words])


def _file_error(exc: BaseException) -> str:
    """A file-system error as 'PATH: what is wrong; what was expected'."""
    name = getattr(exc, "filename", None)
    if isinstance(exc, EdgeError) or not name:
        return str(exc)
    if isinstance(exc, IsADirectoryError):
        return f"{name}: is a folder; expected a file"
    if isinstance(exc, NotADirectoryError):
        return f"{name}: a file where a folder is expected"
    if isinstance(exc, FileExistsError):
        why = exc.strerror if exc.strerror and exc.strerror != "File exists" else "already exists"
        return f"{name}: {why}; give another path or remove it"
    if isinstance(exc, FileNotFoundError):
        return f"{name}: no such file or folder"
    if isinstance(exc, PermissionError):
        return f"{name}: permission denied"
    return f"{name}: {getattr(exc, 'strerror', None) or exc}"


if __name__ == "__main__":
    sys.exit(main())
