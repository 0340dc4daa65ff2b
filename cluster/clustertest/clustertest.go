// Package clustertest gives integration tests a shared cluster.
//
// A package's tests call Main from TestMain, then Get (or GetSpec) in each
// test that needs PostgreSQL, and usually FreshDatabase for isolation:
//
//	func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		c := clustertest.Get(t)
//		db := clustertest.FreshDatabase(t, c)
//		m, err := c.MapFor(db, 64)
//		...
//	}
//
// The first Get starts the cluster (about 1-3 s; initdb is cached across
// runs), later tests of the package reuse it, and Main stops it and removes
// its directory after the tests ran. Clusters left behind by a test binary
// that was killed (a -timeout panic, say) are stopped and removed by the
// next Main.
//
// Provider choice: the local provider when the PostgreSQL binaries (and
// PgBouncer, if the spec asks for it) are installed, else the testcontainers
// provider when a Docker engine is healthy. PGSHARD_TEST_PROVIDER=local or
// =testcontainers forces one. If none can run, the test is skipped with the
// reason, or fails when PGSHARD_TEST_REQUIRE=1 (as in CI). In -short mode
// the tests are skipped.
package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
)

// Environment variables read by this package.
const (
	// EnvProvider forces a provider: "local" or "testcontainers".
	EnvProvider = "PGSHARD_TEST_PROVIDER"
	// EnvRequire, set to 1, turns "cannot run a cluster here" skips into
	// failures.
	EnvRequire = "PGSHARD_TEST_REQUIRE"
)

// DefaultSpec is the spec of Get's cluster: 4 shards, each behind a
// PgBouncer, fsync off.
func DefaultSpec() cluster.Spec {
	return cluster.Spec{Shards: 4, PgBouncer: true}
}

// startTimeout bounds the start of one shared cluster.
const startTimeout = 3 * time.Minute

// dirPrefix names the directories of test clusters under os.TempDir().
const dirPrefix = "pgshard-test-"

// ownerFile, in a test cluster's directory, names the process that owns it.
const ownerFile = "clustertest-owner.json"

type entry struct {
	once sync.Once
	c    *cluster.Cluster
	err  error
	dir  string // made by start, "" if it failed before
}

var reg = struct {
	sync.Mutex
	main    bool
	entries map[string]*entry
}{entries: map[string]*entry{}}

