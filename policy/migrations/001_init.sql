-- Handoff packages with their desk lifecycle, the audit log, and per-call checkpoints.
-- Applied once by policy/store_pg.py (recorded in schema_migrations), under an advisory lock.

CREATE TABLE handoffs (
    id          text PRIMARY KEY,                 -- the package's id: a retried write is one row
    team        text NOT NULL,
    state       text NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'claimed', 'closed')),
    claimed_by  text,
    claimed_at  timestamptz,
    closed_at   timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    package     jsonb NOT NULL
);
CREATE INDEX handoffs_waiting ON handoffs (team, created_at) WHERE state = 'waiting';
CREATE INDEX handoffs_created ON handoffs (created_at, id);

-- One row per audit record. A turn's record is keyed by its turn id (audit_id); the later lines
-- about that turn (timings, superseded, recheck failed) by turn id, kind and content hash.
CREATE TABLE audit (
    id          text PRIMARY KEY,
    turn_id     text,
    kind        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    record      jsonb NOT NULL
);
CREATE INDEX audit_turn ON audit (turn_id);

CREATE TABLE checkpoints (
    call_id     text PRIMARY KEY,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    state       jsonb NOT NULL
);
