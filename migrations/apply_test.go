package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// freshMap returns a map over a fresh database on every shard of the
// package's cluster (4 shards, each behind PgBouncer).
func freshMap(t *testing.T) (*cluster.Cluster, *shardmap.Map) {
	t.Helper()
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	m, err := c.MapFor(db, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	return c, m
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustApply(t *testing.T, m *shardmap.Map, opts migrations.Options) *migrations.Report {
	t.Helper()
	rep, err := migrations.Apply(ctxT(t), m, opts)
	if err != nil {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Fatalf("apply: %v\n%s", err, b.String())
	}
	return rep
}

// The six tables of ARCHITECTURE.md §1, exactly: columns, types, nullability, keys.
func TestSchemaIsExactlyTheStores(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	want := map[string]string{
		"executions":       "id text NOT NULL; definition_id text NOT NULL; data text NOT NULL; version integer NOT NULL; PK(id)",
		"outbox":           "seq bigint NOT NULL; target_id text NULL; event text NOT NULL; PK(seq)",
		"processed_events": "execution_id text NOT NULL; event_id text NOT NULL; PK(execution_id,event_id)",
		"timers":           "execution_id text NOT NULL; path text NOT NULL; fire_at double precision NOT NULL; PK(execution_id,path)",
		"spawns":           "seq bigint NOT NULL; parent_id text NOT NULL; child_id text NOT NULL; root_path text NOT NULL; context text NOT NULL; PK(seq)",
		"trace":            "execution_id text NOT NULL; idx integer NOT NULL; entry text NOT NULL; PK(execution_id,idx)",
	}
	for _, s := range m.Shards {
		conn := connect(t, s.DSN)
		for table, shape := range want {
			var got string
			err := conn.QueryRow(ctxT(t), `
				SELECT string_agg(column_name || ' ' || data_type || CASE WHEN is_nullable = 'YES' THEN ' NULL' ELSE ' NOT NULL' END, '; ' ORDER BY ordinal_position)
				  || '; PK(' || (SELECT string_agg(a.attname, ',' ORDER BY array_position(i.indkey::int2[], a.attnum))
				                  FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
				                 WHERE i.indrelid = $1::text::regclass AND i.indisprimary) || ')'
				  FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1::text`, table).Scan(&got)
			if err != nil {
				t.Fatalf("%s: %s: %v", s.Name, table, err)
			}
			if got != shape {
				t.Errorf("%s: table %s:\n got  %s\n want %s", s.Name, table, got, shape)
			}
		}
		// outbox.seq and spawns.seq are BIGSERIAL: owned sequences.
		for _, table := range []string{"outbox", "spawns"} {
			var seq *string
			if err := conn.QueryRow(ctxT(t), `SELECT pg_get_serial_sequence($1, 'seq')`, table).Scan(&seq); err != nil || seq == nil {
				t.Errorf("%s: %s.seq has no owned sequence (err %v)", s.Name, table, err)
			}
		}
	}
}

func TestApplyIsIdempotentAndRecordsTheLedger(t *testing.T) {
	_, m := freshMap(t)
	n := len(migrations.All())
	rep := mustApply(t, m, migrations.Options{})
	for _, s := range rep.Shards {
		if len(s.Applied) != n || s.Present != 0 || s.Identity != "created" {
			t.Errorf("first apply on %s: applied %v, present %d, identity %q", s.Shard, s.Applied, s.Present, s.Identity)
		}
	}
	rep = mustApply(t, m, migrations.Options{})
	for _, s := range rep.Shards {
		if len(s.Applied) != 0 || s.Present != n || s.Identity != "verified" {
			t.Errorf("second apply on %s: applied %v, present %d, identity %q", s.Shard, s.Applied, s.Present, s.Identity)
		}
	}
	for _, s := range m.Shards {
		conn := connect(t, s.DSN)
		var count, distinct int
		if err := conn.QueryRow(ctxT(t), `SELECT count(*), count(DISTINCT version) FROM pgshard_migrations`).Scan(&count, &distinct); err != nil {
			t.Fatal(err)
		}
		if count != n || distinct != n {
			t.Errorf("%s: ledger has %d rows (%d distinct), want %d", s.Name, count, distinct, n)
		}
		id, err := migrations.ReadIdentity(ctxT(t), conn)
		if err != nil {
			t.Fatal(err)
		}
		if id.ShardName != s.Name || id.Ordinal != s.Ordinal || id.Buckets != m.Buckets || id.MapEpoch != m.Epoch || id.DatabaseID == "" {
			t.Errorf("%s: identity %+v", s.Name, id)
		}
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil || !strings.Contains(b.String(), "verified") {
		t.Errorf("report text: %q %v", b.String(), err)
	}
}

// Migrations hold no session state, so they work through PgBouncer in
// transaction mode.
func TestApplyThroughPgBouncer(t *testing.T) {
	_, m := freshMap(t)
	for _, s := range m.Shards {
		if s.PoolerDSN == "" {
			t.Fatalf("%s has no pooler DSN; the test cluster must run PgBouncer", s.Name)
		}
	}
	mustApply(t, m, migrations.Options{ViaPooler: true})
	rep := mustApply(t, m, migrations.Options{ViaPooler: true})
	for _, s := range rep.Shards {
		if len(s.Applied) != 0 {
			t.Errorf("%s: second apply through PgBouncer applied %v", s.Shard, s.Applied)
		}
	}
}

// Several migrators racing on the same databases (directly and through
// PgBouncer) all succeed, and each migration is applied exactly once.
func TestConcurrentMigratorsSerialize(t *testing.T) {
	_, m := freshMap(t)
	const migrators = 6
	var wg sync.WaitGroup
	errs := make([]error, migrators)
	reps := make([]*migrations.Report, migrators)
	start := make(chan struct{})
	for i := 0; i < migrators; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			reps[i], errs[i] = migrations.Apply(ctxT(t), m, migrations.Options{ViaPooler: i%2 == 1})
		}()
	}
	close(start)
	wg.Wait()
	applied := map[string]int{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
		for _, s := range reps[i].Shards {
			for _, id := range s.Applied {
				applied[s.Shard+"/"+id]++
			}
		}
	}
	n := len(migrations.All())
	if len(applied) != n*len(m.Shards) {
		t.Errorf("%d (shard, migration) pairs applied, want %d", len(applied), n*len(m.Shards))
	}
	for k, c := range applied {
		if c != 1 {
			t.Errorf("%s applied %d times", k, c)
		}
	}
	for _, s := range m.Shards {
		var count int
		if err := connect(t, s.DSN).QueryRow(ctxT(t), `SELECT count(*) FROM pgshard_migrations`).Scan(&count); err != nil || count != n {
			t.Errorf("%s: ledger rows %d (err %v), want %d", s.Name, count, err, n)
		}
	}
}

func TestLedgerRefusals(t *testing.T) {
	t.Run("unknown migrations", func(t *testing.T) {
		_, m := freshMap(t)
		mustApply(t, m, migrations.Options{})
		s := m.Shards[1]
		conn := connect(t, s.DSN)
		if _, err := conn.Exec(ctxT(t), `INSERT INTO pgshard_migrations (version, name, checksum) VALUES (98, 'from_the_future', 'x'), (99, 'even_later', 'y')`); err != nil {
			t.Fatal(err)
		}
		rep, err := migrations.Apply(ctxT(t), m, migrations.Options{})
		var unknown *migrations.UnknownMigrationsError
		if !errors.As(err, &unknown) {
			t.Fatalf("err = %v, want UnknownMigrationsError", err)
		}
		if got := strings.Join(unknown.Entries, ","); got != "0098_from_the_future,0099_even_later" {
			t.Errorf("entries %q", got)
		}
		if !strings.Contains(err.Error(), `shard "`+s.Name+`"`) {
			t.Errorf("error does not name the shard: %v", err)
		}
		// Only that shard is refused; the others verify fine.
		for _, r := range rep.Shards {
			if (r.Err != nil) != (r.Shard == s.Name) {
				t.Errorf("shard %s: err %v", r.Shard, r.Err)
			}
		}
	})
	t.Run("edited migration", func(t *testing.T) {
		_, m := freshMap(t)
		mustApply(t, m, migrations.Options{})
		edited := migrations.All()
		edited[1].SQL += "\n-- edited after release\n"
		edited[1].Checksum = strings.Repeat("0", 64)
		_, err := migrations.ApplyMigrations(ctxT(t), m, migrations.Options{}, edited)
		var cm *migrations.ChecksumMismatchError
		if !errors.As(err, &cm) || cm.Migration != edited[1].ID() {
			t.Fatalf("err = %v, want ChecksumMismatchError for %s", err, edited[1].ID())
		}
	})
	t.Run("older build", func(t *testing.T) {
		// A build that knows fewer migrations than the database has refuses.
		_, m := freshMap(t)
		mustApply(t, m, migrations.Options{})
		older := migrations.All()[:3]
		_, err := migrations.ApplyMigrations(ctxT(t), m, migrations.Options{}, older)
		var unknown *migrations.UnknownMigrationsError
		if !errors.As(err, &unknown) || len(unknown.Entries) != len(migrations.All())-3 {
			t.Fatalf("err = %v, want the newer migrations named", err)
		}
	})
	t.Run("failed migration rolls back alone", func(t *testing.T) {
		_, m := freshMap(t)
		ms := append(migrations.All(), migrations.Migration{
			Version: len(migrations.All()) + 1, Name: "broken",
			SQL: "CREATE TABLE half_done (x int); SELECT 1/0;", Checksum: strings.Repeat("e", 64),
		})
		_, err := migrations.ApplyMigrations(ctxT(t), m, migrations.Options{}, ms)
		if err == nil || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "22012") {
			t.Fatalf("err = %v, want the broken migration and SQLSTATE 22012 named", err)
		}
		conn := connect(t, m.Shards[0].DSN)
		var exists bool
		if err := conn.QueryRow(ctxT(t), `SELECT to_regclass('half_done') IS NOT NULL`).Scan(&exists); err != nil || exists {
			t.Errorf("half_done exists=%v (err %v): a failed migration left DDL behind", exists, err)
		}
		var n int
		if err := conn.QueryRow(ctxT(t), `SELECT count(*) FROM pgshard_migrations`).Scan(&n); err != nil || n != len(migrations.All()) {
			t.Errorf("ledger has %d rows (err %v), want the %d good migrations", n, err, len(migrations.All()))
		}
	})
}

