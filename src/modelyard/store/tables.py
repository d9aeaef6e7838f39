"""The database tables: desired state (deployments), actual state (instances) and what supports them.

The API writes desired state; the controller (``modelyard.control``) reads it and writes actual
state. Every instance transition is also appended to ``instance_events`` with its reason, so the
history survives a server restart. Changing a table means a new Alembic revision in
``store/migrations/versions``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    event,
    false,
    select,
    true,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import DeclarativeBase, Mapped, Mapper, mapped_column, relationship
from sqlalchemy.types import TypeDecorator


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_uid() -> str:
    """A unique id that is never reused (log folders, events, engine labels)."""
    return uuid.uuid4().hex


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every database (SQLite returns naive ones otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: use modelyard.store.tables.utc_now()")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        list[str]: JSON,
        list[int]: JSON,
    }


class User(Base):
    """A console / CLI account. The first one, ``admin``, is created at first start."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(256))
    # Kept for older code; ``role`` decides (``modelyard.services.roles``): True exactly for admins.
    is_admin: Mapped[bool] = mapped_column(default=False)
    # "admin", "operator" or "member" (``modelyard.services.roles.Role``).
    role: Mapped[str] = mapped_column(String(16), default="member", server_default="member")
    # A disabled user cannot sign in; its sessions and the keys it owns stay as they are.
    disabled: Mapped[bool] = mapped_column(default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
    password_changed_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)


DEFAULT_PROJECT = "default"
# ``api_keys.reach``: which deployments the gateway lets a key reach (external API: key listings).
KeyReach = Literal["project", "member_projects", "every_project"]
KEY_REACHES: tuple[KeyReach, ...] = ("project", "member_projects", "every_project")


class Project(Base):
    """A team's share of the platform: it owns deployments and API keys; its members see them.

    The quotas hold for every key of the project together, on top of each key's own limits
    (``server/gateway/project_limits.py``); None: no limit of that kind."""

    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    tokens_per_day: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    tokens_per_month: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_concurrent_requests: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)