// Main runs the package's tests, then stops the clusters they started and
// removes their directories. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
//
// Before running the tests it reaps clusters left behind by test binaries
// that died without cleaning up. When the tests passed, it also fails the
// run if any goroutine outlived them (goleak: a pool left open, a racer
// not waited for).
func Main(m *testing.M) int {
	reg.Lock()
	reg.main = true
	reg.Unlock()
	reapOrphans()
	code := m.Run()
	if err := stopAll(); err != nil {
		fmt.Fprintf(os.Stderr, "clustertest: stopping test clusters: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "clustertest: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// MigratedMap creates a fresh database on every shard of c (dropped when
// the test ends), migrates it, and returns its shard map (DefaultBuckets
// buckets, direct and pooler DSNs).
func MigratedMap(t testing.TB, c *cluster.Cluster) *shardmap.Map {
	t.Helper()
	db := FreshDatabase(t, c)
	m, err := c.MapFor(db, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	migrate(t, m, db)
	return m
}

// MigratedOneShard is MigratedMap for tests of a single database: a fresh,
// migrated database on c's first shard, as a one-shard map of 64 buckets.
func MigratedOneShard(t testing.TB, c *cluster.Cluster) *shardmap.Map {
	t.Helper()
	db := FreshDatabase(t, c)
	full, err := c.MapFor(db, 64)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	m, err := shardmap.Even(64, full.Shards[:1])
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	migrate(t, m, db)
	return m
}

func migrate(t testing.TB, m *shardmap.Map, db string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if rep, err := migrations.Apply(ctx, m, migrations.Options{}); err != nil {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Fatalf("clustertest: migrate %s: %v\n%s", db, err, b.String())
	}
}

func stopAll() error {
	reg.Lock()
	entries := reg.entries
	reg.entries = map[string]*entry{}
	reg.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	for _, e := range entries {
		e.once.Do(func() { e.err = errors.New("never started") }) // wait for a start in flight
		if e.c != nil {
			if err := e.c.Down(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if e.dir != "" {
			// Also stops what a failed start may have left; the directory
			// is ours (os.MkdirTemp), so remove it whatever it holds.
			err := cluster.Down(ctx, e.dir, false)
			if err == nil {
				err = os.RemoveAll(e.dir)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Get returns the package's shared cluster (DefaultSpec), starting it on
// first use. Tests may create databases on it but must not stop its servers:
// a test that injects faults starts its own cluster with Private.
func Get(t testing.TB) *cluster.Cluster {
	t.Helper()
	return GetSpec(t, DefaultSpec())
}

// GetSpec returns the package's shared cluster for spec (one per distinct
// spec, Log ignored), starting it on first use.
func GetSpec(t testing.TB, spec cluster.Spec) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("clustertest: skipped in -short mode (needs a PostgreSQL cluster)")
	}
	reg.Lock()
	if !reg.main {
		reg.Unlock()
		t.Fatal("clustertest: call clustertest.Main from TestMain (func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }), so the cluster is stopped after the tests")
	}
	spec.Log = nil
	keyBytes, err := json.Marshal(spec)
	if err != nil {
		reg.Unlock()
		t.Fatalf("clustertest: %v", err)
	}
	key := string(keyBytes)
	e := reg.entries[key]
	if e == nil {
		e = &entry{}
		reg.entries[key] = e
	}
	reg.Unlock()

	e.once.Do(func() { e.c, e.dir, e.err = start(t, spec) })
	if e.err != nil {
		var un *unavailableError
		if errors.As(e.err, &un) {
			SkipOrFail(t, e.err)
		}
		t.Fatalf("clustertest: %v", e.err)
	}
	return e.c
}

// unavailableError means no provider can run here: a reason to skip.
type unavailableError struct{ reasons []string }

func (e *unavailableError) Error() string {
	return "no way to run a PostgreSQL cluster here: " + strings.Join(e.reasons, "; ")
}

// chooseProvider picks the provider for spec; see the package comment.
func chooseProvider(ctx context.Context, spec cluster.Spec) (cluster.Provider, error) {
	var candidates []cluster.Provider
	switch p := os.Getenv(EnvProvider); p {
	case "":
		candidates = []cluster.Provider{cluster.Local(), cluster.Containers()}
	case "local":
		candidates = []cluster.Provider{cluster.Local()}
	case "testcontainers":
		candidates = []cluster.Provider{cluster.Containers()}
	default:
		return nil, fmt.Errorf("%s=%q: want local or testcontainers", EnvProvider, p)
	}
	var reasons []string
	for _, p := range candidates {
		var err error
		if sc, ok := p.(cluster.SpecChecker); ok {
			err = sc.AvailableFor(ctx, spec)
		} else {
			err = p.Available(ctx)
		}
		if err == nil {
			return p, nil
		}
		reasons = append(reasons, err.Error())
	}
	return nil, &unavailableError{reasons: reasons}
}

func start(t testing.TB, spec cluster.Spec) (*cluster.Cluster, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	p, err := chooseProvider(ctx, spec)
	if err != nil {
		return nil, "", err
	}
	dir, err := makeDir()
	if err != nil {
		return nil, dir, err
	}
	begin := time.Now()
	c, err := p.Up(ctx, dir, spec)
	if err != nil {
		return nil, dir, fmt.Errorf("start a %d-shard cluster with the %s provider: %w", spec.Shards, p.Name(), err)
	}
	t.Logf("clustertest: %d-shard cluster (%s provider, PgBouncer %v) up in %v in %s",
		len(c.Shards), p.Name(), spec.PgBouncer, time.Since(begin).Round(time.Millisecond), dir)
	return c, dir, nil
}

// Dir returns a new, empty directory for a cluster of the test's own
// (cluster.Up(ctx, clustertest.Dir(t), spec)). Unlike t.TempDir() it is
// reachable by the "postgres" OS user the servers run as under root. When
// the test ends, any cluster in it is stopped and the directory removed; if
// the test binary dies first, a later Main does that.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := makeDir()
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := cluster.Down(ctx, dir, false)
		if err == nil {
			err = os.RemoveAll(dir)
		}
		if err != nil {
			t.Errorf("clustertest: stop the cluster in %s: %v", dir, err)
		}
	})
	return dir
}

// Private starts a local cluster for the calling test alone, in Dir(t), and
// stops it when the test ends. Use it to inject faults (StopShard, ...),
// which the shared cluster must never see and which only the local provider
// supports. It skips (or, with PGSHARD_TEST_REQUIRE=1, fails) when the local
// provider cannot run here.
func Private(t testing.TB, spec cluster.Spec) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("clustertest: skipped in -short mode (needs a PostgreSQL cluster)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(ctx, spec); err != nil {
		SkipOrFail(t, err)
	}
	begin := time.Now()
	c, err := cluster.Up(ctx, Dir(t), spec)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	t.Logf("clustertest: private %d-shard cluster up in %v in %s", len(c.Shards), time.Since(begin).Round(time.Millisecond), c.Dir)
	return c
}

// SkipOrFail skips the test because of reason (something it needs is not
// available here), or fails it when PGSHARD_TEST_REQUIRE=1.
func SkipOrFail(t testing.TB, reason error) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("clustertest: %v (%s=1, so this is a failure, not a skip)", reason, EnvRequire)
	}
	t.Skipf("clustertest: %v", reason)
}

// owner identifies a test process by PID and start time.
type owner struct {
	PID   int    `json:"pid"`
	Start string `json:"start"` // field 22 of /proc/PID/stat
}

func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// makeDir makes a cluster directory under os.TempDir(), traversable by the
// servers' OS user, with an owner file naming this process.
func makeDir() (string, error) {
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return dir, err
	}
	return dir, writeOwner(dir)
}

func writeOwner(dir string) error {
	b, err := json.Marshal(owner{PID: os.Getpid(), Start: processStart(os.Getpid())})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ownerFile), b, 0o644)
}

