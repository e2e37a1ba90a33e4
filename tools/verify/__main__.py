"""``kbroker-verify``: the command line of the exactly-once checker.

Owns the arguments and their defaults; the run itself is :mod:`.runner`. Where it knowingly
differs from Jepsen: one command runs one workload against one target (Jepsen's ``lein run
test`` also provisions machines); ``--nemesis`` takes this project's fault names.
"""

from __future__ import annotations

import argparse
import sys

WORKLOADS = ("txn", "copier")
FAULTS = ("kill9", "pause", "term", "partition", "etcd", "machine", "etcd-member", "etcd-leader", "coordinator",
          "proxy", "client-kill")
VARIANTS = ("coordinator-pause", "proxy-delay", "proxy-duplicate", "proxy-reorder")  # narrower faults


def faults(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return []
    unknown = [n for n in names if n not in FAULTS + VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown fault(s) {unknown}; known: {', '.join(FAULTS + VARIANTS)} or none")
    return names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kbroker-verify",
        description="Exactly-once checker after Jepsen's Kafka workload: runs clients under faults, "
                    "records a history and checks it (lost writes, duplicates, aborted reads, cycles).")
    p.add_argument("--target", default="devcluster",
                   help="devcluster | compose | kafka | HOST:PORT,... (an external cluster; default devcluster)")
    p.add_argument("--workload", choices=WORKLOADS, default="txn")
    p.add_argument("--nemesis", type=faults, default=[],
                   help=f"comma list of {','.join(FAULTS)} (or {','.join(VARIANTS)}), or none (default none)")
    p.add_argument("--seconds", type=float, default=60.0, help="how long the workload runs under faults")
    p.add_argument("--isolation", choices=("read_committed", "read_uncommitted"), default="read_committed",
                   help="the readers' isolation (read_uncommitted: the checker must report G1a)")
    p.add_argument("--records", type=int, default=20000, help="copier: records loaded into the input while it is copied")
    p.add_argument("--interval", type=float, default=15.0, help="seconds between faults")
    p.add_argument("--hold", type=float, default=6.0, help="seconds a fault is held before it is undone")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="output directory (default verify-runs/<time>-<workload>-<target>)")
    p.add_argument("--no-idempotence", action="store_true",
                   help="sanity mode: plain producers (acks=1, retries) through the duplicating proxy; "
                        "the checker must report duplicates")
    p.add_argument("--producers", type=int, default=3, help="txn: producer processes")
    p.add_argument("--max-txn-length", type=int, default=30,
                   help="txn: at most this many sends and polls a transaction (Jepsen's --max-txn-length)")
    p.add_argument("--consumers", type=int, default=2, help="txn: consumer processes (assign, subscribe, ...)")
    p.add_argument("--copiers", type=int, default=3, help="copier: copier processes")
    p.add_argument("--client-debug", default="", metavar="CONTEXTS",
                   help="librdkafka debug contexts for every client (e.g. eos,msg); written to its pN.log")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    from tools.verify.runner import Options, configure_logging, run

    args = parser().parse_args(argv)
    configure_logging(args.verbose)
    opts = Options(target=args.target, workload=args.workload, nemesis=args.nemesis, seconds=args.seconds,
                   isolation=args.isolation, records=args.records, interval=args.interval, hold=args.hold,
                   seed=args.seed, out=args.out, no_idempotence=args.no_idempotence,
                   producers=args.producers, consumers=args.consumers, copiers=args.copiers,
                   max_txn_length=args.max_txn_length, client_debug=args.client_debug)
    from tools.verify.targets import TargetUnavailable

    try:
        return run(opts)
    except (ValueError, TargetUnavailable) as exc:  # a run this machine or target cannot do
        print(f"kbroker-verify: {exc}", file=sys.stderr)
        print(f"valid: unknown (not run: {exc})", flush=True)
        return 2
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback, for an operator
        import traceback

        traceback.print_exc()
        print(f"valid: unknown (the run failed: {exc!r})", flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