class ProjectMember(Base):
    """A user's membership of a project (admins and operators see every project anyway)."""

    __tablename__ = "project_members"
    __table_args__ = (UniqueConstraint("project_id", "user_id", name="uq_project_members_project_user"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)


class AuditEvent(Base):
    """Who did what to which object, and when (``services/audit.py``). Never holds a secret:
    ``details`` is what changed, with keys, passwords and tokens left out."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, index=True)
    # The username (kept when the user is removed); the CLI token acts as "admin".
    actor: Mapped[str] = mapped_column(String(64), index=True)
    # One of ``services/audit.py``'s ACTIONS: "create", "update", "delete", "stop", "login", ...
    action: Mapped[str] = mapped_column(String(32), index=True)
    # "deployment", "key", "user", "project", "session".
    object_type: Mapped[str] = mapped_column(String(32), index=True)
    object_name: Mapped[str] = mapped_column(String(256), index=True)
    project: Mapped[str | None] = mapped_column(String(64), nullable=True)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ApiKey(Base):
    """A gateway key. Only a hash is stored; the key itself is shown once at creation."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # The first characters of the key (e.g. "my-3f9a1c"), shown in listings to tell keys apart.
    prefix: Mapped[str] = mapped_column(String(32))
    key_hash: Mapped[str] = mapped_column(String(128), unique=True)
    # The project the key belongs to (set to ``default`` when not given)
    # and the user who made it (None: made by the CLI token or before users had keys).
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    owner_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True, default=None
    )
    project: Mapped[Project] = relationship(lazy="joined")
    owner: Mapped[User | None] = relationship(lazy="joined")
    # Which deployments the gateway lets the key reach (``KeyReach``): its project's ("project"),
    # those of its owner's projects ("member_projects": a member's playground key) or every
    # project's ("every_project": the console's own key, used by admins and operators).
    reach: Mapped[str] = mapped_column(String(16), default="project", server_default="project")
    # None: every deployment. A list: only these deployment names.
    allowed_deployments: Mapped[list[str] | None] = mapped_column(JSON, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # Limits (None: none; server/gateway/limits.py): requests and tokens (prompt + completion)
    # per minute, requests at once, tokens per quota_period ("day" or "month", UTC calendar).
    requests_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tokens_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_concurrent_requests: Mapped[int | None] = mapped_column(Integer, nullable=True)
    token_quota: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    quota_period: Mapped[str | None] = mapped_column(String(8), nullable=True)


class ModelFile(Base):
    """Model weights on disk, registered by path (``source="local"``) or, later, fetched from a hub.

    ``state`` is one of ``valid``, ``invalid`` (``reasons`` says why) or, for hub downloads,
    ``downloading`` with ``downloaded_bytes`` / ``size_bytes`` as progress, ``incomplete``
    when the download failed or was cancelled (``reasons`` names the files), and ``unverified``:
    servable, but a file the hub gave no hash for was checked by its size only (``reasons`` names
    the files; a deployment warns). A pulled or imported model keeps its manifest (every file,
    size, SHA-256 and how it was checked against the hub) in ``details["manifest"]`` and the
    counts in ``details["verification"]``.
    """

    __tablename__ = "model_files"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    source: Mapped[str] = mapped_column(String(32), default="local")
    path: Mapped[str] = mapped_column(Text)
    # Hub downloads (a later issue): where it came from and how far it got.
    repo_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    revision: Mapped[str | None] = mapped_column(String(128), nullable=True)
    downloaded_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    state: Mapped[str] = mapped_column(String(32), default="valid")
    reasons: Mapped[list[str]] = mapped_column(JSON, default=list)
    architecture: Mapped[str | None] = mapped_column(String(128), nullable=True)
    model_type: Mapped[str | None] = mapped_column(String(64), nullable=True)
    dtype: Mapped[str | None] = mapped_column(String(32), nullable=True)
    parameter_count: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    size_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # False: the files are only on the cluster's workers (``models add --worker``, ``models push
    # --bundle``); ``path`` is where they are there, and the server's host has no copy.
    on_server: Mapped[bool] = mapped_column(default=True, server_default=true())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, onupdate=utc_now)


class WorkerModel(Base):
    """One model's files on one worker of a cluster, as the server last found them
    (``server/model_survey.py``) or as a push left them (``cluster/model_push.py``).

    ``state``: ``verified`` (every file's SHA-256 matched the model's manifest when ``verified_at``
    says, and every file still has its size), ``present`` (servable there, hashes not checked),
    ``missing``, ``incomplete`` (files missing or of another size; ``details["problems"]``),
    ``damaged`` (a SHA-256 did not match), ``invalid`` (not a servable model directory there),
    ``copying`` (a push to it runs). Rows are kept when the worker leaves (the API says ``lost``).
    """

    __tablename__ = "worker_models"
    __table_args__ = (UniqueConstraint("model_file_id", "worker", name="uq_worker_models_model_worker"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_file_id: Mapped[int] = mapped_column(ForeignKey("model_files.id", ondelete="CASCADE"), index=True)
    # The worker's name (``modelyard.io/worker``, as ``modelyard workers`` shows it).
    worker: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    verified_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    checked_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)


class ModelTask(Base):
    """A long job on model files, owned by the server's ``DownloadManager`` (``modelyard.downloads``):
    ``kind`` is ``pull`` (from a hub), ``import`` (a bundle) or ``export`` (to a bundle).

    ``state``: ``queued`` -> ``running`` -> ``completed`` | ``failed`` | ``cancelled``; a server
    restart puts ``running`` tasks back to ``queued`` and they resume where their files stopped.
    ``files`` holds the plan and per-file progress (path, size, hashes, state, bytes, attempts,
    last error); ``options`` what the user asked (patterns, quantisation, the hub's endpoint and
    the commit the revision resolved to).
    """

    __tablename__ = "model_tasks"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    model_name: Mapped[str] = mapped_column(String(128), index=True)
    state: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    # hf://ORG/NAME@REV, ms://..., or the archive path of an import.
    source: Mapped[str] = mapped_column(Text)
    # The model directory (pull, import) or the archive (export).
    target_path: Mapped[str] = mapped_column(Text)
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    files: Mapped[list[Any]] = mapped_column(JSON, default=list)
    total_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    done_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    # How many times the manager started it (a restart or a resume adds one).
    run_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, onupdate=utc_now)


