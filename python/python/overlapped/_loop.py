"""One completion hub per asyncio event loop (see ``src/hub.rs``).

The hub's reactor ring (io_uring) and its eventfd are watched with
``loop.add_reader``: completions reach the loop through its own selector,
with no Python thread per operation and no GIL held while the kernel works.

A hub lives as long as its loop runs, not until its loop is collected:

- Closing the loop closes its hub. The hub wraps ``close`` on the loop
  object itself (an attribute of the instance, so the loop's class and other
  loops are untouched; any loop whose instances take attributes qualifies:
  asyncio's, uvloop's ``Loop``, most subclasses). After the loop's own
  ``close`` returns, the hub hands its ring to the engine, which completes
  what is still in flight (a cancelled read, a read of a pipe nobody writes
  yet) on a thread of its own: the operations release their share of the
  in-flight budget and their buffers when they complete, and the hub lets go
  of their asyncio futures at once, so nothing of overlap's keeps the loop
  alive. A loop closed through another path than its ``close`` attribute,
  or one whose instances take no attributes, closes its hub when it is
  collected (``weakref.finalize``), as does a loop never closed.
- In a child made by ``os.fork``, the hubs inherited from the parent are
  forgotten (``os.register_at_fork``): the child never touches their rings
  (whose completions belong to the parent), the asyncio futures of the
  operations it inherited in flight fail at once with ``RuntimeError``, and
  the child's own loops get hubs of their own on its own engine.
"""

from __future__ import annotations

import asyncio
import os
import weakref

from . import _native

# The hub of each loop, with the finalizer that closes it when the loop is
# collected.
_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple]" = (
    weakref.WeakKeyDictionary()
)


class _CloseHook:
    """Stands in for ``loop.close`` (an instance attribute): runs the loop's
    own ``close``, then closes the loop's hub, and takes itself off the loop.

    Holds the loop strongly (a plain cycle through the loop's ``__dict__``,
    which Python's collector sees, and which ``close`` removes), so that it
    still works when called from the loop's own ``__del__``."""

    __slots__ = ("_loop", "_inner")

    def __init__(self, loop, inner):
        self._loop = loop
        # The instance's previous ``close`` attribute (someone else's
        # wrapper), or None for the class's method.
        self._inner = inner

    def __call__(self):
        loop = self._loop
        if self._inner is not None:
            self._inner()
        else:
            type(loop).close(loop)
        if loop.is_closed():
            if loop.__dict__.get("close") is self:
                if self._inner is not None:
                    loop.__dict__["close"] = self._inner
                else:
                    del loop.__dict__["close"]
            _loop_closed(loop)

    def __repr__(self):
        return f"<overlap hook of {self._loop!r}.close>"


def _hook_close(loop) -> None:
    """Wraps ``loop.close`` so that closing the loop closes its hub; does
    nothing for a loop whose instances take no attributes (its hub then
    closes when it is collected)."""
    try:
        d = loop.__dict__
    except AttributeError:
        return
    inner = d.get("close")
    if isinstance(inner, _CloseHook):
        return
    try:
        loop.close = _CloseHook(loop, inner)
    except (AttributeError, TypeError):
        pass


def _loop_closed(loop) -> None:
    """The loop closed: so does its hub (see ``Hub.close``), and the
    ``at_loop_end`` callbacks run."""
    entry = _hubs.pop(loop, None)
    if entry is not None:
        hub, finalizer = entry
        finalizer.detach()
        hub.close()
    _run_at_loop_end(loop)


#: Called with a loop that closed (or None for one collected unclosed):
#: ``overlapped.aiofiles`` writes there the bytes its file objects gathered on
#: that loop, as the contract asks of a loop's end.
_at_loop_end: list = []


def at_loop_end(callback) -> None:
    """Registers ``callback(loop_or_None)``, run when a loop with a hub
    closes (the loop) or is collected unclosed (None)."""
    _at_loop_end.append(callback)


def _run_at_loop_end(loop) -> None:
    for callback in list(_at_loop_end):
        try:
            callback(loop)
        except Exception:  # noqa: BLE001 (a loop's end must go on)
            import traceback

            traceback.print_exc()


def _loop_collected(hub) -> None:
    hub.close()
    _run_at_loop_end(None)


def hub_for(loop: asyncio.AbstractEventLoop) -> "_native.Hub":
    """The hub of ``loop``, made and registered with it on first use."""
    entry = _hubs.get(loop)
    if entry is not None and not entry[0].closed:
        return entry[0]
    if loop.is_closed():
        raise RuntimeError("Event loop is closed")
    hub = _native.Hub()
    try:
        if hub.ring_fd >= 0:
            loop.add_reader(hub.ring_fd, hub.reap)
            # Batch submissions: once a few operations are in flight, the
            # tasks of one loop iteration queue their entries and a
            # callback scheduled with loop.call_soon submits them together.
            hub.use_loop(loop)
        if os.environ.get("OVERLAP_PY_WAKE") == "threadsafe":
            # For measurement only: wake-ups from other threads through
            # call_soon_threadsafe (the GIL on the waking thread) instead of
            # the eventfd.
            hub.use_call_soon_threadsafe(loop.call_soon_threadsafe, hub.on_threadsafe)
        else:
            loop.add_reader(hub.event_fd, hub.on_event)
    except BaseException:
        hub.close()
        raise
    # Closing the loop closes the hub; so does the loop's collection (a loop
    # never closed, or closed another way).
    _hook_close(loop)
    finalizer = weakref.finalize(loop, _loop_collected, hub)
    _hubs[loop] = (hub, finalizer)
    return hub


def _after_fork_in_child() -> None:
    """In a child made by fork: forget the parent's hubs (see the module
    docs) without closing them the usual way, which would hand the parent's
    rings over to the engine."""
    global _hubs
    inherited = list(_hubs.values())
    _hubs = weakref.WeakKeyDictionary()
    for hub, finalizer in inherited:
        finalizer.detach()
        hub._forget_after_fork()
    _native._forget_hubs_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
