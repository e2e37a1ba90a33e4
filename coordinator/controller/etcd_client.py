"""The etcd client of the metadata store: aetcd's, over TLS and with etcd's own users when configured.

Owns how a broker reaches etcd: ``metadata.etcd.tls.ca.file`` (the CA that signed etcd's server
certificate), ``metadata.etcd.tls.cert.file`` / ``metadata.etcd.tls.key.file`` (this broker's
client certificate, for an etcd started with ``--client-cert-auth``) and
``metadata.etcd.username`` / ``metadata.etcd.password`` (etcd's role-based authentication; the
token etcd issues is sent with every call, as etcdctl does).

aetcd 1.x only opens plaintext gRPC channels: :meth:`EtcdClient.connect` is its ``connect`` with
a TLS channel instead (its private attributes are pinned by the ``aetcd<2`` requirement).
"""

from __future__ import annotations

from dataclasses import dataclass

import aetcd
from aetcd import rpc, watcher
from aetcd.client import _handle_errors


@dataclass(frozen=True)
class EtcdSecurity:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_config(cls, config) -> EtcdSecurity:
        def value(name: str) -> str | None:
            return config.get(name) or None
        return cls(value("metadata.etcd.tls.ca.file"), value("metadata.etcd.tls.cert.file"),
                   value("metadata.etcd.tls.key.file"), value("metadata.etcd.username"),
                   value("metadata.etcd.password"))

    @property
    def tls(self) -> bool:
        return bool(self.ca_file or self.cert_file)

    def check(self) -> None:
        """ValueError (one line) for a setting that cannot work."""
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("metadata.etcd.tls.cert.file and metadata.etcd.tls.key.file go together")
        if bool(self.username) != bool(self.password):
            raise ValueError("metadata.etcd.username and metadata.etcd.password go together")
        for path in (self.ca_file, self.cert_file, self.key_file):
            if path:
                with open(path, "rb"):
                    pass

    def channel_credentials(self):
        import grpc

        def read(path: str | None) -> bytes | None:
            if not path:
                return None
            with open(path, "rb") as f:
                return f.read()
        return grpc.ssl_channel_credentials(root_certificates=read(self.ca_file),
                                            private_key=read(self.key_file), certificate_chain=read(self.cert_file))


class EtcdClient(aetcd.Client):
    def __init__(self, host: str, port: int, security: EtcdSecurity = EtcdSecurity(), **kwargs) -> None:
        super().__init__(host=host, port=port, username=security.username, password=security.password, **kwargs)
        self.security = security

    @_handle_errors
    async def connect(self) -> None:
        if not self.security.tls:
            return await super().connect()
        if self._connected.is_set():
            return
        if self._is_connecting:  # another task is connecting: wait for it, as aetcd does
            import asyncio

            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            self.channel = rpc.secure_channel(f"{self._host}:{self._port}", self.security.channel_credentials(),
                                              options=self._options.items())
            if self._username is not None and self._password is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                resp = await self.auth_stub.Authenticate(
                    rpc.AuthenticateRequest(name=self._username, password=self._password), timeout=self._timeout)
                self.metadata = (("token", resp.token),)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                                            metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False
