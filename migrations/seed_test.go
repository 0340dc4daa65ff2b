package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/migrations"
)

// seedSchemaLock stands for the seed store's advisory lock key around its
// schema set-up (its value does not matter here).
const seedSchemaLock = 7001

// seedTables are the seed store's start-up statements for its six tables,
// as it sends them: ARCHITECTURE.md §1's schema with CREATE TABLE IF NOT EXISTS.
var seedTables = []string{
	`CREATE TABLE IF NOT EXISTS executions (id TEXT PRIMARY KEY, definition_id TEXT NOT NULL, data TEXT NOT NULL, version INT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS outbox (seq BIGSERIAL PRIMARY KEY, target_id TEXT, event TEXT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS processed_events (execution_id TEXT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (execution_id, event_id))`,
	`CREATE TABLE IF NOT EXISTS timers (execution_id TEXT NOT NULL, path TEXT NOT NULL, fire_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (execution_id, path))`,
	`CREATE TABLE IF NOT EXISTS spawns (seq BIGSERIAL PRIMARY KEY, parent_id TEXT NOT NULL, child_id TEXT NOT NULL, root_path TEXT NOT NULL, context TEXT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS trace (execution_id TEXT NOT NULL, idx INT NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (execution_id, idx))`,
}

// seedCAS is the seed client's CREATE OR REPLACE FUNCTION harel_commit_cas
// with the given parameter names: the signature the seed calls,
// harel_commit_cas(id, definition_id, data, old_version, event_id) →
// boolean, and a body with its documented semantics — the UPDATE … WHERE
// version = old; no row and old = 0: insert unless the row exists; the
// dedupe insert for a non-empty event id; false, never an error, on a
// conflict. The seed's exact text is not part of this repository; this
// body is written for the test and, like the seed's check-then-insert,
// raises unique_violation when a concurrent first save wins the insert.
func seedCAS(p [5]string) string {
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION harel_commit_cas(%[1]s TEXT, %[2]s TEXT, %[3]s TEXT, %[4]s INT, %[5]s TEXT)
RETURNS BOOLEAN LANGUAGE plpgsql AS $$
BEGIN
    UPDATE executions SET data = %[3]s, version = %[4]s + 1 WHERE id = %[1]s AND version = %[4]s;
    IF NOT FOUND THEN
        IF %[4]s <> 0 OR EXISTS (SELECT 1 FROM executions WHERE id = %[1]s) THEN
            RETURN FALSE;
        END IF;
        INSERT INTO executions (id, definition_id, data, version) VALUES (%[1]s, %[2]s, %[3]s, 1);
    END IF;
    IF %[5]s <> '' THEN
        INSERT INTO processed_events (execution_id, event_id) VALUES (%[1]s, %[5]s) ON CONFLICT DO NOTHING;
    END IF;
    RETURN TRUE;
END;
$$`, p[0], p[1], p[2], p[3], p[4])
}

// seedStartup runs a seed client's schema set-up in one transaction, as the
// seed does.
func seedStartup(ctx context.Context, conn *pgx.Conn, names [5]string) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, seedSchemaLock); err != nil {
			return err
		}
		for _, s := range append(seedTables, seedCAS(names)) {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%.60s…: %w", s, err)
			}
		}
		return nil
	})
}

// seedParamNames are two ways a seed client may name harel_commit_cas's
// parameters: as pgshard's 0002 did, and otherwise.
var seedParamNames = map[string][5]string{
	"pgshard's parameter names": {"p_id", "p_definition_id", "p_data", "p_old_version", "p_event_id"},
	"other parameter names":     {"p_exe", "p_def", "p_json", "p_expected", "p_event"},
}

// TestSeedClientStartupOnShard is a regression test of issue 11, defect 8:
// an unmodified seed client that starts against a pgshard shard runs its
// CREATE TABLE IF NOT EXISTS and CREATE OR REPLACE FUNCTION harel_commit_cas
// successfully (whatever it names the parameters), its fast path works,
// and pgshard_commit keeps pgshard's CAS: a first save that loses a race is
// a conflict (committed = false), not the seed body's unique_violation.
func TestSeedClientStartupOnShard(t *testing.T) {
	for name, names := range seedParamNames {
		t.Run(name, func(t *testing.T) {
			m := oneShardMap(t, 0)
			mustApply(t, m, migrations.Options{})
			ctx := ctxT(t)
			dsn := m.Shards[0].DSN
			seed := connect(t, dsn)
			if err := seedStartup(ctx, seed, names); err != nil {
				t.Fatalf("the seed client's start-up failed: %v", err)
			}
			var ok bool
			if err := seed.QueryRow(ctx, `SELECT harel_commit_cas($1, $2, $3, $4, $5)`, "s1", "d", `{}`, 0, "").Scan(&ok); err != nil || !ok {
				t.Fatalf("the seed's first save: %v, %v", ok, err)
			}
			if err := seed.QueryRow(ctx, `SELECT harel_commit_cas($1, $2, $3, $4, $5)`, "s1", "d", `{}`, 0, "").Scan(&ok); err != nil || ok {
				t.Fatalf("the seed's conflicting save: %v, %v (want false)", ok, err)
			}
			for fn, call := range map[string]string{
				"pgshard_commit_cas": `SELECT committed, found_version FROM pgshard_commit_cas($1::text, 'd', '{}', 0, '')`,
				"pgshard_commit": `SELECT committed, found_version FROM pgshard_commit($1::text, 'd', '{}', 0, '',
					ARRAY['t'], ARRAY['{"e":1}'], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::float8[], '{}'::text[], NULL, 0)`,
			} {
				committed, found, err := firstSaveRace(t, dsn, call, "race-"+fn)
				if err != nil || committed || found != 1 {
					t.Errorf("%s: a first save that lost the race returned committed=%v found=%d err=%v; want a conflict (false, 1)", fn, committed, found, err)
				}
			}
		})
	}
}

// firstSaveRace runs call for id in an open transaction (a first save,
// uncommitted), runs it again on another connection, which waits for the
// first, commits the first and returns what the second got.
func firstSaveRace(t *testing.T, dsn, call, id string) (committed bool, found int, err error) {
	t.Helper()
	ctx := ctxT(t)
	first, second := connect(t, dsn), connect(t, dsn+"&application_name=pgshard-race-second")
	tx, err := first.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := tx.QueryRow(ctx, call, id).Scan(&committed, &found); err != nil || !committed {
		t.Fatalf("first save: %v %v", committed, err)
	}
	type result struct {
		committed bool
		found     int
		err       error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = second.QueryRow(ctx, call, id).Scan(&r.committed, &r.found)
		done <- r
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting bool
		if err := first.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgshard-race-second' AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second save never waited for the first")
		}
		time.Sleep(10 * time.Millisecond) // polling interval, bounded by the deadline
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	var pe *pgconn.PgError
	if errors.As(r.err, &pe) {
		r.err = fmt.Errorf("SQLSTATE %s: %s", pe.Code, pe.Message)
	}
	return r.committed, r.found, r.err
}
