"""aiofiles' own test suite, run unchanged against overlapped.aiofiles: every
``aiofiles`` module name below this directory is overlap's drop-in. The
differential tests (../test_aiofiles.py) keep their own reference to the
real package (../conftest.py imports it first).

What is whose: every file of this directory but this conftest.py (overlap's)
is aiofiles' ``tests/`` directory of the aiofiles 25.1.0 release, copied
byte for byte from its PyPI sdist (aiofiles-25.1.0.tar.gz, sha256
a8d728f0a29de45dc521f18f07297428d56992a742f0cd2701ba86e44d23d5b2):
Copyright 2016 Tin Tvrtkovic and the aiofiles authors, under the Apache
License 2.0 (LICENSE and NOTICE beside this file, aiofiles' own). Two of
its tests are skipped here, below, each saying why.
"""

import os
import sys

import pytest

import overlapped.aiofiles
import overlapped.aiofiles.base
import overlapped.aiofiles.os
import overlapped.aiofiles.ospath
import overlapped.aiofiles.tempfile
import overlapped.aiofiles.tempfile.temptypes
import overlapped.aiofiles.threadpool
import overlapped.aiofiles.threadpool.binary
import overlapped.aiofiles.threadpool.text
import overlapped.aiofiles.threadpool.utils

for _name, _mod in list(sys.modules.items()):
    if _name.startswith("overlapped.aiofiles"):
        sys.modules["aiofiles" + _name[len("overlapped.aiofiles") :]] = _mod


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.name == "test_abspath" and "aiofiles_upstream" in str(item.fspath):
            item.add_marker(
                pytest.mark.skip(
                    reason="SKIPPED: aiofiles' test_abspath assumes its repository layout (./tests/resources from the current directory)"
                )
            )
        if item.name == "test_access" and os.geteuid() == 0:
            item.add_marker(
                pytest.mark.skip(
                    reason="SKIPPED: aiofiles' test_access expects permission checks, which root bypasses (real aiofiles fails it as root too)"
                )
            )