class CustomBackend(Base):
    """A backend added by a user (imported YAML). Built-in backends live in the package catalog."""

    __tablename__ = "custom_backends"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # The backend in modelyard's own spec shape (``modelyard.backends.spec.BackendSpec`` as JSON).
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, onupdate=utc_now)


class RegistryCredential(Base):
    """A container registry's username and password, which backend versions name in
    ``registry_credential`` to pull their image. ``password`` is sealed (``store/secret_box.py``)
    and never shown; only the controller opens it, for the one pull request that needs it."""

    __tablename__ = "registry_credentials"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # The registry host (and port) the credential is for: "registry.example.com", "127.0.0.1:5000".
    registry_host: Mapped[str] = mapped_column(String(256))
    username: Mapped[str] = mapped_column(String(256))
    password: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, onupdate=utc_now)


class Deployment(Base):
    """Desired state: serve ``model_file`` under ``name`` with ``replicas`` copies.

    ``name`` is the model name clients send in ``"model"``. ``desired_state`` is ``running`` or
    ``stopped``. GPUs are asked for either as a count per replica or as explicit ids.
    """

    __tablename__ = "deployments"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Unique for ever: a name deployed again after `rm` is another deployment with its own events.
    uid: Mapped[str] = mapped_column(String(32), unique=True, index=True, default=new_uid)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # The project the deployment belongs to (set to ``default`` when not given).
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    model_file_id: Mapped[int] = mapped_column(ForeignKey("model_files.id"))
    backend: Mapped[str] = mapped_column(String(128))
    backend_version: Mapped[str] = mapped_column(String(64))
    replicas: Mapped[int] = mapped_column(Integer, default=1)
    gpus_per_replica: Mapped[int] = mapped_column(Integer, default=0)
    gpu_ids: Mapped[list[int] | None] = mapped_column(JSON, nullable=True, default=None)
    backend_parameters: Mapped[list[str]] = mapped_column(JSON, default=list)
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    desired_state: Mapped[str] = mapped_column(String(16), default="running")
    skip_verification: Mapped[bool] = mapped_column(default=False)
    # How the gateway picks a replica: "least-outstanding" or "prefix" (control/endpoints.py).
    routing: Mapped[str] = mapped_column(
        String(32), default="least-outstanding", server_default="least-outstanding"
    )
    # Where replicas go and how much they take (control/placement.py): {"gpu_memory": "auto" or
    # bytes per GPU (absent: whole GPUs), "nodes": ranks per replica, "worker_labels": {...},
    # "workers": [ids or names], "gpu_model": "L40S"}. None: whole GPUs on any worker.
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    # Limits for every key together (None: none; server/gateway/limits.py): requests and tokens
    # (prompt + completion) per minute, requests at once.
    requests_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tokens_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_concurrent_requests: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Doctor's warnings at deploy time, kept to show in `ps` and the console.
    warnings: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # Replicas on load (control/autoscale/config.py AutoscaleConfig as JSON); None: set by hand.
    # While set, the autoscaler writes ``replicas``.
    autoscale: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, onupdate=utc_now)

    model_file: Mapped[ModelFile] = relationship(lazy="joined")
    instances: Mapped[list[Instance]] = relationship(
        back_populates="deployment", cascade="all, delete-orphan", order_by="Instance.replica_index"
    )