// On ordinal k, outbox.seq and spawns.seq yield k+1, k+1+1024, ...; a seq
// names its shard.
func TestSequencesAreStridedByOrdinal(t *testing.T) {
	c, _ := freshMap(t)
	db := clustertest.FreshDatabase(t, c)
	// Ordinals that are not 0..N-1, to prove the stride follows the ordinal.
	ordinals := []int{3, 17, 500, 1023}
	var shards []shardmap.Shard
	for i, s := range c.Shards {
		shards = append(shards, shardmap.Shard{Name: fmt.Sprintf("s%d", i), Ordinal: ordinals[i], DSN: s.DSN(db, c.Spec.User)})
	}
	m, err := shardmap.Even(shardmap.DefaultBuckets, shards)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, m, migrations.Options{})
	for _, s := range m.Shards {
		conn := connect(t, s.DSN)
		for _, table := range []string{"outbox", "spawns"} {
			var insert string
			if table == "outbox" {
				insert = `INSERT INTO outbox (target_id, event) SELECT 'x', 'e' FROM generate_series(1, 5) RETURNING seq`
			} else {
				insert = `INSERT INTO spawns (parent_id, child_id, root_path, context) SELECT 'p', 'c', '/', '{}' FROM generate_series(1, 5) RETURNING seq`
			}
			rows, err := conn.Query(ctxT(t), insert)
			if err != nil {
				t.Fatal(err)
			}
			seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			for i, seq := range seqs {
				want := int64(s.Ordinal) + 1 + int64(i)*shardmap.SeqStride
				if seq != want {
					t.Errorf("%s %s: seq #%d = %d, want %d", s.Name, table, i, seq, want)
				}
				owner, err := m.ShardForSeq(seq)
				if err != nil || owner.Name != s.Name {
					t.Errorf("%s: seq %d maps to %v (err %v)", s.Name, seq, owner, err)
				}
			}
		}
	}
	// A second migrate keeps the stride and the values already handed out.
	mustApply(t, m, migrations.Options{})
	conn := connect(t, m.Shards[2].DSN)
	var seq int64
	if err := conn.QueryRow(ctxT(t), `INSERT INTO outbox (target_id, event) VALUES ('x', 'e') RETURNING seq`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if want := int64(500) + 1 + 5*shardmap.SeqStride; seq != want {
		t.Errorf("after re-migrate: seq %d, want %d", seq, want)
	}
}

