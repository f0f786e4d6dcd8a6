"""aiologger's file handler on ``overlapped.aiofiles``: many tasks log through
one ``AsyncFileHandler`` (one file object; per record ``await
stream.write(line); await stream.flush()``), and every record is in the
file exactly once. aiologger is a test dependency (scripts/test-python
installs it); without it the test says so and skips."""

import asyncio
import collections
import sys

import pytest

import overlapped.aiofiles

LIMIT = 120.0  # seconds: a hang is a failure


def _aiologger():
    try:
        import aiologger  # noqa: F401
        import aiologger.handlers.files as files
        from aiologger.formatters.base import Formatter
    except ImportError as e:
        print(f"SKIPPED: aiologger is not installed here ({e})", file=sys.stderr)
        pytest.skip(f"SKIPPED: aiologger is not installed here ({e})")
    return aiologger, files, Formatter


@pytest.mark.parametrize("mode", ["a", "w"])
def test_aiologger_file_handler_keeps_every_record_once(tmp_path, monkeypatch, mode):
    aiologger, files, Formatter = _aiologger()
    # The handler opens its file with the module-level name "aiofiles".
    monkeypatch.setattr(files, "aiofiles", overlapped.aiofiles)
    path = tmp_path / "app.log"
    tasks, per = 50, 200

    async def main():
        logger = aiologger.Logger(name=f"overlap-{mode}")
        handler = files.AsyncFileHandler(filename=str(path), mode=mode)
        handler.formatter = Formatter("%(message)s")
        logger.add_handler(handler)

        async def log(t):
            for i in range(per):
                await logger.info(f"task {t:03d} record {i:05d} " + "x" * ((t + i) % 70))

        await asyncio.gather(*(log(t) for t in range(tasks)))
        # The handler's file object is overlap's.
        assert type(handler.stream).__module__.startswith("overlapped.aiofiles")
        await logger.shutdown()

    asyncio.run(asyncio.wait_for(main(), LIMIT))
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"", "the last record is torn"
    counts = collections.Counter(lines[:-1])
    expected = {
        f"task {t:03d} record {i:05d} ".encode() + b"x" * ((t + i) % 70)
        for t in range(tasks)
        for i in range(per)
    }
    doubled = [ln for ln, n in counts.items() if n > 1]
    assert not doubled, f"{len(doubled)} records written more than once, e.g. {doubled[0]!r}"
    foreign = set(counts) - expected
    assert not foreign, f"{len(foreign)} torn or foreign lines, e.g. {sorted(foreign)[0]!r}"
    missing = expected - set(counts)
    assert not missing, f"{len(missing)} records missing"
    assert len(counts) == tasks * per == 10000
