"""One completion hub per asyncio event loop (see ``src/hub.rs``).

The hub's reactor ring (io_uring) and its eventfd are watched with
``loop.add_reader``: completions reach the loop through its own selector,
with no Python thread per operation and no GIL held while the kernel works.
"""

from __future__ import annotations

import asyncio
import os
import weakref

from . import _native

_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _native.Hub]" = (
    weakref.WeakKeyDictionary()
)


def hub_for(loop: asyncio.AbstractEventLoop) -> "_native.Hub":
    """The hub of ``loop``, made and registered with it on first use."""
    hub = _hubs.get(loop)
    if hub is not None and not hub.closed:
        return hub
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
    # When the loop goes, the hub waits for what is still in flight on its
    # ring (a cancelled read, say) and stops.
    weakref.finalize(loop, hub.close)
    _hubs[loop] = hub
    return hub
