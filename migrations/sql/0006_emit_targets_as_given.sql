-- pgshard_commit stores each emit's target_id as given, as the seed does:
-- a NULL element of p_emit_targets is NULL (an event without a target
-- execution), '' is the empty string. 0005 turned '' into NULL, so the two
-- could not be told apart when read back. Same signature, same everything
-- else.
--
-- The store of this build passes NULL for "no target". A store built before
-- this migration passed '' for it, which is now stored as ''; upgrade the
-- store with its migrations.
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

    committed := harel_commit_cas(p_id, p_definition_id, p_data, p_old_version, p_event_id);
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
