-- A call's checkpoint carries the epoch of the server that owns the call: 0 where it started, one
-- more at each resume. A resume is a compare-and-set on it (one server wins a call), and a write
-- with an older epoch (the server that lost the call) is refused. See policy/store_pg.py.

ALTER TABLE checkpoints ADD COLUMN epoch bigint NOT NULL DEFAULT 0;
