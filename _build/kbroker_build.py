"""The build backend: setuptools, with the broker's packages bundled under ``kbroker/_app`` in wheels.

An installed wheel exposes one import name, ``kbroker``; the broker's own packages (``broker``,
``protocol``, ``storage``, ``tools``, ...) are files under ``kbroker/_app`` that only kbroker's
processes put on their path (see ``kbroker/layout.py``). Editable installs of a checkout keep
them importable at the top level, as the repository's tests and tools use them.
"""

from __future__ import annotations

import contextlib
import os
import shutil

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every other hook as setuptools has it)

LAYOUT_ENV = "KBROKER_WHEEL_LAYOUT"


@contextlib.contextmanager
def _bundled():
    os.environ[LAYOUT_ENV] = "bundled"
    shutil.rmtree("build", ignore_errors=True)  # no files of an earlier layout in the wheel
    try:
        yield
    finally:
        del os.environ[LAYOUT_ENV]


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    with _bundled():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with _bundled():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
