"""Shared fixtures. The engine's driver is chosen once per process by
OVERLAP_DRIVER (``uring`` or ``pool``); ./scripts/test runs the suite once
for each."""

import pytest

# The real aiofiles, for the differential tests (test_aiofiles.py), imported
# before aiofiles_upstream/conftest.py points the name "aiofiles" at
# overlapped.aiofiles for aiofiles' own test suite.
import aiofiles
import aiofiles.os  # noqa: F401
import aiofiles.ospath  # noqa: F401
import aiofiles.tempfile  # noqa: F401
import aiofiles.threadpool  # noqa: F401

import overlapped
import overlap_test_helpers
from overlap_test_helpers import EXPECTED_DRIVER, pattern

overlap_test_helpers.REAL_AIOFILES = aiofiles


def pytest_report_header(config):
    d = overlapped.driver()
    return f"overlap driver: {d['kind']} (fallback: {d['fallback']}); OVERLAP_DRIVER={EXPECTED_DRIVER}"


@pytest.fixture
def data(tmp_path):
    """A 1 MiB file of known content on a real file system (tmp_path)."""
    content = pattern(1 << 20)
    p = tmp_path / "data.bin"
    p.write_bytes(content)
    return p, content


@pytest.fixture
def uring():
    return overlapped.driver()["kind"] == "uring"
