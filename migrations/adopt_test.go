package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// seedWork writes what a seed client's store leaves behind, with the
// seed's statements: three executions (first saves through its
// harel_commit_cas), three outbox rows (one without target), a dedupe
// record, two spawn intents, a timer and a trace entry.
func seedWork(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	for _, id := range []string{"e1", "e2", "e3"} {
		data := fmt.Sprintf(`{"id":%q,"definition_id":"order","version":1,"status":"running","active_path":["root"],"parent_id":null,"context":{}}`, id)
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT harel_commit_cas($1, $2, $3, $4, $5)`, id, "order", data, 0, "").Scan(&ok); err != nil || !ok {
			t.Fatalf("seed first save of %s: %v %v", id, ok, err)
		}
	}
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO outbox (target_id, event) VALUES ($1, $2)`, []any{"e2", `{"kind":"Ping","n":1}`}},
		{`INSERT INTO outbox (target_id, event) VALUES ($1, $2)`, []any{nil, `{"kind":"Audit","n":2}`}},
		{`INSERT INTO outbox (target_id, event) VALUES ($1, $2)`, []any{"e3", `{"kind":"Ping","n":3}`}},
		{`INSERT INTO processed_events (execution_id, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, []any{"e1", "ev0"}},
		{`INSERT INTO spawns (parent_id, child_id, root_path, context) VALUES ($1, $2, $3, $4)`, []any{"e1", "c1", "root.a", `{}`}},
		{`INSERT INTO spawns (parent_id, child_id, root_path, context) VALUES ($1, $2, $3, $4)`, []any{"e1", "c2", "root.b", `{}`}},
		{`INSERT INTO timers (execution_id, path, fire_at) VALUES ($1, $2, $3) ON CONFLICT (execution_id, path) DO UPDATE SET fire_at = EXCLUDED.fire_at`, []any{"e2", "root", 1.5e9}},
		{`INSERT INTO trace (execution_id, idx, entry) SELECT $1, COALESCE((SELECT MAX(idx) FROM trace WHERE execution_id = $2), -1) + 1, $3`, []any{"e1", "e1", `{"step":0}`}},
	} {
		if _, err := conn.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatalf("seed: %s: %v", s.sql, err)
		}
	}
}

// TestAdoptSeedDatabase is a regression test of issue 11, defect 8: a
// database that the seed's store created and used is taken over by
// migrate --adopt — its tables recorded as 0001, its harel_commit_cas
// replaced by 0002's, the rest migrated, the sequences strided with the
// seed's rows re-numbered for the shard — and then works for the pgshard
// store and still for a restarting seed client.
func TestAdoptSeedDatabase(t *testing.T) {
	m := oneShardMap(t, 2)
	ctx := ctxT(t)
	dsn := m.Shards[0].DSN
	seed := connect(t, dsn)
	names := seedParamNames["other parameter names"]
	if err := seedStartup(ctx, seed, names); err != nil {
		t.Fatal(err)
	}
	seedWork(t, ctx, seed)

	_, err := migrations.Apply(ctx, m, migrations.Options{})
	if err == nil || !strings.Contains(err.Error(), "migrate --adopt") || !strings.Contains(err.Error(), "executions, outbox, processed_events, spawns, timers, trace") {
		t.Fatalf("migrate without --adopt: %v, want a refusal naming the tables and --adopt", err)
	}
	rep := mustApply(t, m, migrations.Options{Adopt: true})
	sr := rep.Shards[0]
	if !slices.Equal(sr.Adopted, []string{"0001_store_tables", "0002_commit_cas"}) {
		t.Errorf("adopted %v, want 0001 and 0002", sr.Adopted)
	}
	if len(sr.Applied) != len(migrations.All())-2 || sr.Applied[0] != "0003_shard_identity" {
		t.Errorf("applied %v, want 0003 onwards", sr.Applied)
	}
	if sr.Identity != "created; re-strided 3 outbox rows, 2 spawns rows" {
		t.Errorf("identity %q", sr.Identity)
	}
	var def string
	if err := seed.QueryRow(ctx, `SELECT pg_get_functiondef('harel_commit_cas(text,text,text,integer,text)'::regprocedure)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "pgshard_cas") {
		t.Errorf("harel_commit_cas was not replaced by pgshard's:\n%s", def)
	}
	if again := mustApply(t, m, migrations.Options{Adopt: true}); len(again.Shards[0].Adopted)+len(again.Shards[0].Applied) != 0 {
		t.Errorf("second migrate --adopt did something: %+v", again.Shards[0])
	}

	// The pgshard store works on the adopted rows.
	s, err := store.Open(ctx, dsn, store.Options{ConnectAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := s.Load(ctx, "e1")
	if err != nil || e.Version != 1 || !slices.Equal(e.ActivePath, []string{"root"}) {
		t.Fatalf("load e1: %+v, %v", e, err)
	}
	if err := s.Commit(ctx, e, []store.Emit{{TargetID: "e3", Event: json.RawMessage(`{"kind":"Ping","n":4}`)}}, "ev1", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := s.PendingOutbox(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		if sh, err := m.ShardForSeq(r.Seq); err != nil || sh.Name != m.Shards[0].Name {
			t.Errorf("outbox seq %d does not name the shard (ordinal %d): %v", r.Seq, m.Shards[0].Ordinal, err)
		}
		got = append(got, fmt.Sprintf("%s/%v/%s", r.TargetID, r.HasTarget, r.Event))
	}
	want := []string{`e2/true/{"kind":"Ping","n":1}`, `/false/{"kind":"Audit","n":2}`, `e3/true/{"kind":"Ping","n":3}`, `e3/true/{"kind":"Ping","n":4}`}
	if !slices.Equal(got, want) {
		t.Errorf("outbox after adoption:\n got  %q\n want %q", got, want)
	}
	if err := s.AckOutbox(ctx, rows[0].Seq); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.IsProcessed(ctx, "e1", "ev0"); err != nil || !ok {
		t.Errorf("the seed's dedupe record: %v, %v", ok, err)
	}
	if tr, err := s.ReadTrace(ctx, "e1"); err != nil || len(tr) != 1 || tr[0].Index != 0 {
		t.Errorf("the seed's trace: %+v, %v", tr, err)
	}

	// A seed client that restarts runs its start-up again and works.
	if err := seedStartup(ctx, seed, names); err != nil {
		t.Fatalf("seed restart on the adopted database: %v", err)
	}
	var ok bool
	if err := seed.QueryRow(ctx, `SELECT harel_commit_cas($1, $2, $3, $4, $5)`, "e2", "order", `{}`, 1, "").Scan(&ok); err != nil || !ok {
		t.Errorf("the seed's commit after adoption: %v, %v", ok, err)
	}
}

// TestAdoptRefuses: what --adopt does not take over, each refused with a
// message naming the problem, leaving the database as it was.
func TestAdoptRefuses(t *testing.T) {
	other := seedParamNames["other parameter names"]
	tests := []struct {
		name string
		// prepare makes the database (after the seed's start-up unless
		// noSeed).
		noSeed  bool
		prepare []string
		want    string
	}{
		{name: "a column of another type", noSeed: true, prepare: append(replace(seedTables, 0,
			`CREATE TABLE executions (id TEXT PRIMARY KEY, definition_id TEXT NOT NULL, data TEXT NOT NULL, version BIGINT NOT NULL)`), seedCAS(other)),
			want: "executions.version is bigint NOT NULL, want integer NOT NULL"},
		{name: "an extra column", prepare: []string{`ALTER TABLE trace ADD COLUMN at TIMESTAMPTZ`},
			want: "trace.at (timestamp with time zone) is not a column of the store's schema"},
		{name: "a nullable column", prepare: []string{`ALTER TABLE outbox ALTER COLUMN event DROP NOT NULL`},
			want: "outbox.event is text, want text NOT NULL"},
		{name: "another primary key", prepare: []string{`ALTER TABLE processed_events DROP CONSTRAINT processed_events_pkey`, `ALTER TABLE processed_events ADD PRIMARY KEY (event_id, execution_id)`},
			want: "processed_events.execution_id is in the primary key at another place"},
		{name: "a table missing", prepare: []string{`DROP TABLE trace`}, want: "but not trace"},
		{name: "harel_commit_cas of another signature", prepare: []string{`DROP FUNCTION harel_commit_cas(text, text, text, integer, text)`,
			`CREATE FUNCTION harel_commit_cas(text, text, text, bigint, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'`},
			want: "harel_commit_cas(text, text, text, bigint, text) → boolean is not the seed's function"},
		{name: "harel_commit_cas that is no CAS", prepare: []string{`CREATE OR REPLACE FUNCTION harel_commit_cas(p_exe text, p_def text, p_json text, p_expected integer, p_event text) RETURNS boolean LANGUAGE sql AS 'SELECT true'`},
			want: "harel_commit_cas does not behave like the seed's CAS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := oneShardMap(t, 0)
			ctx := ctxT(t)
			conn := connect(t, m.Shards[0].DSN)
			if !tt.noSeed {
				if err := seedStartup(ctx, conn, other); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range tt.prepare {
				if _, err := conn.Exec(ctx, s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			_, err := migrations.Apply(ctx, m, migrations.Options{Adopt: true})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("migrate --adopt: %v, want a refusal saying %q", err, tt.want)
			}
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pgshard_migrations`).Scan(&n); err != nil || n != 0 {
				t.Errorf("the ledger holds %d migrations after a refusal (%v)", n, err)
			}
			var identity bool
			if err := conn.QueryRow(ctx, `SELECT to_regclass('pgshard_identity') IS NOT NULL`).Scan(&identity); err != nil || identity {
				t.Errorf("pgshard_identity exists after a refusal (%v)", err)
			}
		})
	}
	t.Run("rows of another shard's buckets", func(t *testing.T) {
		c := clustertest.Get(t)
		db := clustertest.FreshDatabase(t, c)
		m, err := c.MapFor(db, shardmap.DefaultBuckets)
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		conn := connect(t, m.Shards[0].DSN)
		if err := seedStartup(ctx, conn, other); err != nil {
			t.Fatal(err)
		}
		foreign := ""
		for i := 0; foreign == ""; i++ {
			if id := fmt.Sprintf("x%d", i); m.Lookup(id).Name != m.Shards[0].Name {
				foreign = id
			}
		}
		if _, err := conn.Exec(ctx, `INSERT INTO timers (execution_id, path, fire_at) VALUES ($1, 'p', 1)`, foreign); err != nil {
			t.Fatal(err)
		}
		rep, err := migrations.Apply(ctx, m, migrations.Options{Adopt: true})
		if err == nil || rep.Shards[0].Err == nil || !strings.Contains(rep.Shards[0].Err.Error(), "1 rows of timers have a execution_id in buckets that map epoch 1 gives to other shards") {
			t.Fatalf("adopting a database with another shard's row: %v", err)
		}
		for _, s := range rep.Shards[1:] {
			if s.Err != nil {
				t.Errorf("%s (fresh): %v", s.Shard, s.Err)
			}
		}
	})
}

// replace returns ss with ss[i] = s.
func replace(ss []string, i int, s string) []string {
	out := slices.Clone(ss)
	out[i] = s
	return out
}