// reapOrphans stops and removes test clusters whose owning test process is
// gone (killed by -timeout, SIGKILL, a crash).
func reapOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		var o owner
		if json.Unmarshal(b, &o) != nil || o.PID <= 0 {
			continue
		}
		if processStart(o.PID) == o.Start && o.Start != "" {
			continue // its owner still runs
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = cluster.Down(ctx, dir, false)
		cancel()
		if err == nil {
			err = os.RemoveAll(dir)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) { // another package's Main may reap it too

			fmt.Fprintf(os.Stderr, "clustertest: removing the orphaned test cluster %s: %v\n", dir, err)
		}
	}
}

// FreshDatabase creates a database with a unique name, derived from the
// test's name, on every shard of c, and drops it when the test ends. It
// returns the name.
func FreshDatabase(t testing.TB, c *cluster.Cluster) string {
	t.Helper()
	name := databaseName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CreateDatabase(ctx, name); err != nil {
		t.Fatalf("clustertest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Errorf("clustertest: drop database %s: %v", name, err)
		}
	})
	return name
}

// databaseName makes "t_<test name>_<random hex>" within 63 bytes, using only
// lowercase letters, digits and '_'.
func databaseName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if s := b.String(); s != "" && !strings.HasSuffix(s, "_") {
				b.WriteByte('_')
			}
		}
	}
	base := strings.Trim(b.String(), "_")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "_")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	if base != "" {
		base += "_"
	}
	return "t_" + base + hex.EncodeToString(rnd[:])
}
