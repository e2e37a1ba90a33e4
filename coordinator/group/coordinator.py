"""Placeholder replaced by the group coordinator implementation."""

from protocol.errors import ErrorCode


class GroupCoordinator:
    def __init__(self, broker) -> None:
        self.broker = broker

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def coordinator_error(self, group_id: str) -> int:
        return ErrorCode.coordinator_not_available
