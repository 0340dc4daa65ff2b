package chaos_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/store"
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

// TestPgBouncerKill: the killed PgBouncer fails the clients' connections;
// after the heal a new one serves them.
func TestPgBouncerKill(t *testing.T) {
	r := newRig(t, 1, true)
	w := startWorkload(t, r.rt, 3)
	w.waitCommits(t, 10)
	begin := time.Now()
	f, ev := inject(t, r.env, chaos.KindPgBouncerKill, 0, nil)
	old := fieldInt(t, ev, "old_pid")
	if !ev.Landed || old == 0 || r.c.Shard(0).PoolerPID != 0 {
		t.Fatalf("inject: %v, pooler pid now %d", ev.Fields, r.c.Shard(0).PoolerPID)
	}
	eventually(t, "the clients to see the kill", func() bool { return w.errorsSince(begin) > 0 })
	ev = heal(t, r.env, f, 0)
	if n := fieldInt(t, ev, "new_pid"); !ev.Landed || n == 0 || n == old {
		t.Fatalf("heal: %v", ev.Fields)
	}
	w.waitCommits(t, 20)
	w.logErrors(t)
}

// TestPgBouncerPause: while paused, clients wait in PgBouncer (cl_waiting)
// and a commit started then completes only after the RESUME. (The store's
// stall check is off here: it would connect through the paused PgBouncer,
// which fails new server logins with 08P01, and report the shard
// unreachable after StallCheck.)
func TestPgBouncerPause(t *testing.T) {
	opts := testOpts(true)
	opts.Store.StallCheck = -1
	r := newRigOpts(t, 1, opts)
	w := startWorkload(t, r.rt, 3)
	w.waitCommits(t, 10)
	f, ev := inject(t, r.env, chaos.KindPgBouncerPause, 0, chaos.Params{"timeout": "10s"})
	if ev.Fields["paused"] != true {
		t.Fatalf("inject: %v", ev.Fields)
	}
	var done atomic.Int64 // unix nanos when the probe commit returned
	probeErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		exe := &store.Execution{ID: newID(), DefinitionID: "probe", Status: "running"}
		err := r.rt.Save(ctx, exe)
		done.Store(time.Now().UnixNano())
		probeErr <- err
	}()
	time.Sleep(300 * time.Millisecond) // the hold
	healAt := time.Now()
	if done.Load() != 0 {
		t.Fatal("a commit completed while PgBouncer was paused")
	}
	ev = heal(t, r.env, f, 0)
	if !ev.Landed || fieldInt(t, ev, "waiting") < 1 || ev.Fields["resumed"] != true {
		t.Fatalf("heal: %v", ev.Fields)
	}
	if err := <-probeErr; err != nil {
		t.Fatalf("the commit that waited for the RESUME: %v", err)
	}
	if time.Unix(0, done.Load()).Before(healAt) {
		t.Fatal("the waiting commit completed before the heal")
	}
	w.waitCommits(t, 20)
	if n := len(w.errors()); n != 0 {
		w.logErrors(t)
		t.Fatalf("a pause should only delay clients, %d errors", n)
	}
}