class Instance(Base):
    """Actual state: one replica of a deployment, i.e. one engine (or gang of ranks) at a time.

    ``state`` is one of ``modelyard.control.states.InstanceState``; ``reason`` says why it is
    there. ``runtime`` and ``handle`` (``modelyard.runtimes.base.EngineHandle`` as JSON) identify
    the engine so that a restarted server can re-adopt it; ``launch_token`` is written before each
    start and carried by the engine, so that an engine whose handle was never written is found
    too. ``host``/``port`` are where the gateway reaches the engine (``engine_port``: the port
    the engine itself was told, inside a container); ``uid`` names the log folder and is never
    reused (nor is ``id``); ``start_count`` numbers the log files. ``pid`` is the launcher's pid
    for process engines, shown to people.
    """

    __tablename__ = "instances"
    __table_args__ = (UniqueConstraint("deployment_id", "replica_index"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(primary_key=True)
    uid: Mapped[str] = mapped_column(String(32), unique=True, index=True, default=new_uid)
    runtime: Mapped[str] = mapped_column(String(16), default="process", server_default="process")
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    launch_token: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    engine_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # What the engine sees of the host: [{"host_path", "engine_path", "read_only"}].
    mounts: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True, default=list)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"))
    replica_index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    reason: Mapped[str] = mapped_column(Text, default="")
    host: Mapped[str] = mapped_column(String(128), default="127.0.0.1")
    port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpu_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    process_start_time: Mapped[float | None] = mapped_column(nullable=True)
    command: Mapped[list[str]] = mapped_column(JSON, default=list)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Where the current start runs: {"ranks": [{"worker_id", "worker_name", "host", "gpu_ids"}],
    # "memory_bytes_per_gpu", "memory_knob", "memory_fraction", "demand"}; None: this host.
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    start_count: Mapped[int] = mapped_column(Integer, default=0)
    restart_count: Mapped[int] = mapped_column(Integer, default=0)
    next_start_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # After-start results: doctor's log diagnosis and the verification suite's checks.
    diagnosis: Mapped[str | None] = mapped_column(Text, nullable=True)
    verification: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # When the verification suite last ran on this start, and when a user asked for it again.
    verified_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    verification_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # The image pull of the current start (runtimes/image_pull.py): {"state": "pulling" | "pulled" |
    # "failed", "image", "layers_done", "layers_total", "downloaded_bytes", "total_bytes", ...};
    # None: nothing pulled for it (a process engine, or the image was on the host).
    image_pull: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, onupdate=utc_now)

    deployment: Mapped[Deployment] = relationship(back_populates="instances")


class InstanceEvent(Base):
    """One state transition of an instance, with its reason. Kept after the instance is gone."""

    __tablename__ = "instance_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_name: Mapped[str] = mapped_column(String(128), index=True)
    deployment_uid: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    instance_id: Mapped[int] = mapped_column(Integer, index=True)
    instance_uid: Mapped[str | None] = mapped_column(String(32), nullable=True)
    replica_index: Mapped[int] = mapped_column(Integer)
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)


class AutoscaleEvent(Base):
    """One decision of the autoscaler (a change of replicas, with its reason) or a replica it asked
    for that cannot be placed (``direction`` "unplaced", replicas unchanged). Kept after the
    deployment is gone, as instance events are."""

    __tablename__ = "autoscale_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_name: Mapped[str] = mapped_column(String(128), index=True)
    deployment_uid: Mapped[str] = mapped_column(String(32), index=True)
    # "up", "down" or "unplaced" (control/autoscale/policy.py Direction, and unplaced).
    direction: Mapped[str] = mapped_column(String(16))
    from_replicas: Mapped[int] = mapped_column(Integer)
    to_replicas: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now)


