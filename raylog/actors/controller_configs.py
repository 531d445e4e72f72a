"""Configs and quotas: topic, broker and group configs (Kafka's (Incremental)AlterConfigs,
DescribeConfigs) and client quotas, journaled and pushed to the replicas with their
versions.

A part of :class:`~raylog.actors.controller.ControllerActor` (see
:class:`~raylog.actors.controller_parts.ControllerPart` for what the parts share).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from raylog.actors.controller_parts import CLUSTER, GROUP, TOPIC, ControllerPart, awaited, require
from raylog.common.acl import CLUSTER_NAME, ResourceType
from raylog.common.acl import ACLOperation as Op
from raylog.common.names import (
    OFFSETS_TOPIC,
    broker_id_of,
)
from raylog.coordination import broker_configs
from raylog.errors import RaylogError
from raylog.protocol import error_result

logger = logging.getLogger(__name__)


class ConfigAdmin(ControllerPart):
    """See the module docstring."""

    async def alter_configs(
        self,
        changes: dict[str, dict[str, Any]],
        incremental: bool = True,
        validate_only: bool = False,
        session: str | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Alter each topic's config, incrementally or replacing its whole set of overrides
        (see :meth:`~raylog.coordination.metadata.MetadataImage.alter_config`), in one
        journal record per topic, then pushed to its live replicas; per topic
        ``(error_code, message)``. A refused topic is unchanged; ``validate_only`` checks
        each change and makes none. Needs ALTER_CONFIGS on each topic."""
        access = self._caller(session)

        def alter(item: tuple[str, dict[str, Any]]) -> None:
            name, change = item
            require(access, Op.ALTER_CONFIGS, TOPIC, name)
            record = self.image.alter_config(
                name, change, incremental=incremental, remote_log_storage_uri=self.config.remote_log_storage_uri
            )
            if not validate_only:
                self._commit([record])
                self.fleet.push(list(self.image.topics[name].partitions))

        return await self._each({name: (name, change) for name, change in changes.items()}, alter)

    async def alter_broker_configs(
        self,
        changes: dict[str, dict[str, Any]],
        incremental: bool = True,
        validate_only: bool = False,
        session: str | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Alter broker resources' dynamic configs (resource "" the cluster default, else a
        broker id; see :meth:`~raylog.coordination.metadata.MetadataImage.alter_broker_config`),
        one journal record each; topics' new defaults are pushed to their live replicas (a
        broker's own to its replicas). Per resource ``(error_code, message)``; a refused one is
        unchanged; ``validate_only`` checks each change and makes none. Needs ALTER_CONFIGS
        on the cluster."""
        access = self._caller(session)

        def alter(item: tuple[str, dict[str, Any]]) -> None:
            resource, change = item
            require(access, Op.ALTER_CONFIGS, CLUSTER)
            record = self.image.alter_broker_config(resource, change, incremental=incremental, static=self.config)
            if validate_only:
                return
            self._commit([record])
            logger.info(
                "dynamic broker configs of %s set: %s",
                resource or "the cluster default",
                broker_configs.masked(record["configs"]),
            )
            only = None if resource == "" else int(resource)
            self.fleet.push([p for topic in self.image.topics.values() for p in topic.partitions], only=only)

        return await self._each({resource: (resource, change) for resource, change in changes.items()}, alter)

    async def describe_broker_configs(
        self, resources: list[str], session: str | None = None
    ) -> dict[str, tuple[int, str, dict]]:
        """Per broker resource ("" or a broker id) ``(error_code, message, {config:
        ConfigEntry})``; needs DESCRIBE_CONFIGS on the cluster."""

        def describe(resource: str) -> dict:
            static = broker_configs.static_configs(self.config, broker_id_of(resource))
            return self.image.describe_broker_config(resource, static)

        return await self._described(resources, session, CLUSTER, describe)

    async def describe_configs(self, names: list[str], session: str | None = None) -> dict[str, tuple[int, str, dict]]:
        """Per topic ``(error_code, message, {property: ConfigEntry})``; needs DESCRIBE_CONFIGS
        on each topic."""
        return await self._described(names, session, TOPIC, self.image.describe_config)

    async def _described(
        self, names: list[str], session: str | None, resource_type: ResourceType, describe: Callable[[str], dict]
    ) -> dict[str, tuple[int, str, dict]]:
        """Per name ``(error_code, message, describe(name))``; needs DESCRIBE_CONFIGS on the
        resource of ``resource_type`` by that name (on the cluster for CLUSTER)."""
        await self.start()
        access = self._caller(session)
        results = {}
        for name in names:
            try:
                require(access, Op.DESCRIBE_CONFIGS, resource_type, CLUSTER_NAME if resource_type == CLUSTER else name)
                results[name] = (0, "", describe(name))
            except RaylogError as exc:
                results[name] = (*error_result(exc), {})
        return results

    async def alter_client_quotas(self, changes: dict, session: str | None = None) -> tuple[int, str]:
        """Alter client quotas (all or nothing; see
        :meth:`~raylog.coordination.metadata.MetadataImage.alter_client_quotas`), journaled,
        then pushed to every live replica and answered once they hold them (a client that
        starts right after finds its quota in force), or after :data:`PEER_CALL_TIMEOUT_S` if
        a replica does not answer (it gets them when it does); ``(error_code, message)``, code
        0 on success. Needs ALTER_CONFIGS on the cluster."""
        await self.start()
        access = self._caller(session)
        async with self._guard():
            try:
                require(access, Op.ALTER_CONFIGS, CLUSTER)
                self._commit(self.image.alter_client_quotas(changes))
            except RaylogError as exc:
                return error_result(exc)
            keys = [key for key in self.fleet.replicas if key[2] in self.live]
        await awaited(self.fleet.push_quotas(keys), f"client quotas version {self.image.client_quotas_version}")
        return 0, ""

    async def alter_group_configs(
        self,
        changes: dict[str, dict[str, Any]],
        incremental: bool = True,
        validate_only: bool = False,
        session: str | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Alter groups' dynamic configs (Kafka 4's GROUP config resources, see
        :meth:`~raylog.coordination.metadata.MetadataImage.alter_group_config`), one journal
        record each, pushed to the group coordinators (every ``__consumer_offsets`` replica)
        and answered once the running ones hold them (a member's next heartbeat gets its
        group's settings), or after :data:`PEER_CALL_TIMEOUT_S` for those that do not answer
        (they get them when they do). Per group ``(error_code, message)``; a refused one is
        unchanged; ``validate_only`` checks each change and makes none. Needs ALTER_CONFIGS
        on each group (GROUP_AUTHORIZATION_FAILED)."""
        access = self._caller(session)

        def alter(item: tuple[str, dict[str, Any]]) -> None:
            group_id, change = item
            require(access, Op.ALTER_CONFIGS, GROUP, group_id)
            record = self.image.alter_group_config(group_id, change, self._consumer_groups, incremental=incremental)
            if not validate_only:
                self._commit([record])
                logger.info("dynamic configs of group %r set: %s", group_id, record["configs"])

        results = await self._each({group_id: (group_id, change) for group_id, change in changes.items()}, alter)
        if not validate_only and any(code == 0 for code, _ in results.values()):
            keys = [key for key in self.fleet.replicas if key[0] == OFFSETS_TOPIC and key[2] in self.live]
            await awaited(
                self.fleet.push_group_configs(keys), f"group configs version {self.image.group_configs_version}"
            )
        return results

    async def describe_group_configs(
        self, groups: list[str], session: str | None = None
    ) -> dict[str, tuple[int, str, dict]]:
        """Per group ``(error_code, message, {config: ConfigEntry})`` (see
        :meth:`~raylog.coordination.metadata.MetadataImage.describe_group_config`); needs
        DESCRIBE_CONFIGS on each group."""
        describe = functools.partial(self.image.describe_group_config, broker=self._consumer_groups)
        return await self._described(groups, session, GROUP, describe)

    async def describe_client_quotas(self, session: str | None = None) -> dict[str | None, dict[str, float]]:
        """Every client quota set: client id (None: the default) -> {quota key: bytes/s}.

        Raises:
            ClusterAuthorizationFailedError: the caller may not DESCRIBE_CONFIGS the cluster.
        """
        await self.start()
        require(self._caller(session), Op.DESCRIBE_CONFIGS, CLUSTER)
        return {client_id: dict(quotas) for client_id, quotas in self.image.client_quotas.items()}
