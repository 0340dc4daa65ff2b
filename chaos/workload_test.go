package chaos_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// observed is one error a workload commit got.
type observed struct {
	at      time.Time
	code    string // SQLSTATE, "" if the server sent none
	unknown bool   // store.ErrOutcomeUnknown
	msg     string
}

// unknownCommit is a commit with an unknown outcome, resolved by reading
// the execution back.
type unknownCommit struct {
	id        string
	version   int // the version the commit would have made
	committed bool
	resolved  bool
}

// workload commits executions through st on a few goroutines (each owning
// its executions, so there are no conflicts) until stopped, recording
// every error and resolving every unknown outcome from the database.
type workload struct {
	st      store.ExecutionStore
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	ok      atomic.Int64
	mu      sync.Mutex
	errs    []observed
	unknown []unknownCommit
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startWorkload runs workers goroutines; every other commit is a complex
// one (an outbox emit and a trace entry), the rest take the fast path.
func startWorkload(t *testing.T, st store.ExecutionStore, workers int) *workload {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{st: st, cancel: cancel}
	for range workers {
		w.wg.Go(func() { w.worker(ctx) })
	}
	t.Cleanup(w.stop)
	return w
}

func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *workload) worker(ctx context.Context) {
	exes := make([]*store.Execution, 4)
	for i := range exes {
		exes[i] = &store.Execution{ID: newID(), DefinitionID: "chaos-test", Status: "running", Context: json.RawMessage(`{}`)}
	}
	for n := 0; ctx.Err() == nil; n++ {
		exe := exes[n%len(exes)]
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		if n%2 == 0 {
			err = w.st.Save(octx, exe)
		} else {
			err = w.st.Commit(octx, exe, []store.Emit{{Event: json.RawMessage(`{"n":1}`)}}, fmt.Sprintf("ev-%d", n), nil, nil, json.RawMessage(`{"step":1}`))
		}
		cancel()
		if err == nil {
			w.ok.Add(1)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		o := observed{at: time.Now(), unknown: errors.Is(err, store.ErrOutcomeUnknown), msg: err.Error()}
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			o.code = pe.Code
		}
		w.mu.Lock()
		w.errs = append(w.errs, o)
		w.mu.Unlock()
		// Learn the stored version (the commit may have happened).
		u := unknownCommit{id: exe.ID, version: exe.Version + 1}
		for ctx.Err() == nil {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			got, lerr := w.st.Load(lctx, exe.ID)
			cancel()
			if errors.Is(lerr, store.ErrNotFound) {
				exe.Version, u.resolved = 0, true
				break
			}
			if lerr == nil {
				exe.Version, u.resolved, u.committed = got.Version, true, got.Version == u.version
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if o.unknown {
			w.mu.Lock()
			w.unknown = append(w.unknown, u)
			w.mu.Unlock()
		}
	}
}

func (w *workload) errors() []observed {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]observed(nil), w.errs...)
}

func (w *workload) unknowns() []unknownCommit {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]unknownCommit(nil), w.unknown...)
}

// errorsSince counts the errors seen from t on.
func (w *workload) errorsSince(t time.Time) int {
	n := 0
	for _, o := range w.errors() {
		if !o.at.Before(t) {
			n++
		}
	}
	return n
}

// waitCommits waits until n more commits succeeded (bounded), i.e. the
// workload makes progress.
func (w *workload) waitCommits(t *testing.T, n int64) {
	t.Helper()
	target := w.ok.Load() + n
	eventually(t, fmt.Sprintf("%d more commits", n), func() bool { return w.ok.Load() >= target })
}

func (w *workload) logErrors(t *testing.T) {
	t.Helper()
	errs := w.errors()
	for i, o := range errs {
		if i == 10 {
			t.Logf("... %d more", len(errs)-10)
			break
		}
		t.Logf("workload error: code %q unknown %v: %s", o.code, o.unknown, o.msg)
	}
}

