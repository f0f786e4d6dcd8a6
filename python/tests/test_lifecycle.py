"""Hubs outlive neither their loop nor their process.

1. A loop closed with an operation in flight: the hub learns that its loop
   closed and hands its ring to the engine, which completes what is in
   flight; the operation's budget share and buffer are released, and the
   loop can be collected.
2. ``os.fork``: a child never touches the rings it inherited (exiting does
   not wait for, or steal, the parent's completions), gets fresh hubs if it
   uses overlap, and an operation it inherited in flight fails at once with
   a clear error if it awaits it.

Each scenario runs in a subprocess with a time limit (``run_script``): a
hang fails the test instead of the suite. The slow operation is a read of a
FIFO, which completes only once something is written to it.
"""

import pytest

from overlap_test_helpers import run_script

COMMON = """
import asyncio, faulthandler, gc, os, sys, time, weakref
# A hang prints every thread's stack and fails the scenario. (The watchdog
# thread does not survive a fork, so it is stopped around one and started
# again on both sides.)
def watchdog():
    faulthandler.dump_traceback_later(25, exit=True)
watchdog()
os.register_at_fork(
    before=faulthandler.cancel_dump_traceback_later,
    after_in_parent=watchdog,
    after_in_child=watchdog,
)
import overlapped

D, VARIANT = sys.argv[1], sys.argv[2]
FIFO = os.path.join(D, "fifo")
OTHER = os.path.join(D, "other.bin")
os.mkfifo(FIFO)
with open(OTHER, "wb") as g:
    g.write(b"other file")

def feed_fifo(data):
    w = os.open(FIFO, os.O_WRONLY | os.O_NONBLOCK)  # the reader is open
    os.write(w, data)
    os.close(w)

async def read_other():
    async with overlapped.open(OTHER, "rb") as f:
        return await f.read_at(100, 0)
"""

CLOSED_LOOP = COMMON + """
buf = bytearray(5)

async def start_read():
    f = await overlapped.open(FIFO, "r+b")
    fut = f.readinto_at(buf, 0)  # nobody writes yet: stays in flight
    if VARIANT == "cancelled":
        await fut  # cancelled below
    # "returned": the task returns, the read still in flight

async def first():
    t = asyncio.ensure_future(start_read())
    await asyncio.sleep(0.1)
    if VARIANT == "cancelled":
        t.cancel()
    try:
        await t
    except asyncio.CancelledError:
        pass

if sys.argv[3] == "uvloop":
    import uvloop
    loop = uvloop.new_event_loop()
else:
    loop = asyncio.new_event_loop()
loop.run_until_complete(first())
loop.close()
loop_ref = weakref.ref(loop)
del loop

# The writer writes only now: the read completes in the kernel after its
# loop closed.
feed_fifo(b"hello")

# OVERLAP_MAX_INFLIGHT_OPS=1: this waits for the read's budget share.
assert asyncio.run(read_other()) == b"other file"

# The read's buffer is released (no export left) once it completed, and the
# kernel's bytes are in it.
deadline = time.monotonic() + 10
while True:
    try:
        buf.extend(b"!")  # BufferError while exported
        break
    except BufferError:
        assert time.monotonic() < deadline, "the read's buffer is still exported"
        time.sleep(0.01)
assert bytes(buf) == b"hello!", buf

# And nothing keeps the first loop alive.
gc.collect()
assert loop_ref() is None, [type(r) for r in gc.get_referrers(loop_ref())]
print("ok")
"""


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
@pytest.mark.parametrize("variant", ["returned", "cancelled"])
def test_loop_closed_with_a_read_in_flight_releases_it(tmp_path, variant, loop_kind):
    if loop_kind == "uvloop":
        pytest.importorskip("uvloop", reason="SKIPPED: uvloop is not installed (scripts/test-python installs it)")
    out, _ = run_script(
        CLOSED_LOOP,
        tmp_path,
        tmp_path,
        variant,
        loop_kind,
        env={"OVERLAP_MAX_INFLIGHT_OPS": "1"},
    )
    assert out.strip() == "ok"