func TestIdentityChecks(t *testing.T) {
	c, m := freshMap(t)
	mustApply(t, m, migrations.Options{})

	t.Run("two entries on one database", func(t *testing.T) {
		bad := m.Clone()
		bad.Shards[3].DSN = bad.Shards[1].DSN
		bad.Shards[3].PoolerDSN = ""
		if err := bad.Validate(); err != nil {
			t.Fatal(err)
		}
		_, err := migrations.Apply(ctxT(t), bad, migrations.Options{})
		if err == nil || !strings.Contains(err.Error(), `belongs to shard "shard1"`) || !strings.Contains(err.Error(), `shard "shard3"`) {
			t.Fatalf("err = %v, want shard3's entry refused as shard1's database", err)
		}
		err = migrations.VerifyCluster(ctxT(t), bad, querier(t))
		if err == nil || !strings.Contains(err.Error(), "shard3") {
			t.Fatalf("VerifyCluster: %v", err)
		}
	})
	t.Run("swapped ordinals", func(t *testing.T) {
		bad := m.Clone()
		bad.Shards[0].Ordinal, bad.Shards[1].Ordinal = bad.Shards[1].Ordinal, bad.Shards[0].Ordinal
		if err := bad.Validate(); err != nil {
			t.Fatal(err)
		}
		_, err := migrations.Apply(ctxT(t), bad, migrations.Options{})
		if err == nil || !strings.Contains(err.Error(), "has ordinal 0, the map says 1") {
			t.Fatalf("err = %v", err)
		}
		var mm *migrations.IdentityMismatchError
		if !errors.As(err, &mm) {
			t.Errorf("not an IdentityMismatchError: %T", err)
		}
	})
	t.Run("other bucket count", func(t *testing.T) {
		bad, err := shardmap.Even(1024, m.Shards)
		if err != nil {
			t.Fatal(err)
		}
		_, err = migrations.Apply(ctxT(t), bad, migrations.Options{})
		if err == nil || !strings.Contains(err.Error(), "created for 4096 buckets, the map has 1024") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("epoch advances, stale map refused", func(t *testing.T) {
		next := m.Clone()
		next.Epoch = m.Epoch + 1
		if err := next.Validate(); err != nil {
			t.Fatal(err)
		}
		rep := mustApply(t, next, migrations.Options{})
		if got := rep.Shards[0].Identity; got != fmt.Sprintf("epoch %d→%d", m.Epoch, next.Epoch) {
			t.Errorf("identity action %q", got)
		}
		_, err := migrations.Apply(ctxT(t), m, migrations.Options{})
		if err == nil || !strings.Contains(err.Error(), "stale map") {
			t.Fatalf("re-applying the old epoch: err = %v", err)
		}
		if err := migrations.VerifyCluster(ctxT(t), next, querier(t)); err != nil {
			t.Fatalf("VerifyCluster on the current map: %v", err)
		}
	})
	t.Run("not migrated", func(t *testing.T) {
		db := clustertest.FreshDatabase(t, c)
		raw, err := c.MapFor(db, shardmap.DefaultBuckets)
		if err != nil {
			t.Fatal(err)
		}
		err = migrations.VerifyCluster(ctxT(t), raw, querier(t))
		if !errors.Is(err, migrations.ErrNoIdentity) {
			t.Fatalf("err = %v, want ErrNoIdentity", err)
		}
	})
}

// querier connects to each shard's direct DSN for VerifyCluster.
func querier(t *testing.T) func(shardmap.Shard) migrations.Querier {
	conns := map[string]*pgx.Conn{}
	return func(s shardmap.Shard) migrations.Querier {
		if c, ok := conns[s.DSN]; ok {
			return c
		}
		c := connect(t, s.DSN)
		conns[s.DSN] = c
		return c
	}
}

// harel_commit_cas: CAS on version, insert on first save, false (never an
// error) on conflict, optional dedupe row — all in the caller's transaction.
func TestCommitCASFunction(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	conn := connect(t, m.Shards[0].DSN)
	ctx := ctxT(t)
	// The CAS's semantics, on keys of any bucket: the fence (which refuses
	// other shards' keys; TestFenceSetByApply) is off.
	if _, err := conn.Exec(ctx, `SELECT pgshard_fence_off()`); err != nil {
		t.Fatal(err)
	}
	cas := func(id string, old int, event string) bool {
		t.Helper()
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT harel_commit_cas($1, 'def', $2, $3, $4)`, id, fmt.Sprintf(`{"v":%d}`, old+1), old, event).Scan(&ok); err != nil {
			t.Fatalf("cas(%s, %d): %v", id, old, err)
		}
		return ok
	}
	row := func(id string) (version int, data string) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT version, data FROM executions WHERE id = $1`, id).Scan(&version, &data); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !cas("a", 0, "") {
		t.Fatal("first save refused")
	}
	if v, d := row("a"); v != 1 || d != `{"v":1}` {
		t.Fatalf("after first save: version %d data %s", v, d)
	}
	if cas("a", 0, "") {
		t.Fatal("second first-save accepted")
	}
	if cas("a", 5, "") {
		t.Fatal("stale/future version accepted")
	}
	if !cas("a", 1, "ev-1") {
		t.Fatal("advance 1→2 refused")
	}
	if v, _ := row("a"); v != 2 {
		t.Fatalf("version %d, want 2", v)
	}
	if cas("missing", 3, "ev-x") {
		t.Fatal("CAS on a missing row with old=3 accepted")
	}
	var dedupe int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE execution_id = 'a'`).Scan(&dedupe); err != nil || dedupe != 1 {
		t.Fatalf("processed_events rows %d (err %v), want 1", dedupe, err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE execution_id = 'missing'`).Scan(&dedupe); err != nil || dedupe != 0 {
		t.Fatalf("a failed CAS recorded its event (%d rows)", dedupe)
	}
	// Conflict does not abort the transaction: the caller can go on.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT harel_commit_cas('a', 'def', '{}', 1, '')`).Scan(&ok); err != nil || ok {
		t.Fatalf("stale CAS in tx: ok=%v err=%v", ok, err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("transaction aborted by a conflict: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Concurrent first saves of one id: exactly one wins, none errors.
	const racers = 8
	results := make(chan error, racers)
	wins := make(chan bool, racers)
	for i := 0; i < racers; i++ {
		go func() {
			c, err := pgx.Connect(ctx, m.Shards[0].DSN)
			if err != nil {
				results <- err
				return
			}
			defer c.Close(context.Background())
			var ok bool
			err = c.QueryRow(ctx, `SELECT harel_commit_cas('race', 'def', '{}', 0, '')`).Scan(&ok)
			wins <- ok
			results <- err
		}()
	}
	won := 0
	for i := 0; i < racers; i++ {
		if err := <-results; err != nil {
			t.Fatalf("racer: %v", err)
		}
		if <-wins {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d racers won the first save, want 1", won)
	}
}
