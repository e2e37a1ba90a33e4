"""A Bytewax dataflow through its Kafka connectors (runs in its own venv): read every record of
``COMPAT_INPUT`` from the beginning to its end (``tail=False``), upper-case the value, keep the
key, write to ``COMPAT_OUTPUT``. ``COMPAT_CLIENT_CONFIG`` (JSON, librdkafka's settings) is given
to both connectors on a secure target. ``python -m bytewax.run dataflow:flow``."""

import json
import os

import bytewax.operators as op
from bytewax.connectors.kafka import KafkaSinkMessage
from bytewax.connectors.kafka import operators as kop
from bytewax.dataflow import Dataflow

BROKERS = os.environ["COMPAT_BOOTSTRAP"].split(",")
CONFIG = json.loads(os.environ.get("COMPAT_CLIENT_CONFIG") or "{}") or None

flow = Dataflow("compat-bytewax")
source = kop.input("in", flow, brokers=BROKERS, topics=[os.environ["COMPAT_INPUT"]], tail=False,
                   add_config=CONFIG)
op.inspect("errors", source.errs)
upper = op.map("upper", source.oks, lambda msg: KafkaSinkMessage(msg.key, msg.value.upper()))
kop.output("out", upper, brokers=BROKERS, topic=os.environ["COMPAT_OUTPUT"], add_config=CONFIG)