FORK = COMMON + """
loop = asyncio.new_event_loop()

async def start_read():
    f = await overlapped.open(FIFO, "r+b")
    return f, f.read_at(5, 0)  # in flight until the FIFO is written

f, fut = loop.run_until_complete(start_read())
loop.run_until_complete(asyncio.sleep(0.05))
assert not fut.done()

pid = os.fork()
if pid == 0:
    try:
        if VARIANT == "child-asyncio":
            # A child that uses overlap gets hubs of its own.
            assert asyncio.run(read_other()) == b"other file"
        elif VARIANT == "child-awaits":
            # The read it inherited belongs to the parent: awaiting it fails
            # at once, with an error that says so.
            try:
                loop.run_until_complete(asyncio.wait_for(fut, 5))
            except RuntimeError as e:
                assert "fork" in str(e), e
            else:
                raise AssertionError("the inherited read completed in the child")
            loop.close()
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(1)
    sys.exit(0)  # a normal exit: atexit handlers, finalizers, teardown

# The child exits on its own, while the parent's read is still in flight.
deadline = time.monotonic() + 10
status = None
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.01)
else:
    print("the child did not exit while the parent's read was in flight", flush=True)
    feed_fifo(b"hello")
    _, status = os.waitpid(pid, 0)
    sys.exit(2)
assert os.waitstatus_to_exitcode(status) == 0, status

# Now the parent's read completes, here, with the right bytes.
feed_fifo(b"hello")
assert loop.run_until_complete(asyncio.wait_for(fut, 10)) == b"hello"
async def close_file():
    await f.close()
loop.run_until_complete(close_file())
# And the parent goes on using overlap.
assert loop.run_until_complete(read_other()) == b"other file"
loop.close()
print("ok")
"""


@pytest.mark.parametrize("variant", ["child-exits", "child-asyncio", "child-awaits"])
def test_fork_with_a_read_in_flight(tmp_path, variant):
    out, _ = run_script(FORK, tmp_path, tmp_path, variant)
    assert out.strip() == "ok"


FORK_IN_LOOP = COMMON + """
# Forking from inside a running loop (a task calls os.fork) with a read in
# flight: the child leaves the loop at once and exits normally.
async def main():
    f = await overlapped.open(FIFO, "r+b")
    fut = f.read_at(5, 0)
    await asyncio.sleep(0.05)
    pid = os.fork()
    if pid == 0:
        os._exit(0) if VARIANT == "hard" else sys.exit(0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        await asyncio.sleep(0.01)
    else:
        feed_fifo(b"hello")
        raise AssertionError("the child did not exit")
    assert os.waitstatus_to_exitcode(status) == 0, status
    feed_fifo(b"hello")
    assert await asyncio.wait_for(fut, 10) == b"hello"
    await f.close()

asyncio.run(main())
print("ok")
"""


@pytest.mark.parametrize("variant", ["normal", "hard"])
def test_fork_inside_a_running_loop(tmp_path, variant):
    out, _ = run_script(FORK_IN_LOOP, tmp_path, tmp_path, variant)
    assert out.strip() == "ok"


def test_closing_the_loop_closes_its_hub_at_once():
    """No collection needed: ``loop.close()`` closes the hub, and leaves the
    loop as it was (the hook takes itself off)."""
    import asyncio

    from overlapped import _loop

    async def use():
        return _loop.hub_for(asyncio.get_running_loop())

    loop = asyncio.new_event_loop()
    hub = loop.run_until_complete(use())
    assert "close" in vars(loop)

    async def close_while_running():
        with pytest.raises(RuntimeError):
            loop.close()

    loop.run_until_complete(close_while_running())
    assert not hub.closed, "a close that failed leaves the hub open"
    loop.close()
    assert hub.closed
    assert "close" not in vars(loop)
    loop.close()  # again: nothing happens
