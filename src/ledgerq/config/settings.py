"""Settings: read once at start from arguments, ``LEDGERQ_*`` variables and ``.env``; the only
module that reads the environment. Unknown ``LEDGERQ_*`` variables are errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from ledgerq.core import errors
from ledgerq.core.job import check_queue_name
from ledgerq.core.redaction import mask_url
from ledgerq.core.redis_url import check_redis_url

ENV_PREFIX = "LEDGERQ_"
# Variables of ledgerq's own test suite and tools, not settings.
_NOT_SETTINGS = ("LEDGERQ_TEST_", "LEDGERQ_SOAK", "LEDGERQ_BENCH_")


class Settings(BaseSettings):
    """Every setting, with its unit in the name or the docstring."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        extra="forbid",
        frozen=True,
        # ``inf`` or ``nan`` is never a number of seconds (an infinite heartbeat interval
        # would make every worker look dead): refused in every float setting.
        allow_inf_nan=False,
    )

    app: str | None = None
    """The application whose tasks run, as ``module:attribute``. Defaults to none."""
    database_url: SecretStr = SecretStr("sqlite:///ledgerq.db")
    """SQLAlchemy URL of the ledger. Defaults to ``sqlite:///ledgerq.db``."""
    database_read_url: SecretStr | None = None
    """SQLAlchemy URL of a read replica of the ledger (a PostgreSQL streaming standby, a
    MariaDB replica) for reads that may lag: the dashboard, the admin API's list and stats
    endpoints and ``ledgerq queue stats``. Nothing that claims or writes uses it. Unset: they
    read the ledger itself. Defaults to unset."""
    redis_url: SecretStr | None = None
    """Redis URL of the transport: ``redis://``, ``rediss://``, ``unix://``, or
    ``redis+sentinel://[:password@]host:26379,host2:26379/mymaster[/db]`` for a master that
    Redis Sentinel fails over; Redis Cluster is refused. Unset means the ``dbpoll`` driver.
    Defaults to unset."""
    namespace: str = "ledgerq"
    """Prefix of every Redis key; separates environments. Defaults to ``ledgerq``."""
    queues: Annotated[tuple[str, ...], NoDecode] = ("default",)
    """Queues a worker takes jobs from, comma-separated in the environment."""
    concurrency: int = Field(default=8, ge=1, le=1024)
    """Jobs one worker process runs at once. Defaults to 8."""
    prefetch: int | None = Field(default=None, ge=0, le=10000)
    """Jobs a worker claims ahead of its free slots, so short jobs never wait for the next
    round trip; 0 for strict fairness between workers when jobs are long. Unset (the
    default): about 20 ms of work at the recent job duration, between 1x and 2x the
    concurrency."""
    pin_cpu: bool = False
    """Pin each worker process to a CPU no other worker on the host holds (Linux): its threads'
    hand-overs of the GIL then stay on one core, which makes I/O-bound jobs much cheaper. Off
    by default: workers in separate containers cannot see each other's CPUs. Defaults to off."""
    batch_size: int = Field(default=32, ge=1, le=1000)
    """Most jobs claimed per round trip. Defaults to 32."""
    poll_interval: float = Field(default=1.0, gt=0, le=60)
    """Seconds between polls of an idle worker (LISTEN/NOTIFY wakes it earlier). Defaults to 1."""
    heartbeat_interval: float = Field(default=5.0, gt=0)
    """Seconds between heartbeats of running jobs. Defaults to 5."""
    worker_ttl: float = Field(default=15.0, gt=0)
    """Seconds without heartbeat before a worker and its leases count as lost. Defaults to 15."""
    worker_health_check_interval: float = Field(default=30.0, gt=0)
    """Seconds between a worker's health-check records. Defaults to 30."""
    failover_check_interval: float = Field(default=5.0, gt=0)
    """Seconds between checks for lost workers. Defaults to 5."""
    unknown_task_grace: float = Field(default=300.0, ge=0)
    """Seconds a job of a task its worker does not register may wait, from its first put-back,
    while no live worker of its queue declares the task, before it is buried (``dead``, error
    kind ``unknown_task``). Until then it goes back to the queue without spending an attempt
    (a rolling deploy: old workers meet new tasks). Defaults to 300."""
    stuck_after: float = Field(default=900.0, gt=0)
    """Seconds without heartbeat or progress before a job counts as stuck. Defaults to 900."""
    requeue_after: float = Field(default=60.0, gt=0)
    """Seconds a queued job may wait before its id is sent again. Defaults to 60."""
    reconcile_interval: float = Field(default=15.0, gt=0, le=3600)
    """Seconds between reconciler passes (inside workers and ``ledgerq reconcile``).
    Defaults to 15."""
    artifact_root: Path | None = None
    """Folder holding one sub-folder per job id (``<root>/<job id>``) that the reconciler
    deletes with the job. Defaults to unset (jobs have no folders)."""
    workflow_stuck_after: float = Field(default=600.0, gt=0)
    """Seconds without progress before the reconciler checks and resumes a running workflow.
    Defaults to 600."""
    retention_succeeded: float = Field(default=7 * 86400.0, gt=0)
    """Seconds succeeded jobs are kept. Defaults to 7 days."""
    retention_failed: float = Field(default=30 * 86400.0, gt=0)
    """Seconds dead and cancelled jobs are kept. Defaults to 30 days."""
    retention_health_checks: float = Field(default=7 * 86400.0, gt=0)
    """Seconds ``worker_health_checks`` rows are kept. Defaults to 7 days."""
    retention_failover_events: float = Field(default=30 * 86400.0, gt=0)
    """Seconds ``failover_events`` rows are kept. Defaults to 30 days."""
    retention_assignments: float = Field(default=30 * 86400.0, gt=0)
    """Seconds ended attempts stay in ``job_assignments`` (running ones always stay).
    Defaults to 30 days."""
    retention_schedule_runs: float = Field(default=30 * 86400.0, gt=0)
    """Seconds fired ticks stay in ``schedule_runs`` (each schedule's newest run with a job
    always stays). Defaults to 30 days."""
    retention_job_items: float = Field(default=7 * 86400.0, gt=0)
    """Seconds finished batch items stay in ``job_items`` once their job is deleted (items of
    a job that exists always stay). Defaults to 7 days."""
    retention_batches: float = Field(default=30 * 86400.0, gt=0)
    """Seconds a batch stays after its completion fired (a batch with an unfinished member
    always stays). Defaults to 30 days."""
    shutdown_grace: float = Field(default=30.0, ge=0)
    """Seconds a stopping worker gives in-flight jobs before putting them back. Defaults to 30."""
    db_pool_size: int = Field(default=10, ge=1, le=200)
    """Connections per process in the database pool. Defaults to 10."""
    db_pooler: Literal["none", "pgbouncer"] = "none"
    """``pgbouncer``: ``DATABASE_URL`` leads to PgBouncer in transaction pooling mode (or a
    pooler like it), so no connection relies on session state: no prepared statements, no
    session settings or locks, LISTEN only over ``DATABASE_DIRECT_URL`` (see
    docs/operations.md). PostgreSQL only. Defaults to none."""
    database_direct_url: SecretStr | None = None
    """With ``DB_POOLER=pgbouncer``: a URL of the same database that bypasses the pooler, used
    only by the one LISTEN connection per process that wakes idle workers; unset, idle workers
    poll every ``POLL_INTERVAL``. Defaults to unset."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Least severe log level shown. Defaults to INFO."""
    log_format: Literal["json", "text"] = "text"
    """``json`` for machines, ``text`` for people. Defaults to text."""
    log_jobs: bool = True
    """Whether workers log a line when each job starts and succeeds (failed, cancelled and dead
    attempts are always logged). Turn off for high volume. Defaults to on."""
    api_token: SecretStr | None = None
    """Admin bearer token(s) of the HTTP API, comma-separated for rotation; unset means
    ``ledgerq serve`` makes a one-off token and binds loopback only. Defaults to unset."""
    api_read_token: SecretStr | None = None
    """Read-only bearer token(s) of the HTTP API, comma-separated. Defaults to unset."""
    api_producer_token: SecretStr | None = None
    """Producer bearer token(s) of the HTTP API, comma-separated: each may enqueue (jobs,
    bulk, batches, workflows) and read the jobs it enqueued, nothing else. ``name:token``
    names the producer its jobs record (a bare token: ``producer``). Defaults to unset."""
    api_request_timeout: float = Field(default=10.0, gt=0, le=600)
    """Seconds a client of ``ledgerq serve`` may take to send a whole request (head and body)
    after connecting or starting it; slower connections are closed. Defaults to 10."""
    api_max_connections: int = Field(default=200, ge=2, le=100_000)
    """Connections ``ledgerq serve`` holds at once; past it requests get 503. Defaults to 200."""
    max_payload_bytes: int = Field(default=256 * 1024, ge=64, le=64 * 1024 * 1024)
    """Largest encoded job arguments, in bytes. Defaults to 262144."""
    spool: str = "off"
    """Where a producer keeps enqueues the database cannot take while it is down: ``off``
    (enqueue raises ``StoreUnavailable``), ``redis`` (lists in ``REDIS_URL``'s Redis) or
    ``file:/path/to/folder`` (``file`` alone: ``./ledgerq-spool``). Workers replay it; see
    docs/operations.md, "Enqueue spool". Defaults to off."""
    redis_push: Literal["pipelined", "background", "inline"] = "pipelined"
    """How a producer sends the ids of committed jobs to Redis: ``pipelined`` (written on
    the caller's thread right after the commit; ``enqueue`` does not wait for Redis's reply,
    which is read later), ``background`` (a thread of the producer's sends them, batched,
    after ``enqueue`` returned) or ``inline`` (sent and answered before ``enqueue``
    returns). The job is committed first in every mode; a hint that is never sent only
    costs latency: idle workers claim by query and the reconciler re-sends it. Defaults to
    pipelined."""
    locks_backend: Literal["database", "redis"] = "database"
    """Where ``app.lock`` keeps locks: the ``distributed_locks`` table, or Redis keys (needs
    ``REDIS_URL``); fencing tokens come from the database either way. Defaults to database."""

    @field_validator("queues", mode="before")
    @classmethod
    def _split_queues(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [q.strip() for q in value.split(",") if q.strip()]
        return value

    @field_validator("queues")
    @classmethod
    def _check_queues(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one queue is needed")
        for name in value:
            check_queue_name(name)
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_redis_url(value.get_secret_value())
        return value

    @field_validator("spool")
    @classmethod
    def _check_spool(cls, value: str) -> str:
        spool_folder(value)
        return value

    @model_validator(mode="after")
    def _check_spool_redis(self) -> Settings:
        if self.spool == "redis" and self.redis_url is None:
            raise ValueError("spool=redis needs redis_url (LEDGERQ_REDIS_URL)")
        return self

    @model_validator(mode="after")
    def _check_direct_url(self) -> Settings:
        if self.database_direct_url is not None and self.db_pooler == "none":
            raise ValueError(
                "database_direct_url is only used with db_pooler=pgbouncer (it carries LISTEN"
                " past the pooler); set LEDGERQ_DB_POOLER or unset it"
            )
        return self

    @model_validator(mode="after")
    def _check_heartbeat(self) -> Settings:
        if self.heartbeat_interval >= self.worker_ttl:
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval:g} s) must be shorter than"
                f" worker_ttl ({self.worker_ttl:g} s), or every worker looks dead between"
                " two heartbeats"
            )
        return self

    def masked(self) -> dict[str, Any]:
        """Every setting, with secrets (passwords in URLs, tokens) replaced by ``***``."""
        shown: dict[str, Any] = {}
        for name, value in self.model_dump().items():
            if isinstance(value, SecretStr):
                shown[name] = mask_url(value.get_secret_value()) if name.endswith("_url") else "***"
            elif isinstance(value, Path):
                shown[name] = str(value)
            else:
                shown[name] = list(value) if isinstance(value, tuple) else value
        return shown


def spool_folder(spool: str) -> Path | None:
    """The folder of a ``file`` spool setting, None for ``off`` and ``redis``; ``ValueError``
    for anything else."""
    if spool in ("off", "redis"):
        return None
    if spool == "file":
        return Path("ledgerq-spool")
    if spool.startswith("file:") and spool[5:].strip():
        return Path(spool[5:])
    raise ValueError(f"spool must be off, redis, or file:/path/to/folder, got {spool!r}")


def load_settings(**overrides: Any) -> Settings:
    """Build Settings (arguments win over the environment) or raise ``ConfigError``."""
    unknown = sorted(
        key
        for key in os.environ
        if key.startswith(ENV_PREFIX)
        and not key.startswith(_NOT_SETTINGS)
        and key[len(ENV_PREFIX) :].lower() not in Settings.model_fields
    )
    if unknown:
        raise errors.ConfigError(f"unknown setting(s) in the environment: {', '.join(unknown)}")
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise errors.ConfigError(f"invalid settings: {problems}") from None
    except (errors.LedgerqError, SettingsError) as exc:
        raise errors.ConfigError(f"invalid settings: {exc}") from None
