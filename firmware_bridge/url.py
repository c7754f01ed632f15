"""Open a joint stream from a URL (dispatch by scheme, like pyserial's ``serial_for_url``).

==============================  ===========================================================
URL                             transport
==============================  ===========================================================
``dxl://PORT?ids=1-6``          Dynamixel Protocol 2.0 sync read (:mod:`.dynamixel`)
``sts://PORT?ids=1-6``          Feetech STS/SCS sync read (:mod:`.feetech`)
``frame://PORT?joints=6``       COBS + CRC32 framed controller stream (:mod:`.framed`)
``ethercat://IFACE``            EtherCAT CiA 402 drives through pysoem (:mod:`.ethercat`)
``replay://FILE``               a joint log written by ``syncedge bridge record`` (:mod:`.replay`)
``loop://?joints=6``            a synthetic device for tests and demos (:mod:`.loop`)
``sim://cell?...``              the virtual cell's controller (``export/cells/virtual.py``)
``trace+URL``                   any of the above, logging every sample (:mod:`.trace`)
==============================  ===========================================================

``PORT`` is a device path or any pyserial URL (``/dev/ttyUSB0``, ``spy:///dev/ttyUSB0``).
Each transport validates its own query options and quotes its expected form on error.

Schemes are plug-ins of the ``syncedge.joint_streams`` group (``edge/plugins.py``): the
transports above and the virtual cell's stream are the project's own entries; another
distribution adds a scheme by declaring a ``JointStream`` subclass with ``from_url`` and
``URL_FORM`` in that group.
"""

from __future__ import annotations

import builtins
import math
from typing import Any
from urllib.parse import parse_qsl

from edge.plugins import entries, load

from .errors import UrlError
from .stream import JointStream

__all__ = ["GROUP", "Options", "parse_ids", "split_url", "stream_for_url", "transports"]

#: The plug-in group of the transports: scheme -> ``"module:Class"``, imported on first use
#: (so optional SDKs stay lazy).
GROUP = "syncedge.joint_streams"


def transports() -> dict[str, str]:
    """Every known scheme: scheme -> ``"module:Class"`` (see the module docstring)."""
    return entries(GROUP)


