"""Migrating an empty database must give exactly what tables.py declares, on every dialect."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from ledgerq.core.job import NewJob
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.migrate import downgrade, migrate, status
from ledgerq.store.migrations.env_settings import include_object_for
from ledgerq.store.tables import jobs, metadata


def test_migrate_from_empty_matches_the_declared_tables(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        before = status(engine)
        assert before.current is None and not before.up_to_date
        after = migrate(engine)
        assert after.up_to_date and after.current == after.head
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_object": include_object_for(conn.dialect.name)}
            )
            diff = compare_metadata(context, metadata)
        # The version table is Alembic's own; everything else must match exactly.
        diff = [
            d
            for d in diff
            if not (d[0] == "remove_table" and d[1].name == "ledgerq_alembic_version")
        ]
        assert diff == []
        assert migrate(engine).up_to_date  # running it again is a no-op
    finally:
        engine.dispose()


def _index_definitions(conn: sa.Connection) -> dict[str, str]:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        rows = conn.execute(sa.text("SELECT indexname, indexdef FROM pg_indexes"))
    elif dialect == "sqlite":
        rows = conn.execute(sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    else:
        rows = conn.execute(
            sa.text(
                "SELECT index_name, group_concat(column_name) FROM information_schema.statistics"
                " WHERE table_schema = database() GROUP BY index_name"
            )
        )
    return {str(name): str(definition) for name, definition in rows}


def test_upgrading_a_filled_ledger_makes_the_dedupe_and_batch_indexes_sparse(
    empty_database_url: str,
) -> None:
    engine = create_engine(empty_database_url)
    try:
        migrate(engine, "0008_workflows")
        store = SqlJobStore(engine)
        store.insert_jobs([NewJob(task="t", queue="q", args_json="[]", dedupe_key="k")])
        store.insert_jobs([NewJob(task="t", queue="q", args_json="[]")])
        migrate(engine)
        with engine.connect() as conn:
            found = _index_definitions(conn)
        sparse = engine.dialect.name in ("postgresql", "sqlite")
        for name, predicate in [
            ("ix_jobs_dedupe_active", "dedupe_active IS NOT NULL"),
            ("ix_jobs_batch_id_state", "batch_id IS NOT NULL"),
        ]:
            assert (predicate in found[name]) is sparse, found[name]
        # The unique index still refuses a second unfinished job with the same key.
        first = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]", dedupe_key="k")])
        assert first[0].duplicate
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 2
    finally:
        engine.dispose()


def _assignment_rows(engine: sa.Engine) -> set[tuple[int, int, str, str | None]]:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT job_id, attempt, worker_id, outcome FROM job_assignments")
        )
        return {(int(j), int(a), str(w), o) for j, a, w, o in found}


def test_the_attempt_history_is_keyed_by_job_and_attempt_and_keeps_its_rows(
    empty_database_url: str,
) -> None:
    engine = create_engine(empty_database_url)
    insert = sa.text(
        "INSERT INTO job_assignments (job_id, attempt, worker_id, started_at, ended_at, outcome)"
        " VALUES (:job, :attempt, :worker, :at, :at, :outcome)"
    )
    at = datetime(2026, 12, 4, tzinfo=UTC)
    history = {(1, 1, "w-a", "failed"), (1, 2, "w-b", "succeeded"), (7, 1, "w-a", None)}
    try:
        migrate(engine, "0009_sparse_job_indexes")
        with engine.begin() as conn:
            for job, attempt, worker, outcome in sorted(history):
                params = {"job": job, "attempt": attempt, "worker": worker, "outcome": outcome}
                conn.execute(insert, {**params, "at": at})
        migrate(engine)
        assert _assignment_rows(engine) == history
        inspector = sa.inspect(engine)
        key = inspector.get_pk_constraint("job_assignments")["constrained_columns"]
        assert key == ["job_id", "attempt"]
        columns = {c["name"] for c in inspector.get_columns("job_assignments")}
        assert "id" not in columns
        assert inspector.get_indexes("job_assignments") == []
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            duplicate = {"job": 1, "attempt": 2, "worker": "w-c", "outcome": None}
            conn.execute(insert, {**duplicate, "at": at})
        # Down and up again: the history survives both ways.
        downgrade(engine, "0009_sparse_job_indexes")
        assert _assignment_rows(engine) == history
        migrate(engine)
        assert _assignment_rows(engine) == history
    finally:
        engine.dispose()


def test_job_ids_are_never_handed_out_twice_and_the_rebuild_keeps_every_row(
    empty_database_url: str,
) -> None:
    """The id of a deleted newest job does not come back (SQLite reused it before 0020); on
    SQLite the upgrade rebuilds ``jobs`` keeping rows, the generated column and its index."""
    engine = create_engine(empty_database_url)
    try:
        migrate(engine, "0019_job_waiters")
        store = SqlJobStore(engine)
        kept = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]", dedupe_key="k")])
        newest = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]")])
        migrate(engine)
        with engine.begin() as conn:
            conn.execute(jobs.delete().where(jobs.c.id == newest[0].job_id))
        again = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]")])
        assert again[0].job_id > newest[0].job_id
        # The rebuilt table's unique index on the generated dedupe column still refuses.
        duplicate = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]", dedupe_key="k")])
        assert duplicate[0].duplicate and duplicate[0].job_id == kept[0].job_id
        with engine.connect() as conn:
            rows = conn.execute(sa.select(jobs.c.id, jobs.c.dedupe_active).order_by(jobs.c.id))
            assert [tuple(r) for r in rows] == [(kept[0].job_id, "k"), (again[0].job_id, None)]
        downgrade(engine, "0019_job_waiters")  # and back: the rows stay
        with engine.connect() as conn:
            count = conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar()
        assert count == 2
    finally:
        engine.dispose()


def test_a_migration_runs_without_the_idle_transaction_guard(database_url: str) -> None:
    """A migration pauses between statements to load its revisions; on a busy host that can
    pass the 5 s guard of the ledger's own transactions, which then killed ``db migrate``.
    The guard is off for the migration's transaction and back on its connection afterwards."""
    from ledgerq.store import migrate as migrate_module

    engine = create_engine(database_url)
    name = engine.dialect.name
    if name == "sqlite":
        pytest.skip("SQLite has no idle-transaction guard")
    show = (
        "SHOW idle_in_transaction_session_timeout"
        if name == "postgresql"
        else "SELECT @@SESSION.idle_transaction_timeout"
    )
    seen: list[str] = []

    def probe(config: object, revision: str) -> None:
        conn = config.attributes["connection"]  # type: ignore[attr-defined]
        seen.append(str(conn.exec_driver_sql(show).scalar()))

    try:
        migrate_module._run(engine, probe, "head")
        assert seen == ["0"]
        with engine.connect() as conn:  # the pool's connection has its guard back
            assert str(conn.exec_driver_sql(show).scalar()) in ("5s", "5")
    finally:
        engine.dispose()


