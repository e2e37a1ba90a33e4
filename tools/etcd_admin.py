"""The metadata store's members as an operator sees them: who they are, who leads, adding and
removing one. What ``etcdctl member list/add/remove`` and ``etcdctl endpoint status`` do, through
the same failover client the brokers use (any live member answers), for the development
cluster, the fault injector and the runbook's tests.

    python -m tools.etcd_admin --endpoints h1:2379,h2:2379,h3:2379 members
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict, dataclass

from aetcd import rpc

from metadata.etcd.client import ETCD_ERRORS, EtcdSecurity, FailoverEtcdClient, StoreUnavailable

__all__ = ["Member", "members", "leader", "add_member", "remove_member", "raft_leader_name"]


@dataclass(frozen=True)
class Member:
    id: int
    name: str  # empty for a member added but not started yet
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_leader: bool = False


async def _members(client: FailoverEtcdClient) -> list[Member]:
    async def listing(m):
        return await m.clusterstub.MemberList(rpc.MemberListRequest(), timeout=m._timeout, metadata=m.metadata)
    response = await client.call(listing)
    status = await client.status()
    return [Member(m.ID, m.name, tuple(m.peerURLs), tuple(m.clientURLs), m.ID == status.leader)
            for m in response.members]


def _client(endpoints: str, security: EtcdSecurity | None, timeout: float) -> FailoverEtcdClient:
    return FailoverEtcdClient(endpoints, security, call_timeout=min(timeout, 5.0))


def _run(endpoints: str, security: EtcdSecurity | None, timeout: float, work):
    async def go():
        client = _client(endpoints, security, timeout)
        try:
            return await asyncio.wait_for(work(client), timeout)
        finally:
            await client.close()
    return asyncio.run(go())


def members(endpoints: str, security: EtcdSecurity | None = None, timeout: float = 10.0) -> list[Member]:
    return _run(endpoints, security, timeout, _members)


def leader(endpoints: str, security: EtcdSecurity | None = None, timeout: float = 10.0) -> Member | None:
    """The member that leads the Raft group now, as a live member reports it."""
    try:
        found = members(endpoints, security, timeout)
    except (*ETCD_ERRORS, StoreUnavailable, TimeoutError):
        return None
    return next((m for m in found if m.is_leader), None)


def add_member(endpoints: str, peer_url: str, security: EtcdSecurity | None = None, timeout: float = 10.0) -> int:
    """``etcdctl member add``: the cluster expects a member at ``peer_url``; returns its id. The
    member must then start with ``--initial-cluster-state existing``."""
    async def add(client):
        async def call(m):
            return await m.clusterstub.MemberAdd(rpc.MemberAddRequest(peerURLs=[peer_url]),
                                                 timeout=m._timeout, metadata=m.metadata)
        return (await client.call(call, write=True)).member.ID
    return _run(endpoints, security, timeout, add)


def remove_member(endpoints: str, member_id: int, security: EtcdSecurity | None = None, timeout: float = 10.0) -> None:
    """``etcdctl member remove``: the member is no longer counted for a quorum."""
    async def remove(client):
        async def call(m):
            return await m.clusterstub.MemberRemove(rpc.MemberRemoveRequest(ID=member_id),
                                                    timeout=m._timeout, metadata=m.metadata)
        await client.call(call, write=True)
    _run(endpoints, security, timeout, remove)


def raft_leader_name(cluster, timeout: float = 10.0) -> str | None:
    """The name of the member leading a development cluster's etcd (``etcd-<i>``)."""
    security = None
    if cluster.security is not None:
        sec = cluster.security
        security = EtcdSecurity(str(sec.ca.pem), str(sec.etcd_client_cert.cert), str(sec.etcd_client_cert.key))
    live = ",".join(m.address for m in cluster.etcd_members.values() if m.alive) or cluster.etcd_endpoints
    found = leader(live, security, timeout)
    return found.name if found is not None else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.etcd_admin", description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoints", required=True, help="host:port of the members, comma separated")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("members", help="the members, and which one leads")
    args = p.parse_args(argv)
    try:
        found = members(args.endpoints)
    except (*ETCD_ERRORS, StoreUnavailable, TimeoutError) as exc:
        print(f"etcd_admin: no member of {args.endpoints} answered: {exc}", file=sys.stderr)
        return 1
    for m in found:
        print(json.dumps({**asdict(m), "id": f"{m.id:x}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