def split_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split ``scheme://target?k=v&...`` into ``(scheme, target, options)``.

    The target keeps any nested ``://`` (``frame://spy:///dev/ttyACM0``). Raises
    :class:`UrlError` if there is no scheme or an option repeats.
    """
    if "://" not in url:
        raise UrlError(f"URL {url!r}: expected 'scheme://target?options', found no scheme; "
                       f"known schemes: {', '.join(sorted(transports()))}")
    scheme, rest = url.split("://", 1)
    target, _, query = rest.rpartition("?") if "?" in rest else (rest, "", "")
    opts: dict[str, str] = {}
    for k, v in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if k in opts:
            raise UrlError(f"URL {url!r}: option {k!r} given twice, expected once")
        opts[k] = v
    return scheme.lower(), target, opts


def parse_ids(text: str) -> list[int]:
    """Parse ``"1-3,7"`` into ``[1, 2, 3, 7]``.

    Raises:
        UrlError: naming the part that is not an id or a low-high range, or ids that
            repeat or lie outside 0..252.
    """
    ids: list[int] = []
    for part in text.split(","):
        try:
            lo, hi = (int(x) for x in part.split("-", 1)) if "-" in part else (int(part),) * 2
        except ValueError:
            raise UrlError(f"ids={text!r}: expected a list like '1-6' or '1,2,5', found the "
                           f"part {part!r}, which is neither an id nor a low-high range") \
                from None
        if hi < lo:
            raise UrlError(f"ids={text!r}: expected a list like '1-6' or '1,2,5', found the "
                           f"range {part!r}, which runs from high to low (write '{hi}-{lo}')")
        ids.extend(range(lo, hi + 1))
    if len(set(ids)) != len(ids) or not ids or min(ids) < 0 or max(ids) > 252:
        raise UrlError(f"ids={text!r}: expected distinct ids in 0..252, found {ids}")
    return ids


class Options:
    """Typed access to a URL's query options; unknown leftovers are an error.

    Args:
        url: the whole URL (for messages).
        options: the parsed query.
        form: the transport's expected URL form, quoted in errors.
    """

    def __init__(self, url: str, options: dict[str, str], form: str):
        self.url, self._opts, self.form = url, dict(options), form

    def _fail(self, key: str, expected: str, found: str) -> UrlError:
        return UrlError(f"URL {self.url!r}: option {key!r} expected {expected}, found {found!r}; "
                        f"form: {self.form}")

    def str(self, key: str, default: str | None = None) -> str | None:
        """Pop a string option."""
        return self._opts.pop(key, default)

    # The methods below are named str/int/float, which shadow the builtins in later
    # annotations of this class body; those annotations name them as builtins.*.
    def int(self, key: builtins.str, default: builtins.int, lo: builtins.int | None = None,
            hi: builtins.int | None = None) -> builtins.int:
        """Pop an integer option within ``[lo, hi]``."""
        raw = self._opts.pop(key, None)
        if raw is None:
            return default
        try:
            v = int(raw, 0)
        except ValueError:
            raise self._fail(key, "an integer", raw) from None
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            want = f"in [{lo}, {hi}]" if lo is not None and hi is not None else \
                f">= {lo}" if lo is not None else f"<= {hi}"
            raise self._fail(key, f"an integer {want}", raw)
        return v

    def float(self, key: builtins.str, default: builtins.float,
              lo: builtins.float | None = None) -> builtins.float:
        """Pop a float option ``>= lo``."""
        raw = self._opts.pop(key, None)
        if raw is None:
            return default
        try:
            v = float(raw)
        except ValueError:
            raise self._fail(key, "a number", raw) from None
        if not math.isfinite(v):
            raise self._fail(key, "a finite number", raw)
        if lo is not None and not v >= lo:
            raise self._fail(key, f"a number >= {lo}", raw)
        return v

    def ids(self, key: builtins.str = "ids",
            default: builtins.str | None = None) -> list[builtins.int]:
        """Pop a servo id list (see :func:`parse_ids`); required when ``default`` is None."""
        raw = self._opts.pop(key, default)
        if raw is None:
            raise self._fail(key, "a servo id list like '1-6'", "nothing")
        try:
            return parse_ids(raw)
        except UrlError as exc:
            raise UrlError(f"URL {self.url!r}: option {exc}; form: {self.form}") from None

    def finish(self) -> None:
        """Raise :class:`UrlError` naming any option nobody took."""
        if self._opts:
            k = sorted(self._opts)[0]
            raise self._fail(k, "a known option", f"{k}={self._opts[k]}")


def stream_for_url(url: str, *, do_not_open: bool = False, **overrides: Any) -> JointStream:
    """Make (and by default open) the joint stream a URL names.

    Args:
        url: see the table in this module's docstring; ``trace+`` may prefix any scheme.
        do_not_open: return the stream unopened.
        **overrides: keyword arguments for the transport class (``read_timeout_s=...``).

    Returns:
        A :class:`~firmware_bridge.stream.JointStream`.

    Raises:
        UrlError: unknown scheme or bad option; MissingDependencyError: SDK absent;
        DeviceGoneError: nothing at the path.
    """
    scheme, target, opts = split_url(url)
    if scheme.startswith("trace+"):
        from .trace import TraceStream

        inner_url = url.split("+", 1)[1]
        trace_path = opts.pop("trace_path", None)
        inner_query = "&".join(f"{k}={v}" for k, v in opts.items())
        inner_url = inner_url.split("?", 1)[0] + (f"?{inner_query}" if inner_query else "")
        inner = stream_for_url(inner_url, do_not_open=True, **overrides)
        stream: JointStream = TraceStream(inner, trace_path=trace_path)
    else:
        known = transports()
        if scheme not in known:
            raise UrlError(f"URL {url!r}: expected one of the schemes "
                           f"{', '.join(sorted(known))} (optionally with 'trace+'), "
                           f"found {scheme!r}")
        cls = load(GROUP, scheme, f"the {scheme}:// transport")
        stream = cls.from_url(url, target, Options(url, opts, cls.URL_FORM), **overrides)
    if not do_not_open:
        stream.open()
    return stream
