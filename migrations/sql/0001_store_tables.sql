-- The execution store's six tables, exactly as DESIGN.md §1 specifies them:
-- existing clients depend on these names, columns, types and keys.
CREATE TABLE executions (
    id            TEXT PRIMARY KEY,
    definition_id TEXT NOT NULL,
    data          TEXT NOT NULL,
    version       INT  NOT NULL
);

CREATE TABLE outbox (
    seq       BIGSERIAL PRIMARY KEY,
    target_id TEXT,
    event     TEXT NOT NULL
);

CREATE TABLE processed_events (
    execution_id TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    PRIMARY KEY (execution_id, event_id)
);

CREATE TABLE timers (
    execution_id TEXT NOT NULL,
    path         TEXT NOT NULL,
    fire_at      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (execution_id, path)
);

CREATE TABLE spawns (
    seq       BIGSERIAL PRIMARY KEY,
    parent_id TEXT NOT NULL,
    child_id  TEXT NOT NULL,
    root_path TEXT NOT NULL,
    context   TEXT NOT NULL
);

CREATE TABLE trace (
    execution_id TEXT NOT NULL,
    idx          INT  NOT NULL,
    entry        TEXT NOT NULL,
    PRIMARY KEY (execution_id, idx)
);

-- due_timers(now) scans by fire_at; without this index every sweep reads the
-- whole table. An index adds no column or key, so clients see the same schema.
CREATE INDEX timers_fire_at_idx ON timers (fire_at);
