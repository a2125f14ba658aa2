"""`lake.maintenance: scheduled`: the Iceberg tables kept by a Dagster job of their own, on
`lake.maintenance_schedule`, instead of after each run's commit (the default, `load.py`).

One op per table, in the table's pool (the shipped dagster.yaml runs one op of a pool at a time,
so it never overlaps a run of its table) and under the table's lock on a local lake: compaction
commits a snapshot, and a run whose table moved while it computed would be refused as an
overlapping one. An op reads what is due without Spark (`maintenance.due`), starts Spark only
when something is, and says what it did and how long it took in its output's metadata. A plain
Parquet table has nothing to keep.
"""

# Dagster reads the op's `context` annotation at definition time: no postponed annotations here.
import dagster as dg

from incremental_assets.config import Project, TableSpec
from incremental_assets.engine_failures import messages
from incremental_assets.errors import ConfigError, TableProblem
from incremental_assets.factory import failing_cleanly
from incremental_assets.lake import open_lake
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.translator import IncrementalAssetsTranslator

MAINTAINED = "maintenance"  # the op's output metadata: what it did, or why nothing


def build_maintenance(
    project: Project, translator: IncrementalAssetsTranslator
) -> tuple[list[dg.JobDefinition], list[dg.ScheduleDefinition]]:
    """The maintenance job and its schedule, when the lake asks for them."""
    if project.lake.maintenance != "scheduled" or not project.tables:
        return [], []
    taken = {translator.op_name(table): table.name for table in project.tables}
    for table in project.tables:
        name = translator.maintenance_op_name(table)
        if name in taken:
            raise ConfigError(
                TableProblem(
                    taken[name],
                    f"its op name {name} is the maintenance op of table {table.name}",
                    "name",
                    "rename the table, or use lake.maintenance: after_commit",
                ),
                file=project.path,
            )
    ops = [_maintenance_op(project, table, translator) for table in project.tables]

    @dg.job(
        name=translator.maintenance_job_name,
        description="Compacts, expires and sweeps each Iceberg table where it is due "
        "(lake.maintenance: scheduled), in the table's pool.",
    )
    def maintenance() -> None:
        for op in ops:
            op()

    schedule = dg.ScheduleDefinition(
        name=translator.maintenance_schedule_name,
        cron_schedule=project.lake.maintenance_schedule,
        job=maintenance,
        description=f"Keeps the Iceberg tables on '{project.lake.maintenance_schedule}' (UTC).",
        # Choosing `maintenance: scheduled` in the config is the request to run it.
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    return [maintenance], [schedule]


def _maintenance_op(
    project: Project, table: TableSpec, translator: IncrementalAssetsTranslator
) -> dg.OpDefinition:
    @dg.op(
        name=translator.maintenance_op_name(table),
        pool=translator.pool(table),
        description=f"Keeps the Iceberg table of {table.name} where anything is due.",
    )
    def maintain_table(context: dg.OpExecutionContext, spark: IncrementalSparkResource) -> None:
        lake = open_lake(project.lake, table.name, translator.lake_table_name(table))
        done = "nothing to keep: a plain Parquet table"
        if isinstance(lake, IcebergLake):
            with failing_cleanly():
                owner = f"maintenance run {context.run_id}"
                with lake.lock(table.name, owner, project.lake.lock_timeout):
                    done = _kept(lake, spark)
        context.log.info(f"{table.name}: {done}")
        context.add_output_metadata({MAINTAINED: done})

    return maintain_table


def _kept(lake: IcebergLake, spark: IncrementalSparkResource) -> str:
    """What the table's maintenance did, or why it did nothing. A table whose metadata is another
    lake's (a copied lake's catalog) is never touched: its runs refuse it, and maintaining it
    would commit to, and delete files of, the lake it was copied from."""
    misplaced = lake.facts(with_files=False).misplaced
    if misplaced is not None:
        return f"not kept: {misplaced}"
    if not lake.maintenance_due():
        return "nothing due"
    try:
        return lake.maintain(spark.spark_session) or "nothing due"
    except Exception as exc:
        cause = lake.redact(messages(exc)[-1])
        raise dg.Failure(
            description=f"{lake.table_name}: the lake's maintenance failed (the next scheduled "
            f"run tries again; no table's rows or cursor changed): {cause}",
            allow_retries=False,
        ) from None
