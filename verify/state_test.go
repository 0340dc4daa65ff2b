package verify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/verify"
)

// TestMain stops the test cluster the integration tests start (and checks
// for leaked goroutines).
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

func dumpSpec() cluster.Spec { return cluster.Spec{Shards: 2} }

func execOn(t *testing.T, dsn string, sqls ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range sqls {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestDump writes rows into every table of a migrated two-shard cluster
// by SQL — placed by the map, plus one executions row on the wrong shard
// and an outbox row whose event is not JSON — and checks that Dump reads
// them all with their identities, that each bucket the shards computed is
// the one Postgres's PARTITION BY HASH gives (shardmap's port, checked
// against live servers in its own tests), that the State round-trips as
// JSON, and that Check's placement finds exactly the misplaced row.
func TestDump(t *testing.T) {
	c := clustertest.GetSpec(t, dumpSpec())
	m := clustertest.MigratedMap(t, c)
	keys := map[string][]string{} // shard → keys placed there
	var misplaced string
	for i := 0; len(keys["shard0"]) < 3 || len(keys["shard1"]) < 3 || misplaced == ""; i++ {
		k := fmt.Sprintf("%032x", 0xd000+i)
		sh := m.Lookup(k).Name
		if len(keys[sh]) < 3 {
			keys[sh] = append(keys[sh], k)
		} else if misplaced == "" && sh == "shard1" {
			misplaced = k // owned by shard1, written to shard0
		}
	}
	for _, s := range m.Shards {
		var q []string
		for _, k := range keys[s.Name] {
			q = append(q,
				fmt.Sprintf(`INSERT INTO executions VALUES ('%s', 'chaos', '{"id":"%s","version":2,"context":{"step":1,"op":"r1/w0/1","timers":{"t0":1796119200.103}}}', 2)`, k, k),
				fmt.Sprintf(`INSERT INTO processed_events VALUES ('%s', 'r1-w0-1')`, k),
				fmt.Sprintf(`INSERT INTO timers VALUES ('%s', 't0', 1796119200.103)`, k),
				fmt.Sprintf(`INSERT INTO trace VALUES ('%s', 0, '{"op":"r1/w0/1","step":1}')`, k),
				fmt.Sprintf(`INSERT INTO spawns (parent_id, child_id, root_path, context) VALUES ('%s', 'child', 'child', '{"op":"r1/w0/1"}')`, k),
				fmt.Sprintf(`INSERT INTO outbox (target_id, event) VALUES ('%s', '{"id":"r1-w0-1-e0","from":"%s","op":"r1/w0/1"}')`, keys[s.Name][0], k))
		}
		if s.Name == "shard0" {
			q = append(q,
				fmt.Sprintf(`INSERT INTO executions VALUES ('%s', 'chaos', '{}', 1)`, misplaced),
				`INSERT INTO outbox (target_id, event) VALUES (NULL, 'not json')`)
		}
		execOn(t, s.DSN, q...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := verify.Dump(ctx, m, verify.DumpOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shards) != 2 || st.Map.Buckets != m.Buckets {
		t.Fatalf("dumped %d shards, %d buckets", len(st.Shards), st.Map.Buckets)
	}
	for i, ss := range st.Shards {
		s := m.Shards[i]
		if ss.Name != s.Name || ss.Identity == nil || ss.Identity.Name != s.Name || ss.Identity.Ordinal != s.Ordinal || ss.Identity.Buckets != m.Buckets {
			t.Errorf("shard %d: %s, identity %+v", i, ss.Name, ss.Identity)
		}
		wantExec := len(keys[s.Name])
		if s.Name == "shard0" {
			wantExec++
		}
		if len(ss.Executions) != wantExec || len(ss.Processed) != 3 || len(ss.Timers) != 3 || len(ss.Trace) != 3 || len(ss.Spawns) != 3 {
			t.Errorf("%s: %d executions, %d processed, %d timers, %d trace, %d spawns", s.Name,
				len(ss.Executions), len(ss.Processed), len(ss.Timers), len(ss.Trace), len(ss.Spawns))
		}
		bucket := func(key string, got int) {
			if want := m.Bucket(key); got != want {
				t.Errorf("%s: bucket of %s is %d, want %d", s.Name, key, got, want)
			}
		}
		for _, r := range ss.Executions {
			bucket(r.ID, r.Bucket)
		}
		for _, r := range ss.Processed {
			bucket(r.ExecutionID, r.Bucket)
		}
		for _, r := range ss.Timers {
			bucket(r.ExecutionID, r.Bucket)
			if r.FireAt != 1796119200.103 {
				t.Errorf("fire_at %v", r.FireAt)
			}
		}
		for _, r := range ss.Trace {
			bucket(r.ExecutionID, r.Bucket)
		}
		for _, r := range ss.Spawns {
			bucket(r.ParentID, r.Bucket)
			if r.Seq%1024 != int64(s.Ordinal+1) {
				t.Errorf("spawn seq %d on ordinal %d", r.Seq, s.Ordinal)
			}
		}
		for _, r := range ss.Outbox {
			if r.TargetID == nil {
				if r.Bucket != verify.NoBucket || r.Event != "not json" {
					t.Errorf("the non-JSON outbox row: %+v", r)
				}
				continue
			}
			var ev struct{ From string }
			_ = json.Unmarshal([]byte(r.Event), &ev)
			bucket(ev.From, r.Bucket)
		}
	}
	var b bytes.Buffer
	if err := st.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	back, err := verify.ReadState(&b)
	if err != nil {
		t.Fatal(err)
	}
	back.DumpedAt = st.DumpedAt // the monotonic reading does not survive JSON
	if !reflect.DeepEqual(back, st) {
		t.Errorf("the state does not round-trip as JSON")
	}

	h := emptyHistory(t, st.Map)
	v := verify.Check(ctx, h, st, verify.Options{})
	var place []verify.Violation
	for _, x := range v.Violations {
		if x.Invariant == verify.InvPlacement {
			place = append(place, x)
		}
	}
	if len(place) != 1 || !strings.Contains(place[0].Summary, misplaced) || !strings.Contains(place[0].Summary, "belongs to shard shard1") {
		t.Errorf("placement violations %+v, want the one misplaced row %s", place, misplaced)
	}
}

func emptyHistory(t *testing.T, mi verify.MapInfo) *verify.History {
	t.Helper()
	mj, _ := json.Marshal(mi)
	src := `{"type":"header","format":"pgshard-history","version":1,"run":"r1","seed":1,"map":` + string(mj) + `,"schedule":[]}` + "\n" +
		`{"type":"end","t":1,"ops":0,"quiesce":{"ok":true}}` + "\n"
	h, err := verify.ReadHistory(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestDumpShardDown fails fast and names the shard that cannot be read.
func TestDumpShardDown(t *testing.T) {
	c := clustertest.GetSpec(t, dumpSpec())
	m := clustertest.MigratedMap(t, c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	down := m.Clone()
	down.Shards[1].DSN = "postgres://postgres@" + addr + "/pgshard?sslmode=disable"
	if err := down.Validate(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = verify.Dump(context.Background(), down, verify.DumpOptions{ConnectTimeout: 3 * time.Second})
	var sd *verify.ShardDownError
	if !errors.As(err, &sd) || sd.Shard != down.Shards[1].Name || !strings.Contains(err.Error(), "dump shard "+down.Shards[1].Name) {
		t.Fatalf("error %v, want one naming %s", err, down.Shards[1].Name)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestDumpFence reads the fences of a migrated cluster (on, set from the
// map: no placement violation) and catches a fence row edited directly in
// the database: the range left frozen on its owner is named, with what
// the shard's fence says.
func TestDumpFence(t *testing.T) {
	c := clustertest.GetSpec(t, dumpSpec())
	m := clustertest.MigratedMap(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	check := func() (*verify.State, []verify.Violation) {
		t.Helper()
		st, err := verify.Dump(ctx, m, verify.DumpOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v := verify.Check(ctx, emptyHistory(t, st.Map), st, verify.Options{})
		var place []verify.Violation
		for _, x := range v.Violations {
			if x.Invariant == verify.InvPlacement && strings.HasPrefix(x.Summary, "fence:") {
				place = append(place, x)
			}
		}
		return st, place
	}
	st, place := check()
	for _, ss := range st.Shards {
		f := ss.Fence
		if f == nil || !f.Enabled || f.Epoch != m.Epoch || f.Buckets != m.Buckets || len(f.Rows) == 0 {
			t.Fatalf("%s: fence %+v, want one on at epoch %d", ss.Name, f, m.Epoch)
		}
	}
	if len(place) != 0 {
		t.Fatalf("fence violations on a freshly migrated cluster: %+v", place)
	}
	r := m.RangesOf(m.Shards[0].Name)[0]
	// The fence splits its rows along the map's ranges: freeze the row
	// of shard0's first range.
	execOn(t, m.Shards[0].DSN, fmt.Sprintf(`UPDATE pgshard_fence SET state = 'frozen' WHERE lo = %d`, r.Lo))
	defer execOn(t, m.Shards[0].DSN, fmt.Sprintf(`UPDATE pgshard_fence SET state = 'owned' WHERE lo = %d`, r.Lo))
	_, place = check()
	want := fmt.Sprintf("fence: buckets %d-%d (shard %s in the final map)", r.Lo, r.Hi, m.Shards[0].Name)
	if len(place) != 1 || !strings.Contains(place[0].Summary, want) || !strings.Contains(place[0].Summary, "left frozen on "+m.Shards[0].Name) {
		t.Fatalf("violations %+v, want one: %s ... left frozen", place, want)
	}
}