// TestPgBouncerPauseTimeout: PAUSE waits for a transaction in flight;
// bounded by its timeout it is recorded as not landed, and the heal's
// RESUME undoes the pause PgBouncer went on with.
func TestPgBouncerPauseTimeout(t *testing.T) {
	r := newRig(t, 1, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.m.Shards[0].PoolerDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	f, ev := inject(t, r.env, chaos.KindPgBouncerPause, 0, chaos.Params{"timeout": "300ms"})
	if ev.Landed || ev.Fields["paused"] != false || ev.Fields["timeout"] != "300ms" {
		t.Fatalf("inject with a transaction open: %v", ev.Fields)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the open transaction: %v", err)
	}
	ev = heal(t, r.env, f, 0)
	if ev.Landed || ev.Fields["paused"] != false {
		t.Fatalf("heal: %v", ev.Fields)
	}
	w := startWorkload(t, r.rt, 2)
	w.waitCommits(t, 10) // not left paused
}

// TestPgBouncerReconnect: RECONNECT replaces every server connection of the
// workload database, without an error for the clients.
func TestPgBouncerReconnect(t *testing.T) {
	r := newRig(t, 1, true)
	w := startWorkload(t, r.rt, 3)
	w.waitCommits(t, 10)
	admin := r.admin(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pids := func() []int {
		rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()", r.db)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := pids()
	if len(before) == 0 {
		t.Fatal("no server connections before RECONNECT")
	}
	f, ev := inject(t, r.env, chaos.KindPgBouncerReconnect, 0, nil)
	if ev.Fields["reconnected"] != true || ev.Fields["servers"].(int) == 0 {
		t.Fatalf("inject: %v", ev.Fields)
	}
	// The heal watches the server list: old connections closed, new
	// ones made.
	hev, err := f.Heal(ctx, r.env, 0)
	if err != nil || !hev.Landed || hev.Fields["closed"].(int) == 0 || hev.Fields["new"].(int) == 0 {
		t.Fatalf("heal: %v %v", hev.Fields, err)
	}
	eventually(t, "the old server connections to be replaced", func() bool {
		return !slices.ContainsFunc(pids(), func(p int) bool { return slices.Contains(before, p) })
	})
	w.waitCommits(t, 20)
	if n := len(w.errors()); n != 0 {
		w.logErrors(t)
		t.Fatalf("RECONNECT should be invisible to clients, %d errors", n)
	}
}

// TestShardCrash: an immediate stop (and a SIGKILL of the postmaster)
// fails the clients' connections; the heal's restart runs crash recovery,
// and the clients go on.
func TestShardCrash(t *testing.T) {
	r := newRig(t, 1, false)
	w := startWorkload(t, r.rt, 3)
	for _, mode := range []string{"immediate", "kill"} {
		t.Run(mode, func(t *testing.T) {
			w.waitCommits(t, 20)
			begin := time.Now()
			f, ev := inject(t, r.env, chaos.KindShardCrash, 0, chaos.Params{"mode": mode})
			old := fieldInt(t, ev, "old_pid")
			if !ev.Landed || old == 0 || r.c.Shard(0).PID != 0 {
				t.Fatalf("inject: %v", ev.Fields)
			}
			eventually(t, "the clients to see the crash", func() bool { return w.errorsSince(begin) > 0 })
			ev = heal(t, r.env, f, 0)
			rec := fieldLines(t, ev, "recovery")
			if n := fieldInt(t, ev, "new_pid"); !ev.Landed || n == 0 || n == old {
				t.Fatalf("heal: %v", ev.Fields)
			}
			for _, want := range []string{"database system was not properly shut down; automatic recovery in progress", "database system is ready to accept connections"} {
				if !containsLine(rec, want) {
					t.Errorf("recovery lines lack %q:\n%s", want, strings.Join(rec, "\n"))
				}
			}
			if mode == "immediate" && !containsLine(rec, "received immediate shutdown request") {
				t.Errorf("recovery lines lack the immediate shutdown:\n%s", strings.Join(rec, "\n"))
			}
			w.waitCommits(t, 20)
		})
	}
	for _, o := range w.errors() {
		if o.code != "" && !strings.HasPrefix(o.code, "57P") && !strings.HasPrefix(o.code, "08") {
			t.Errorf("unexpected error for a crash: %s", o.msg)
		}
	}
}

// TestBackendKill: SIGKILL of one backend makes the postmaster end every
// backend and reinitialize; the heal waits for that and reads it in the
// log.
func TestBackendKill(t *testing.T) {
	r := newRig(t, 1, false)
	w := startWorkload(t, r.rt, 3)
	w.waitCommits(t, 20)
	postmaster := r.c.Shard(0).PID
	begin := time.Now()
	f, ev := inject(t, r.env, chaos.KindBackendKill, 0, nil)
	pid := fieldInt(t, ev, "pid")
	if !ev.Landed || pid == 0 {
		t.Fatalf("inject: %v", ev.Fields)
	}
	ev = heal(t, r.env, f, 0)
	rec := fieldLines(t, ev, "recovery")
	for _, want := range []string{"terminated by signal 9", "all server processes terminated; reinitializing", "database system is ready to accept connections"} {
		if !containsLine(rec, want) {
			t.Errorf("recovery lines lack %q:\n%s", want, strings.Join(rec, "\n"))
		}
	}
	if !ev.Landed || !containsLine(rec, "(PID "+strconv.Itoa(pid)+") was terminated by signal 9") {
		t.Fatalf("heal: landed %v, the killed pid %d not in %v", ev.Landed, pid, rec)
	}
	if r.c.Shard(0).PID != postmaster {
		t.Fatal("a backend kill must not replace the postmaster")
	}
	eventually(t, "the clients to see the reinitialization", func() bool { return w.errorsSince(begin) > 0 })
	w.waitCommits(t, 20)
	w.logErrors(t)
}

// TestRelayFaults: latency, stall, reset and partition on a shard's relay
// in front of Postgres, each asserting its evidence and what the clients
// saw.
func TestRelayFaults(t *testing.T) {
	r := newRig(t, 1, false)
	w := startWorkload(t, r.rt, 3)
	w.waitCommits(t, 10)

	t.Run("latency", func(t *testing.T) {
		f, ev := inject(t, r.env, chaos.KindLatency, 0, chaos.Params{"delay": "2ms", "jitter": "3ms"})
		if fieldInt(t, ev, "delay_ms") != 2 {
			t.Fatalf("inject: %v", ev.Fields)
		}
		w.waitCommits(t, 20) // the clients go on, slower (not asserted: timing)
		ev = heal(t, r.env, f, 0)
		// Each of the 20 commits had its reply delayed, and all but the
		// (at most 3) in flight at the inject their request too.
		if !ev.Landed || fieldInt(t, ev, "delayed") < 37 {
			t.Fatalf("heal: %v (20 commits are at least 37 delayed chunks)", ev.Fields)
		}
	})

	t.Run("stall", func(t *testing.T) {
		f, _ := inject(t, r.env, chaos.KindStall, 0, nil)
		var done atomic.Int64
		probe := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := r.rt.Save(ctx, &store.Execution{ID: newID(), DefinitionID: "probe", Status: "running"})
			done.Store(time.Now().UnixNano())
			probe <- err
		}()
		eventually(t, "held data", func() bool { return r.relays[0].Stats().Held > 0 })
		time.Sleep(200 * time.Millisecond) // the hold
		if done.Load() != 0 {
			t.Fatal("a commit completed through a stalled relay")
		}
		healAt := time.Now()
		ev := heal(t, r.env, f, 0)
		if !ev.Landed || fieldInt(t, ev, "stalled") < 1 {
			t.Fatalf("heal: %v", ev.Fields)
		}
		err := <-probe
		if time.Unix(0, done.Load()).Before(healAt) {
			t.Fatal("the stalled commit completed before the heal")
		}
		// A stall delays; the router's stall check may still give up on
		// the server meanwhile (its probe connection stalls too).
		if err != nil && !errors.Is(err, store.ErrUnreachable) {
			t.Fatalf("the stalled commit: %v", err)
		}
		w.waitCommits(t, 20)
	})

	t.Run("reset", func(t *testing.T) {
		begin := time.Now()
		_, ev := inject(t, r.env, chaos.KindReset, 0, nil)
		if !ev.Landed || fieldInt(t, ev, "reset") < 1 {
			t.Fatalf("inject: %v", ev.Fields)
		}
		eventually(t, "the clients to see the reset", func() bool { return w.errorsSince(begin) > 0 })
		w.waitCommits(t, 20)
	})

	t.Run("partition", func(t *testing.T) {
		begin := time.Now()
		f, ev := inject(t, r.env, chaos.KindPartition, 0, nil)
		if fieldInt(t, ev, "held") < 1 {
			t.Fatalf("inject: %v", ev.Fields)
		}
		eventually(t, "the clients to give up on the partitioned shard", func() bool { return w.errorsSince(begin) > 0 })
		ev = heal(t, r.env, f, 0)
		if !ev.Landed || fieldInt(t, ev, "held") < 1 || fieldInt(t, ev, "refused") < 1 {
			t.Fatalf("heal: %v (the stall checks' new connections must have been held)", ev.Fields)
		}
		w.waitCommits(t, 20)
	})
	w.logErrors(t)
}

// proxyRig adds the chaos-owned proxy (over the shards' PgBouncers) and a
// relay in front of it to a rig, and a store workload through them.
func proxyRig(t *testing.T) (*rig, *workload) {
	t.Helper()
	r := newRig(t, 2, true)
	p := startProxy(t, r.m)
	pr := newRelay(t, p.Addr())
	r.env.Proxy, r.env.ProxyRelay = p, pr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := testOpts(false).Store
	st, err := store.Open(ctx, "postgres://postgres@"+pr.Addr()+"/"+r.db+"?sslmode=disable", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	w := startWorkload(t, st, 3)
	w.waitCommits(t, 10)
	return r, w
}

// TestProxyFaults: lost-ack through the relay in front of the proxy, and
// a proxy restart with clients connected.
func TestProxyFaults(t *testing.T) {
	r, w := proxyRig(t)

	t.Run("lost-ack", func(t *testing.T) {
		f, _ := inject(t, r.env, chaos.KindLostAck, -1, chaos.Params{"via": "proxy", "count": "2"})
		waitDropped(t, r.env.ProxyRelay, 2)
		ev := heal(t, r.env, f, -1)
		if ev.Fields["via"] != "proxy" {
			t.Fatalf("heal: %v", ev.Fields)
		}
		checkLostAcks(t, w, ev, 2)
		w.waitCommits(t, 10)
	})

	t.Run("proxy-restart", func(t *testing.T) {
		begin := time.Now()
		addr := r.env.Proxy.Addr()
		f, ev := inject(t, r.env, chaos.KindProxyRestart, -1, nil)
		old := fieldInt(t, ev, "old_pid")
		if !ev.Landed || old == 0 || fieldInt(t, ev, "clients") < 1 || fieldInt(t, ev, "cut") < 1 || r.env.Proxy.Running() {
			t.Fatalf("inject: %v", ev.Fields)
		}
		eventually(t, "the clients to see the proxy go", func() bool { return w.errorsSince(begin) > 0 })
		time.Sleep(200 * time.Millisecond) // the hold: the proxy is down
		ev = heal(t, r.env, f, -1)
		if n := fieldInt(t, ev, "new_pid"); !ev.Landed || n == 0 || n == old || r.env.Proxy.Addr() != addr {
			t.Fatalf("heal: %v, address %s (was %s)", ev.Fields, r.env.Proxy.Addr(), addr)
		}
		w.waitCommits(t, 20)
	})
	w.logErrors(t)
}

// TestPoolerWatch: during a run's faults a PgBouncer that exits on its own
// (PgBouncer 1.18 does, pgbouncer/pgbouncer#822) is started again, as a
// supervisor would, and the clients commit through it again; one that a
// pgbouncer-kill fault holds down stays down until the fault heals it.
func TestPoolerWatch(t *testing.T) {
	r := newRig(t, 1, true)
	w := startWorkload(t, r.rt, 3)
	w.waitCommits(t, 10)
	chaos.GuardPoolers(r.env)
	ctx, cancel := context.WithCancel(context.Background())
	var restarts int
	done := make(chan struct{})
	go func() {
		defer close(done)
		restarts = chaos.WatchPoolers(ctx, r.env)
	}()
	stop := func() int { // the watch's owner: ends it and waits for it
		cancel()
		<-done
		return restarts
	}
	defer stop()
	within := func(what string, cond func() bool) {
		t.Helper()
		for range 600 { // 60 s: a PgBouncer start on a loaded machine
			if cond() {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("no %s within 60 s", what)
	}

	// Held down by the fault: a look of the watch leaves it.
	f, ev := inject(t, r.env, chaos.KindPgBouncerKill, 0, nil)
	if !ev.Landed {
		t.Fatalf("inject: %v", ev.Fields)
	}
	if n := chaos.LookAtPoolers(context.Background(), r.env); n != 0 || r.c.PoolerRunning(0) || r.c.Shard(0).PoolerPID != 0 {
		t.Fatalf("the watch started a PgBouncer a pgbouncer-kill fault holds down (pid %d)", r.c.Shard(0).PoolerPID)
	}
	heal(t, r.env, f, 0)
	w.waitCommits(t, 10)

	// Exits on its own: started again.
	old := r.c.Shard(0).PoolerPID
	if old == 0 {
		t.Fatal("no PgBouncer pid after the heal")
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	within("PgBouncer started again by the watch", func() bool {
		pid := r.c.Shard(0).PoolerPID
		return pid != 0 && pid != old && r.c.PoolerRunning(0)
	})
	w.waitCommits(t, 10)
	if n := stop(); n != 1 {
		t.Errorf("the watch counted %d restarts, want 1", n)
	}
	w.logErrors(t)
}
