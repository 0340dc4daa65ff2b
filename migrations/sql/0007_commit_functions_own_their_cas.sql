-- pgshard's commit functions no longer depend on harel_commit_cas, which
-- the seed's clients own too: an unmodified seed client runs its own
-- CREATE OR REPLACE FUNCTION harel_commit_cas(...) at start-up.
--
-- pgshard_cas is pgshard's CAS (0002's definition, under pgshard's name):
-- the one definition pgshard_commit_cas and pgshard_commit call.
--
-- harel_commit_cas becomes a thin wrapper of pgshard_cas with the same
-- signature (text, text, text, integer, text) → boolean and semantics, for
-- clients that call it (the seed's fast path, and the proxy's clients). Its
-- parameters are unnamed on purpose: Postgres lets CREATE OR REPLACE add
-- names to unnamed parameters but refuses to change names, so a seed
-- client's CREATE OR REPLACE succeeds whatever it calls its parameters, and
-- replaces only this wrapper; pgshard's commits keep pgshard_cas. (A seed
-- client that connects as another role than the one that migrated fails with
-- Postgres's "must be owner of function harel_commit_cas".)

-- CAS on version with the insert on first save and the optional dedupe
-- record; false on a conflict, never an error. As 0002's harel_commit_cas.
CREATE FUNCTION pgshard_cas(
    p_id            TEXT,
    p_definition_id TEXT,
    p_data          TEXT,
    p_old_version   INT,
    p_event_id      TEXT
) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE executions
       SET data = p_data, version = p_old_version + 1
     WHERE id = p_id AND version = p_old_version;
    IF NOT FOUND THEN
        IF p_old_version <> 0 THEN
            RETURN FALSE;
        END IF;
        -- A concurrent first save of the same id waits for the other
        -- transaction and then inserts nothing: a conflict, not an error.
        INSERT INTO executions (id, definition_id, data, version)
        VALUES (p_id, p_definition_id, p_data, 1)
        ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            RETURN FALSE;
        END IF;
    END IF;
    IF p_event_id IS NOT NULL AND p_event_id <> '' THEN
        INSERT INTO processed_events (execution_id, event_id)
        VALUES (p_id, p_event_id)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN TRUE;
END;
$$;

-- As in 0005, on pgshard_cas.
CREATE OR REPLACE FUNCTION pgshard_commit_cas(
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
    committed := pgshard_cas(p_id, p_definition_id, p_data, p_old_version, p_event_id);
    IF committed THEN
        found_version := p_old_version + 1;
        RETURN;
    END IF;
    SELECT version INTO found_version FROM executions WHERE id = p_id;
    found_version := COALESCE(found_version, 0);
END;
$$;

-- As in 0006, on pgshard_cas.
CREATE OR REPLACE FUNCTION pgshard_commit(
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

    committed := pgshard_cas(p_id, p_definition_id, p_data, p_old_version, p_event_id);
    IF NOT committed THEN
        SELECT version INTO found_version FROM executions WHERE id = p_id;
        found_version := COALESCE(found_version, 0);
        RETURN;
    END IF;
    found_version := p_old_version + 1;

    IF cardinality(p_emit_events) > 0 THEN
        INSERT INTO outbox (target_id, event)
        SELECT u.target_id, u.event
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

-- The wrapper for harel_commit_cas's callers (unnamed parameters: see above).
DROP FUNCTION harel_commit_cas(TEXT, TEXT, TEXT, INT, TEXT);

CREATE FUNCTION harel_commit_cas(TEXT, TEXT, TEXT, INT, TEXT) RETURNS BOOLEAN
LANGUAGE sql AS $$
    SELECT pgshard_cas($1, $2, $3, $4, $5)
$$;
