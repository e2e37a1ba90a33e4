"""One module per Kafka API key; importing this package registers them all.

Each module opens with a Behavior / Version notes docstring and registers its version range
with ``protocol.api.register``; ApiVersions is generated from that registry.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("p"):
        importlib.import_module(f"{__name__}.{_module.name}")
