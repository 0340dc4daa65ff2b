-- Commits in one round trip that report the version they found.
--
-- harel_commit_cas (0002) stays the one definition of the CAS, with its
-- insert on first save; both functions here call it. Both return a conflict
-- as data (committed = false) and never raise for it, so the caller's
-- transaction stays clean. On a conflict, found_version is read by a
-- statement of its own after the CAS failed, so it sees the writer that won
-- (a fresh READ COMMITTED snapshot), not the snapshot the caller's statement
-- started with; it is 0 when the row does not exist. On success it is the
-- new version.

-- pgshard_commit_cas is the store's fast path, a state-only commit (+ the
-- optional dedupe record).
CREATE FUNCTION pgshard_commit_cas(
    p_id            TEXT,
    p_definition_id TEXT,
    p_data          TEXT,
    p_old_version   INT,
    p_event_id      TEXT,
    OUT committed     BOOLEAN,
    OUT found_version INT
)
LANGUAGE plpgsql AS $$
BEGIN
    committed := harel_commit_cas(p_id, p_definition_id, p_data, p_old_version, p_event_id);
    IF committed THEN
        found_version := p_old_version + 1;
        RETURN;
    END IF;
    SELECT version INTO found_version FROM executions WHERE id = p_id;
    found_version := COALESCE(found_version, 0);
END;
$$;

-- pgshard_commit is a whole commit in one statement: the CAS (+ insert on
-- first save, + dedupe record) and, only if it won, the step's side effects
-- in the seed's order — outbox rows in array order, spawn intents in array
-- order, timer changes, one trace entry with idx = max(idx) + 1 and the ring
-- cut to p_trace_max entries (0 keeps all). The CAS's row lock serializes
-- everything after it per execution. Each PL/pgSQL statement's plan is
-- cached by the server session, so a commit is neither parsed nor planned
-- again, also through a transaction pooler (no client-visible state).
--
-- Arrays of one collection have equal lengths. Timer changes are the net
-- effect of the step's ops: p_schedule_paths distinct (upserts replacing
-- fire_at), p_cancel_paths (deletes) applied first. p_trace NULL appends
-- nothing. Empty arrays or NULLs mean none.
CREATE FUNCTION pgshard_commit(
    p_id               TEXT,
    p_definition_id    TEXT,
    p_data             TEXT,
    p_old_version      INT,
    p_event_id         TEXT,
    p_emit_targets     TEXT[],
    p_emit_events      TEXT[],
    p_spawn_children   TEXT[],
    p_spawn_roots      TEXT[],
    p_spawn_contexts   TEXT[],
    p_schedule_paths   TEXT[],
    p_schedule_fire_at FLOAT8[],
    p_cancel_paths     TEXT[],
    p_trace            TEXT,
    p_trace_max        INT,
    OUT committed     BOOLEAN,
    OUT found_version INT
)
LANGUAGE plpgsql AS $$
DECLARE
    new_idx INT;
BEGIN
    IF coalesce(cardinality(p_emit_targets), 0) <> coalesce(cardinality(p_emit_events), 0)
       OR coalesce(cardinality(p_spawn_children), 0) <> coalesce(cardinality(p_spawn_roots), 0)
       OR coalesce(cardinality(p_spawn_children), 0) <> coalesce(cardinality(p_spawn_contexts), 0)
       OR coalesce(cardinality(p_schedule_paths), 0) <> coalesce(cardinality(p_schedule_fire_at), 0) THEN
        RAISE EXCEPTION 'pgshard_commit of execution %: the arrays of one collection differ in length', p_id
            USING ERRCODE = '22023';
    END IF;

    committed := harel_commit_cas(p_id, p_definition_id, p_data, p_old_version, p_event_id);
    IF NOT committed THEN
        SELECT version INTO found_version FROM executions WHERE id = p_id;
        found_version := COALESCE(found_version, 0);
        RETURN;
    END IF;
    found_version := p_old_version + 1;

    IF cardinality(p_emit_events) > 0 THEN
        INSERT INTO outbox (target_id, event)
        SELECT NULLIF(u.target_id, ''), u.event
        FROM unnest(p_emit_targets, p_emit_events) WITH ORDINALITY AS u(target_id, event, n)
        ORDER BY u.n;
    END IF;
    IF cardinality(p_spawn_children) > 0 THEN
        INSERT INTO spawns (parent_id, child_id, root_path, context)
        SELECT p_id, u.child_id, u.root_path, u.context
        FROM unnest(p_spawn_children, p_spawn_roots, p_spawn_contexts) WITH ORDINALITY AS u(child_id, root_path, context, n)
        ORDER BY u.n;
    END IF;
    IF cardinality(p_cancel_paths) > 0 THEN
        DELETE FROM timers WHERE execution_id = p_id AND path = ANY (p_cancel_paths);
    END IF;
    IF cardinality(p_schedule_paths) > 0 THEN
        INSERT INTO timers (execution_id, path, fire_at)
        SELECT p_id, u.path, u.fire_at
        FROM unnest(p_schedule_paths, p_schedule_fire_at) AS u(path, fire_at)
        ON CONFLICT (execution_id, path) DO UPDATE SET fire_at = EXCLUDED.fire_at;
    END IF;
    IF p_trace IS NOT NULL THEN
        INSERT INTO trace (execution_id, idx, entry)
        SELECT p_id, COALESCE(max(idx), -1) + 1, p_trace FROM trace WHERE execution_id = p_id
        RETURNING idx INTO new_idx;
        IF p_trace_max > 0 THEN
            DELETE FROM trace WHERE execution_id = p_id AND idx <= new_idx - p_trace_max;
        END IF;
    END IF;
END;
$$;

-- list_executions pages by id in bytewise order (COLLATE "C") on every shard,
-- so that the router can merge shards' pages with Go's string order whatever
-- the database's default collation is. This index serves that order; the
-- primary key's index has the default collation and cannot.
CREATE INDEX executions_id_c_idx ON executions (id COLLATE "C");