// testOpts are store options that surface faults quickly.
func testOpts(pooler bool) router.Options {
	return router.Options{UsePooler: pooler, Store: store.Options{
		ConnectAttempts: 2, ConnectInterval: 100 * time.Millisecond, ConnectTimeout: time.Second,
		StallCheck: 500 * time.Millisecond, MaxConns: 4,
	}}
}

// rig is a private cluster with a migrated database, a relay per shard in
// front of the endpoint the router uses, the router and the env.
type rig struct {
	c      *cluster.Cluster
	m      *shardmap.Map // the original map
	db     string
	relays []*chaos.Relay
	rt     *router.Router
	env    *chaos.Env
}

func newRig(t *testing.T, shards int, pooler bool) *rig {
	t.Helper()
	return newRigOpts(t, shards, testOpts(pooler))
}

// newRigOpts is newRig with the router's options.
func newRigOpts(t *testing.T, shards int, opts router.Options) *rig {
	t.Helper()
	pooler := opts.UsePooler
	c := clustertest.Private(t, cluster.Spec{Shards: shards, PgBouncer: true})
	m := clustertest.MigratedMap(t, c)
	cfg, err := pgconn.ParseConfig(m.Shards[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	relayed, relays, err := chaos.RelayMap(m, pooler, chaos.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := chaos.CloseRelays(relays); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := router.Open(ctx, relayed, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	r := &rig{c: c, m: m, db: cfg.Database, relays: relays, rt: rt}
	r.env = &chaos.Env{Cluster: c, Map: m, Database: cfg.Database, User: c.Spec.User, Relays: relays, Logf: t.Logf}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := chaos.HealAll(ctx, r.env); err != nil {
			t.Errorf("HealAll: %v", err)
		}
	})
	return r
}

// admin connects directly to shard i of the original map.
func (r *rig) admin(t *testing.T, i int) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.m.Shards[i].DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func inject(t *testing.T, env *chaos.Env, k chaos.Kind, shard int, p chaos.Params) (chaos.Fault, chaos.Evidence) {
	t.Helper()
	f, err := chaos.NewFault(k)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ev, err := f.Inject(ctx, env, shard, p, newRand(1))
	if err != nil {
		t.Fatalf("%s inject: %v", k, err)
	}
	t.Logf("%s inject: landed %v %v", k, ev.Landed, ev.Fields)
	return f, ev
}

func heal(t *testing.T, env *chaos.Env, f chaos.Fault, shard int) chaos.Evidence {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ev, err := f.Heal(ctx, env, shard)
	if err != nil {
		t.Fatalf("%s heal: %v", f.Kind(), err)
	}
	t.Logf("%s heal: landed %v %v", f.Kind(), ev.Landed, ev.Fields)
	return ev
}

// proxyConfig writes a pgshard config for a proxy over m (through each
// shard's PgBouncer).
func proxyConfig(t *testing.T, m *shardmap.Map) string {
	t.Helper()
	data, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("proxy:\n  use_pooler: true\n  pool_size: 8\nshardmap:\n")
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line != "" {
			b.WriteString("  " + line)
		}
	}
	p := filepath.Join(t.TempDir(), "pgshard.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startProxy starts the chaos-owned proxy over m, stopped when the test
// ends.
func startProxy(t *testing.T, m *shardmap.Map) *chaos.ProxyProcess {
	t.Helper()
	dir := t.TempDir()
	// Build first: on a loaded machine `go build` alone can take minutes,
	// and the bound below is for the proxy's start (CI saw the build eat
	// it: "not ready: context deadline exceeded" with an empty log).
	bin := pgshardBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := chaos.StartProxy(ctx, chaos.ProxyConfig{
		Bin: bin, ConfigPath: proxyConfig(t, m), LogPath: filepath.Join(dir, "proxy.log"),
		ReadyFile: filepath.Join(dir, "ready.json"), TrustUser: "postgres",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Error(err)
		}
		if p.Running() {
			t.Error("the proxy still runs after Stop")
		}
	})
	return p
}
