"""The append-only event store: SQLite by default, PostgreSQL through DATABASE_URL.

Guarantees, checked by one contract suite against both databases:
- append with an expected stream version: a stale writer gets ConcurrencyConflict, never an overwrite;
- append is idempotent on event_id: appending the same events again returns the stored ones;
- every event gets a global position, and positions become visible in order. Appends take one
  database-wide lock for the length of their transaction (BEGIN IMMEDIATE on SQLite, an advisory
  transaction lock on PostgreSQL). Without it a reader following `read_all(after=p)` could pass a
  position whose transaction commits later and never see that event.
- consumers (the planner) record how far they have processed in the same transaction as the events
  they append, so a restarted consumer resumes exactly where it stopped.
"""
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC

from pydantic import ValidationError
from sqlalchemy import (JSON, BigInteger, Column, DateTime, Integer, MetaData, String, Table, UniqueConstraint,
                        create_engine, event, func, insert, select, text)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from shared.domain.events import EVENTS, Event, EventRegistry, Undecodable

metadata = MetaData()
events_table = Table(
    "kforge_events", metadata,
    Column("position", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("event_id", String(36), nullable=False, unique=True),
    Column("stream_id", String(200), nullable=False),
    Column("stream_version", Integer, nullable=False),
    Column("type", String(100), nullable=False, index=True),  # read models and limits count by type
    Column("version", Integer, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("payload", JSON, nullable=False),
    UniqueConstraint("stream_id", "stream_version", name="uq_kforge_events_stream_version"),
)
tracking_table = Table(
    "kforge_tracking", metadata,
    Column("consumer", String(100), primary_key=True),
    Column("position", BigInteger, nullable=False),
)
_APPEND_LOCK_KEY = 0x6B666F7267  # "kforge": the PostgreSQL advisory lock serialising appends


class ConcurrencyConflict(RuntimeError):
    """The stream moved on since the writer read it: reload, decide again, retry."""


@dataclass(frozen=True)
class OpenLimit:
    """At most `limit` streams may be open: with an `opened` event and none of the `closing` types (each
    stream closes at most once). With `where` (a payload field and its value) only the streams whose
    `opened` event has it count. Checked inside the append's lock, so concurrent appends cannot overshoot."""

    opened: str
    closing: tuple[str, ...]
    limit: int
    where: tuple[str, str] | None = None


class TooManyOpen(RuntimeError):
    """A new stream was refused: as many streams as `limit` allows are open (opened and not yet closed)."""

    def __init__(self, open_streams: int, limit: OpenLimit):
        super().__init__(f"{open_streams} streams are open")
        self.open_streams, self.limit = open_streams, limit


class UnreadableEvent(RuntimeError):
    """A stored event this build cannot decode; `undecodable` says which and why."""

    def __init__(self, undecodable: Undecodable):
        super().__init__(undecodable.describe())
        self.undecodable = undecodable


class EventStore:
    def __init__(self, url: str, registry: EventRegistry = EVENTS):
        self.url = url
        self.registry = registry
        self.engine = _engine(url)
        metadata.create_all(self.engine)

    # --- writing ---------------------------------------------------------------------------------
    def append(self, stream_id: str, events: Sequence[Event], expected_version: int | None,
               open_limits: Sequence[OpenLimit] = ()) -> list[Event]:
        """Append `events` to `stream_id` if it is at `expected_version` (None: any version), and only while
        fewer streams are open than each of `open_limits` allows (else TooManyOpen).

        Returns the events as stored, with stream_version and position set."""
        try:
            with self._transaction() as conn:
                for limit in open_limits:
                    self._check_open(conn, limit)
                return self._append(conn, stream_id, events, expected_version)
        except IntegrityError as exc:
            raise ConcurrencyConflict(f"stream {stream_id}: concurrent append ({exc.orig})") from None

    def _append(self, conn: Connection, stream_id: str, events: Sequence[Event], expected: int | None) -> list[Event]:
        if not events:
            return []
        if any(e.stream_id != stream_id for e in events):
            raise ValueError(f"every event appended to {stream_id} must carry stream_id={stream_id}")
        ids = [str(e.event_id) for e in events]
        stored = conn.execute(select(events_table).where(events_table.c.event_id.in_(ids))).all()
        if len(stored) == len(ids):
            return [self._decode(row) for row in sorted(stored, key=lambda r: r.position)]
        if stored:
            raise ConcurrencyConflict(f"stream {stream_id}: {len(stored)} of {len(ids)} events were already stored")
        current = self._version(conn, stream_id)
        if expected is not None and current != expected:
            raise ConcurrencyConflict(f"stream {stream_id} is at version {current}, the writer expected {expected}")
        recorded = []
        for offset, e in enumerate(events, start=1):
            position = conn.execute(
                insert(events_table).values(
                    event_id=str(e.event_id), stream_id=stream_id, stream_version=current + offset, type=e.type,
                    version=e.version, occurred_at=e.occurred_at.astimezone(UTC), payload=e.payload(),
                ).returning(events_table.c.position)
            ).scalar_one()
            recorded.append(e.model_copy(update={"stream_version": current + offset, "position": position}))
        return recorded

    # --- reading ---------------------------------------------------------------------------------
    def read_stream(self, stream_id: str, up_to_position: int | None = None, after_version: int = 0) -> list[Event]:
        """A stream's events in order; `after_version` skips those a follower has seen already."""
        query = _stream_query(stream_id, up_to_position).where(events_table.c.stream_version > after_version)
        with self.engine.connect() as conn:
            return [self._decode(r) for r in conn.execute(query)]

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[Event]:
        """Events of every stream in global order, for catch-up subscriptions."""
        query = (select(events_table).where(events_table.c.position > after_position)
                 .order_by(events_table.c.position).limit(limit))
        with self.engine.connect() as conn:
            return [self._decode(r) for r in conn.execute(query)]

    def read_log(self, after_position: int = 0, limit: int = 1000) -> list[Event | Undecodable]:
        """As read_all, with an event that cannot be decoded in its place as Undecodable: for read models
        spanning every stream, which must go on past it."""
        query = (select(events_table).where(events_table.c.position > after_position)
                 .order_by(events_table.c.position).limit(limit))
        with self.engine.connect() as conn:
            return [self._decode_or_undecodable(r) for r in conn.execute(query)]

    def read_types(self, types: Collection[str], stream_prefix: str = "") -> list[Event]:
        """Every event of the given types (in streams starting with `stream_prefix`), in global order: what a
        read model spanning jobs needs, without reading their measurements. An event this build cannot decode
        is left out, so one job's unreadable event never breaks a read model of every job; that job reports it
        when it is read on its own."""
        query = select(events_table).where(events_table.c.type.in_(types)
                                           & events_table.c.stream_id.startswith(stream_prefix, autoescape=True))
        with self.engine.connect() as conn:
            decoded = [self._decode_or_undecodable(r) for r in conn.execute(query.order_by(events_table.c.position))]
        return [e for e in decoded if not isinstance(e, Undecodable)]

    def stream_has(self, stream_id: str, type_name: str) -> bool:
        """Whether a stream holds an event of this type (a running task asks if its job was cancelled)."""
        query = select(events_table.c.position).where((events_table.c.stream_id == stream_id)
                                                      & (events_table.c.type == type_name)).limit(1)
        with self.engine.connect() as conn:
            return conn.execute(query).first() is not None

    def stream_version(self, stream_id: str) -> int:
        with self.engine.connect() as conn:
            return self._version(conn, stream_id)

    def stream_ids(self, prefix: str = "") -> list[str]:
        """Streams whose id starts with `prefix`, oldest first."""
        query = (select(events_table.c.stream_id).where(events_table.c.stream_id.startswith(prefix, autoescape=True))
                 .group_by(events_table.c.stream_id).order_by(func.min(events_table.c.position)))
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    # --- consumers ---------------------------------------------------------------------------------
    @contextmanager
    def consuming(self, consumer: str) -> Iterator["Consumption"]:
        """One transaction in which `consumer` alone takes its next event, appends its reaction and
        advances its tracking position; all of it commits, or none of it."""
        try:
            with self._transaction() as conn:
                yield Consumption(self, conn, consumer)
        except IntegrityError as exc:
            raise ConcurrencyConflict(f"consumer {consumer}: concurrent update ({exc.orig})") from None

    def tracked_position(self, consumer: str) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(tracking_table.c.position).where(tracking_table.c.consumer == consumer)
                                ).scalar_one_or_none() or 0

    # --- plumbing ----------------------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.execution_options(kforge_write=True).begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _APPEND_LOCK_KEY})
            yield conn

    @staticmethod
    def _check_open(conn: Connection, limit: OpenLimit) -> None:
        opened = events_table.c.type == limit.opened
        if limit.where is not None:
            field, value = limit.where
            opened &= events_table.c.payload[field].as_string() == value
        closed = events_table.c.type.in_(limit.closing)
        if limit.where is not None:
            closed &= events_table.c.stream_id.in_(select(events_table.c.stream_id).where(opened))
        open_streams = (conn.execute(select(func.count()).where(opened)).scalar_one()
                        - conn.execute(select(func.count()).where(closed)).scalar_one())
        if open_streams >= limit.limit:
            raise TooManyOpen(open_streams, limit)

    @staticmethod
    def _version(conn: Connection, stream_id: str) -> int:
        return conn.execute(select(func.max(events_table.c.stream_version))
                            .where(events_table.c.stream_id == stream_id)).scalar_one() or 0

    def _decode(self, row) -> Event:
        """The row's event, or UnreadableEvent naming it when this build cannot read it."""
        decoded = self._decode_or_undecodable(row)
        if isinstance(decoded, Undecodable):
            raise UnreadableEvent(decoded)
        return decoded

    def _decode_or_undecodable(self, row) -> Event | Undecodable:
        occurred = row.occurred_at if row.occurred_at.tzinfo else row.occurred_at.replace(tzinfo=UTC)
        envelope = {"event_id": row.event_id, "stream_id": row.stream_id, "stream_version": row.stream_version,
                    "position": row.position, "occurred_at": occurred}
        try:
            return self.registry.decode(row.type, row.version, dict(row.payload), envelope)
        except (LookupError, ValidationError) as exc:
            # Which fields failed, not their values: the reason is shown to API clients.
            reason = str(exc) if isinstance(exc, LookupError) else \
                f"{exc.error_count()} invalid field(s): {', '.join(_field(e['loc']) for e in exc.errors())}"
            return Undecodable(position=row.position, stream_id=row.stream_id, stream_version=row.stream_version,
                               occurred_at=occurred, type=row.type, version=row.version, reason=reason)

    def close(self) -> None:
        self.engine.dispose()


class Consumption:
    """A consumer's view inside its transaction (see EventStore.consuming)."""

    def __init__(self, store: EventStore, conn: Connection, consumer: str):
        self._store, self._conn, self.consumer = store, conn, consumer
        self.position = conn.execute(
            select(tracking_table.c.position).where(tracking_table.c.consumer == consumer).with_for_update()
        ).scalar_one_or_none()

    def next_event(self, types: Collection[str] | None = None) -> Event | None:
        """The next event after the tracked position, or with `types` the next of those types: the
        events passed over are of no interest to this consumer and count as processed, so a job's
        hundreds of measurements cost the planner one query, not one transaction each."""
        after = events_table.c.position > (self.position or 0)
        query = select(events_table).where(after if types is None else after & events_table.c.type.in_(types))
        row = self._conn.execute(query.order_by(events_table.c.position).limit(1)).first()
        if row is not None:
            return self._store._decode(row)
        if types is not None:  # nothing wanted is left: everything up to the newest event is passed over
            newest = self._conn.execute(select(func.max(events_table.c.position)).where(after)).scalar_one()
            if newest is not None:
                self.advance(newest)
        return None

    def read_stream(self, stream_id: str, up_to_position: int | None = None) -> list[Event]:
        return [self._store._decode(r) for r in self._conn.execute(_stream_query(stream_id, up_to_position))]

    def append(self, stream_id: str, events: Sequence[Event], expected_version: int | None) -> list[Event]:
        return self._store._append(self._conn, stream_id, events, expected_version)

    def advance(self, position: int) -> None:
        if self.position is None:
            self._conn.execute(insert(tracking_table).values(consumer=self.consumer, position=position))
        else:
            self._conn.execute(tracking_table.update().where(tracking_table.c.consumer == self.consumer)
                               .values(position=position))
        self.position = position


def _field(loc: tuple) -> str:
    return ".".join(str(part) for part in loc) or "(the payload)"


def _stream_query(stream_id: str, up_to_position: int | None):
    query = select(events_table).where(events_table.c.stream_id == stream_id)
    if up_to_position is not None:
        query = query.where(events_table.c.position <= up_to_position)
    return query.order_by(events_table.c.stream_version)


def _engine(url: str) -> Engine:
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _sqlite_connect(dbapi_conn, _record):
        # Let SQLAlchemy, not pysqlite, open transactions, so that a writer's BEGIN IMMEDIATE below takes
        # the write lock at the start: that lock orders positions and serialises consumers on SQLite.
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA busy_timeout=30000")

    @event.listens_for(engine, "begin")
    def _sqlite_begin(conn):
        # Readers take no lock (WAL gives them a snapshot); writers take the write lock up front.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("kforge_write") else "BEGIN")

    return engine
