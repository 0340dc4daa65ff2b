package chaos_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/chaos"
)

func fieldInt(t *testing.T, ev chaos.Evidence, key string) int {
	t.Helper()
	switch v := ev.Fields[key].(type) {
	case int:
		return v
	case int64:
		return int(v)
	}
	t.Fatalf("evidence %s = %#v, want an int (%v)", key, ev.Fields[key], ev.Fields)
	return 0
}

func fieldLines(t *testing.T, ev chaos.Evidence, key string) []string {
	t.Helper()
	v, ok := ev.Fields[key].([]string)
	if !ok {
		t.Fatalf("evidence %s = %#v, want lines", key, ev.Fields[key])
	}
	return v
}

func containsLine(lines []string, s string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, s) })
}

// TestTerminate: a session idle in transaction is terminated (and the
// chaos tool's own session is not); its client then sees 57P01.
func TestTerminate(t *testing.T) {
	r := newRig(t, 1, false)
	w := startWorkload(t, r.rt, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	victim := r.admin(t, 0)
	tx, err := victim.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	spared, err := pgx.Connect(ctx, r.m.Shards[0].DSN+"&application_name="+chaos.VerifyAppName)
	if err != nil {
		t.Fatal(err)
	}
	defer spared.Close(ctx)
	stx, err := spared.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sparedPID int
	if err := stx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&sparedPID); err != nil {
		t.Fatal(err)
	}
	_, ev := inject(t, r.env, chaos.KindTerminate, 0, nil)
	if !ev.Landed || fieldInt(t, ev, "count") < 1 {
		t.Fatalf("terminate did not land: %v", ev.Fields)
	}
	found := false
	for _, b := range ev.Fields["terminated"].([]map[string]any) {
		if b["pid"] == sparedPID {
			t.Fatalf("the verifier's session %d was terminated", sparedPID)
		}
		found = found || (b["pid"] == pid && b["state"] == "idle in transaction")
	}
	if !found {
		t.Fatalf("the idle-in-transaction session %d is not in the evidence %v", pid, ev.Fields["terminated"])
	}
	_, err = tx.Exec(ctx, "SELECT 1")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57P01" {
		t.Fatalf("the terminated session's client got %v, want 57P01", err)
	}
	if _, err := stx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the spared session: %v", err)
	}
	w.waitCommits(t, 20)
	w.logErrors(t)
}

// waitDropped polls relay until it dropped n replies in total.
func waitDropped(t *testing.T, r *chaos.Relay, n int64) {
	t.Helper()
	eventually(t, "dropped commit replies", func() bool { return r.Stats().DroppedReplies >= n })
}

// checkLostAcks: the workload saw exactly the dropped commits fail with an
// unknown outcome, and every one of them is in the database.
func checkLostAcks(t *testing.T, w *workload, ev chaos.Evidence, want int) {
	t.Helper()
	if !ev.Landed || fieldInt(t, ev, "dropped") != want {
		t.Fatalf("lost-ack evidence %v, want %d dropped", ev.Fields, want)
	}
	for _, d := range ev.Fields["replies"].([]chaos.DroppedReply) {
		if d.Error || d.Committed == nil || !*d.Committed || d.Bytes == 0 {
			t.Errorf("dropped reply %+v: want a complete, committed reply", d)
		}
	}
	eventually(t, "the unknown outcomes resolved", func() bool {
		u := w.unknowns()
		return len(u) >= want && !slices.ContainsFunc(u, func(c unknownCommit) bool { return !c.resolved })
	})
	u := w.unknowns()
	if len(u) != want {
		w.logErrors(t)
		t.Fatalf("%d unknown outcomes, want %d (one per dropped reply)", len(u), want)
	}
	for _, c := range u {
		if !c.committed {
			t.Errorf("execution %s: the commit to version %d whose reply was dropped is not in the database", c.id, c.version)
		}
	}
}

// TestLostAck: through a shard's relay (in front of Postgres, and of
// PgBouncer) the relay drops exactly count commit replies after the server
// finished them; the clients get an unknown outcome and the commits are
// in the database.
func TestLostAck(t *testing.T) {
	for _, pooler := range []bool{false, true} {
		name := "direct"
		if pooler {
			name = "pgbouncer"
		}
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 1, pooler)
			w := startWorkload(t, r.rt, 3)
			w.waitCommits(t, 10)
			f, ev := inject(t, r.env, chaos.KindLostAck, 0, chaos.Params{"count": "3"})
			if ev.Landed || ev.Fields["armed"] != 3 {
				t.Fatalf("inject evidence %v", ev.Fields)
			}
			waitDropped(t, r.relays[0], 3)
			ev = heal(t, r.env, f, 0)
			checkLostAcks(t, w, ev, 3)
			w.waitCommits(t, 10)
		})
	}
}
