"""`cdc drop`: remove a `capture: log` table's replication slot and publication, under the
table's lock; its cursor is reset, so its next run loads it whole and makes them again."""

from __future__ import annotations

import argparse

import psycopg

from incremental_assets.cli.context import (
    actor,
    asset_key,
    open_instance,
    project_and_tables,
    table_lock,
)
from incremental_assets.config import JdbcSourceSpec
from incremental_assets.errors import ConfigError, SourceError, TableProblem
from incremental_assets.sources.pg_client import connect
from incremental_assets.sources.pg_slot import drop, names_of
from incremental_assets.state import read_stored_state, record_cursor_override


def drop_slot(args: argparse.Namespace) -> int:
    project, (table,) = project_and_tables(args, [args.table])
    source = table.source
    if table.capture != "log" or not isinstance(source, JdbcSourceSpec):
        raise ConfigError(
            TableProblem(
                table.name, "it isn't captured from the log (`capture: log`): it has no slot."
            )
        )
    if not source.url.startswith("jdbc:postgresql:"):
        raise ConfigError(
            TableProblem(
                table.name,
                "its changes are read from the server's binary log, which keeps no slot for it "
                "(the server expires its logs on its own): there is nothing to drop.",
                fix="remove the table from the configuration to stop capturing it.",
            )
        )
    names = names_of(table)
    with open_instance() as instance, table_lock(project, table, "cdc drop"):
        try:
            with connect(source) as conn:
                had = drop(conn, names.slot, names.publication)
        except psycopg.Error as exc:
            raise SourceError(
                TableProblem(
                    table.name,
                    f"dropping slot {names.slot} failed: {' '.join(str(exc).split())}.",
                    source=source.redacted_url(),
                    fix="check that the database answers and the source's user may drop the "
                    "slot (REPLICATION), or drop it in SQL: SELECT pg_drop_replication_slot("
                    f"'{names.slot}'); DROP PUBLICATION {names.publication};",
                )
            ) from None
        stored = read_stored_state(instance, asset_key(project, table))
        note = f"{args.reason} (slot dropped by {actor()} with incremental-assets cdc drop)"
        record_cursor_override(
            instance, asset_key(project, table), stored, None, None, stored.cursor_type, note
        )
    found = f"slot {names.slot} dropped" if had else f"no slot {names.slot} to drop"
    print(
        f"{table.name}: {found}, and publication {names.publication}; the server keeps no log "
        "for it now, and its next run loads it whole and makes them again"
    )
    return 0
