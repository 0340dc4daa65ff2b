-- harel_commit_cas: the fast path of commit() in one round trip.
--
-- CAS on version: UPDATE ... WHERE id AND version = old. When no row matched
-- and old = 0 the execution is saved for the first time (INSERT). On a
-- conflict it returns false instead of raising, so the caller's transaction
-- stays clean. A non-empty event id is recorded in the dedupe ledger in the
-- same transaction.
CREATE FUNCTION harel_commit_cas(
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
