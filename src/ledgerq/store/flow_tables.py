"""Table definitions of the scheduler, batches and workflows (``tables.py`` re-exports them,
so ``from ledgerq.store.tables import ...`` reaches every table)."""

from __future__ import annotations

import sqlalchemy as sa

from ledgerq.store.table_types import JobId, LongText, Timestamp, metadata

# -- the scheduler: cron schedules and one row per fired tick ------------------------------

schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("cron", sa.String(200), nullable=False),
    sa.Column("tz", sa.String(64), nullable=False),
    sa.Column("task", sa.String(200), nullable=False),
    sa.Column("args", LongText, nullable=False),
    sa.Column("queue", sa.String(64), nullable=True),
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    # skip | once | all (see core/schedules.py), and how many missed ticks ``all`` runs.
    sa.Column("missed", sa.String(8), nullable=False),
    sa.Column("max_catchup", sa.Integer, nullable=False),
    # skip | allow: whether a tick fires while the previous run's job is unfinished.
    sa.Column("overlap", sa.String(8), nullable=False),
    # code (declared with @app.periodic, upserted at scheduler start) | runtime (CLI)
    sa.Column("source", sa.String(8), nullable=False),
    # Every tick up to here was fired or deliberately skipped (NULL: start from now).
    sa.Column("last_tick", Timestamp, nullable=True),
    sa.Column("next_tick", Timestamp, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)

# One row per fired tick, written in the same transaction as its job: the unique key is what
# makes a tick fire once however many schedulers run (a duplicate rolls back with its job).
schedule_runs = sa.Table(
    "schedule_runs",
    metadata,
    sa.Column("id", JobId, primary_key=True, autoincrement=True),
    sa.Column("schedule", sa.String(200), nullable=False),
    sa.Column("tick", Timestamp, nullable=False),
    # NULL when the tick was skipped because the previous run was unfinished (overlap=skip).
    sa.Column("job_id", JobId, nullable=True),
    sa.Column("executed_by", sa.String(160), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("ix_schedule_runs_schedule_tick", "schedule", "tick", unique=True),
)

# -- batches: items of a batch job, and batches of jobs with callbacks -----------------------

# One row per finished item of a batch job: the primary key makes an item's effect, written in
# the same transaction, happen at most once; ``attempt`` is the attempt that recorded it.
job_items = sa.Table(
    "job_items",
    metadata,
    sa.Column("job_id", JobId, primary_key=True),
    sa.Column("item_key", sa.String(255), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("result", LongText, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=False),
)

# A batch of jobs. Each callback fires at most once: its ``*_fired_at`` is set in the same
# transaction that enqueues it.
batches = sa.Table(
    "batches",
    metadata,
    sa.Column("id", JobId, primary_key=True, autoincrement=True),
    sa.Column("size", sa.Integer, nullable=False),
    # JSON: {"success"|"failure"|"complete": {task, queue, priority, max_attempts, timeout}}
    sa.Column("callbacks", LongText, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("success_fired_at", Timestamp, nullable=True),
    sa.Column("failure_fired_at", Timestamp, nullable=True),
    sa.Column("complete_fired_at", Timestamp, nullable=True),
    sa.Index("ix_batches_complete_fired_at", "complete_fired_at"),
)

# -- workflows: DAGs of steps, each step a job once its dependencies succeeded ---------------

WorkflowId = sa.String(64)

workflows = sa.Table(
    "workflows",
    metadata,
    sa.Column("id", WorkflowId, primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    # running | succeeded | failed | cancelled
    sa.Column("state", sa.String(16), nullable=False),
    # stop | continue
    sa.Column("on_failure", sa.String(16), nullable=False),
    sa.Column("steps_total", sa.Integer, nullable=False),
    sa.Column("steps_done", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("last_progress_at", Timestamp, nullable=False),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Index("ix_workflows_state_last_progress_at", "state", "last_progress_at"),
)

# A step is a row until its dependencies succeeded; then its job is inserted and job_id set.
# Written only while the workflow's row is locked, so concurrent step completions serialize.
workflow_steps = sa.Table(
    "workflow_steps",
    metadata,
    sa.Column("workflow_id", WorkflowId, primary_key=True),
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("task", sa.String(200), nullable=False),
    sa.Column("queue", sa.String(64), nullable=False),
    sa.Column("args", LongText, nullable=False),
    sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
    sa.Column("timeout_seconds", sa.Float, nullable=True),
    # JSON list of step names
    sa.Column("depends_on", sa.Text, nullable=False),
    # waiting | queued | succeeded | failed | cancelled
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("job_id", JobId, nullable=True),
)

# The feed subscribers poll from a cursor (ids increase); Redis pub/sub only wakes them.
workflow_events = sa.Table(
    "workflow_events",
    metadata,
    sa.Column("id", JobId, primary_key=True, autoincrement=True),
    sa.Column("workflow_id", WorkflowId, nullable=False),
    sa.Column("type", sa.String(32), nullable=False),
    sa.Column("step", sa.String(64), nullable=True),
    sa.Column("job_id", JobId, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("ix_workflow_events_workflow_id_id", "workflow_id", "id"),
)