class UsageRecord(Base):
    """Tokens metered by the gateway from the engine's ``usage``, one row per request."""

    __tablename__ = "usage_records"

    id: Mapped[int] = mapped_column(primary_key=True)
    api_key_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    deployment_name: Mapped[str] = mapped_column(String(128), index=True)
    endpoint: Mapped[str] = mapped_column(String(64))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # False when the engine sent no usage: counted as a request, never guessed.
    usage_reported: Mapped[bool] = mapped_column(default=True)
    status_code: Mapped[int] = mapped_column(Integer, default=200)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, index=True)
    # Made by the gateway for each request; a row replayed from the usage journal after a crash
    # is skipped when it was written already (None: rows from before the journal).
    request_id: Mapped[str | None] = mapped_column(String(32), unique=True, nullable=True)
    # Time to first token in milliseconds, as the gateway saw it (revision 0015): from the
    # request's arrival to the first byte of a streamed answer sent to the client, or to the whole
    # body of a non-streamed one being sent. None: no answer (an error, a client that left first)
    # or a row from before the revision. See docs/usage.md.
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)


class StartObservationRow(Base):
    """One engine start: the KV cache the estimator predicted for it against what the engine
    logged, per GPU, under the key the correction groups starts by (``estimate/correction.py``).
    ``shown_kv_tokens``: what modelyard showed (corrected where a correction applied);
    ``booked_kv_tokens``: what a placement by memory booked (None: whole GPUs). The components
    (weights, activations, memory outside torch) are kept where the engine logged them."""

    __tablename__ = "start_observations"

    id: Mapped[int] = mapped_column(primary_key=True)
    observed_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utc_now, index=True)
    deployment_name: Mapped[str] = mapped_column(String(128), index=True)
    deployment_uid: Mapped[str | None] = mapped_column(String(32), nullable=True)
    instance_uid: Mapped[str] = mapped_column(String(32), index=True)
    replica_index: Mapped[int] = mapped_column(Integer)
    start_number: Mapped[int] = mapped_column(Integer)
    engine: Mapped[str] = mapped_column(String(32))
    engine_version: Mapped[str] = mapped_column(String(64))
    gpu_model: Mapped[str] = mapped_column(String(128))
    architecture: Mapped[str] = mapped_column(String(128))
    memory_fraction: Mapped[float] = mapped_column()
    context_tokens: Mapped[int] = mapped_column(Integer)
    enforce_eager: Mapped[bool] = mapped_column()
    kv_dtype: Mapped[str] = mapped_column(String(32))
    tensor_parallel: Mapped[int] = mapped_column(Integer)
    predicted_kv_bytes: Mapped[int] = mapped_column(BigInteger)
    predicted_kv_tokens: Mapped[int] = mapped_column(BigInteger)
    shown_kv_tokens: Mapped[int] = mapped_column(BigInteger)
    logged_kv_bytes: Mapped[int] = mapped_column(BigInteger)
    logged_kv_tokens: Mapped[int] = mapped_column(BigInteger)
    booked_kv_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_weights_bytes: Mapped[int] = mapped_column(BigInteger)
    logged_weights_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_activation_bytes: Mapped[int] = mapped_column(BigInteger)
    logged_activation_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_non_torch_bytes: Mapped[int] = mapped_column(BigInteger)
    logged_non_torch_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


def _default_project_id(connection: Connection) -> int:
    project_id = connection.scalar(select(Project.id).where(Project.name == DEFAULT_PROJECT))
    if project_id is None:
        raise RuntimeError(
            f"project {DEFAULT_PROJECT!r} is missing: run the migrations (modelyard serve does)"
        )
    return int(project_id)


@event.listens_for(ApiKey, "before_insert")
@event.listens_for(Deployment, "before_insert")
def _into_default_project(_mapper: Mapper[Any], connection: Connection, target: ApiKey | Deployment) -> None:
    """A key or deployment made without a project (every path made before projects) goes into
    ``default``."""
    if target.project_id is None:
        target.project_id = _default_project_id(connection)