def test_mariadb_tables_compare_text_exactly_and_the_upgrade_keeps_every_row(
    empty_database_url: str,
) -> None:
    """On MariaDB every ledger table and text column is ``utf8mb4_bin`` after migrating (0021):
    a revision that adds a table without the collation fails here. A ledger filled before
    0021 keeps its rows, and afterwards takes a dedupe key differing only in case."""
    engine = create_engine(empty_database_url)
    try:
        if engine.dialect.name not in ("mysql", "mariadb"):
            pytest.skip("PostgreSQL and SQLite compare text exactly by default")
        migrate(engine, "0020_sqlite_job_ids")
        store = SqlJobStore(engine)
        kept = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]", dedupe_key="K")])
        migrate(engine)
        with engine.connect() as conn:
            schema = conn.exec_driver_sql("SELECT DATABASE()").scalar()
            tables = dict(
                conn.exec_driver_sql(
                    "SELECT table_name, table_collation FROM information_schema.tables"
                    " WHERE table_schema = %s AND table_name <> 'ledgerq_alembic_version'",
                    (schema,),
                ).all()
            )
            columns = conn.exec_driver_sql(
                "SELECT table_name, column_name, collation_name FROM information_schema.columns"
                " WHERE table_schema = %s AND collation_name IS NOT NULL"
                " AND table_name <> 'ledgerq_alembic_version'",
                (schema,),
            ).all()
        assert set(tables) == set(metadata.tables)
        assert set(tables.values()) == {"utf8mb4_bin"}
        assert columns and {collation for _, _, collation in columns} == {"utf8mb4_bin"}
        other = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]", dedupe_key="k")])
        again = store.insert_jobs([NewJob(task="t", queue="q", args_json="[]", dedupe_key="K")])
        assert not other[0].duplicate and other[0].job_id != kept[0].job_id
        assert again[0].duplicate and again[0].job_id == kept[0].job_id
    finally:
        engine.dispose()
