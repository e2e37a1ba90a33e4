"""Which packages a build installs; the rest of the metadata is in pyproject.toml.

A wheel (``_build/kbroker_build.py`` sets the layout) holds ``kbroker`` and, under
``kbroker/_app``, the broker's packages; an editable install of a checkout maps them at the top
level as well, for the repository's own tests and tools.
"""

import os

from setuptools import find_packages, setup

APP = ("protocol", "storage", "metadata", "coordinator", "security", "broker", "tools", "pipeline")
PIPELINE_DATA = ["data/*.csv", "log4j2.properties", "fetch_jars.sh"]
app_packages = find_packages(include=[*APP, *(f"{name}.*" for name in APP)])

if os.environ.get("KBROKER_WHEEL_LAYOUT") == "bundled":
    setup(packages=["kbroker", *(f"kbroker._app.{p}" for p in app_packages)],
          package_dir={f"kbroker._app.{name}": name for name in APP},
          package_data={"kbroker._app.pipeline": PIPELINE_DATA})
else:
    setup(packages=["kbroker", *app_packages], package_data={"pipeline": PIPELINE_DATA})
