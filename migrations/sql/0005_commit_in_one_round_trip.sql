-- Commits in one round trip that still report the version they found.
--
-- harel_commit_cas (0002) stays the one definition of the CAS; these
-- functions call it.
--
-- pgshard_commit_cas is the store's fast path: harel_commit_cas plus, on a
-- conflict, the version the row holds now. It returns a conflict as data
-- (committed = false), never raises, so the caller's transaction stays clean.
-- The version is read by a statement of its own after the CAS failed, so it
-- sees the writer that won (a fresh READ COMMITTED snapshot), not the
-- snapshot the caller's statement started with. found_version is 0 when the
-- row does not exist (a CAS with an old version > 0 on an absent row).
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

-- pgshard_commit_cas_or_raise opens a pipelined complex commit: the same CAS,
-- but a conflict raises SQLSTATE PS001 (message and DETAIL
-- 'found_version=N'). The statements pipelined after it (outbox, spawns,
-- timers, trace) then never run, and the transaction — the implicit one
-- that ends at the pipeline's Sync — rolls back, all within the one round
-- trip. On success it returns the new version.
CREATE FUNCTION pgshard_commit_cas_or_raise(
    p_id            TEXT,
    p_definition_id TEXT,
    p_data          TEXT,
    p_old_version   INT,
    p_event_id      TEXT
) RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
    r RECORD;
BEGIN
    SELECT * INTO r FROM pgshard_commit_cas(p_id, p_definition_id, p_data, p_old_version, p_event_id);
    IF r.committed THEN
        RETURN r.found_version;
    END IF;
    RAISE EXCEPTION 'commit conflict on execution %: expected version %, found %',
            p_id, p_old_version, r.found_version
        USING ERRCODE = 'PS001',
              DETAIL = format('found_version=%s', r.found_version),
              HINT = 'Another writer committed first: reload the execution and retry.';
END;
$$;

-- list_executions pages by id in bytewise order (COLLATE "C") on every shard,
-- so that the router can merge shards' pages with Go's string order whatever
-- the database's default collation is. This index serves that order; the
-- primary key's index has the default collation and cannot.
CREATE INDEX executions_id_c_idx ON executions (id COLLATE "C");
