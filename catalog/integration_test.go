package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/shardmap"
)

// TestMain stops the package's test cluster and checks that no goroutine
// outlived the tests (a pool left open, a watcher not waited for).
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// modes are the two ways a catalog is reached: the server itself, and its
// PgBouncer in transaction mode.
var modes = []string{"direct", "pgbouncer"}

// catalogDSN creates a fresh database on the test cluster's server (one
// shard, behind PgBouncer) and returns its DSN for mode.
func catalogDSN(t *testing.T, mode string) string {
	t.Helper()
	c := clustertest.GetSpec(t, cluster.Spec{Shards: 1, PgBouncer: true})
	db := clustertest.FreshDatabase(t, c)
	m, err := c.MapFor(db, 1)
	if err != nil {
		t.Fatal(err)
	}
	if mode == "pgbouncer" {
		return m.Shards[0].PoolerDSN
	}
	return m.Shards[0].DSN
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, dsn string) *catalog.Catalog {
	t.Helper()
	c, err := catalog.Open(testCtx(t), dsn, catalog.Options{ApplicationName: "catalog test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// installed opens a fresh, installed catalog for mode.
func installed(t *testing.T, mode string) (*catalog.Catalog, string) {
	t.Helper()
	dsn := catalogDSN(t, mode)
	c := open(t, dsn)
	if _, err := c.Install(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return c, dsn
}

func eachMode(t *testing.T, f func(t *testing.T, mode string)) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) { f(t, mode) })
	}
}

func mustMarshal(t *testing.T, m *shardmap.Map) string {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNotInstalled(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		c := open(t, catalogDSN(t, mode))
		if _, err := c.Load(ctx); !errors.Is(err, catalog.ErrNotInstalled) {
			t.Errorf("Load: want ErrNotInstalled, got %v", err)
		}
		if err := c.Push(ctx, testMap(t, 1, 64), 0); !errors.Is(err, catalog.ErrNotInstalled) {
			t.Errorf("Push: want ErrNotInstalled, got %v", err)
		}
		if _, err := c.Acquire(ctx, "p", "proxy", 1, time.Minute); !errors.Is(err, catalog.ErrNotInstalled) {
			t.Errorf("Acquire: want ErrNotInstalled, got %v", err)
		}
		if _, err := c.Live(ctx); !errors.Is(err, catalog.ErrNotInstalled) {
			t.Errorf("Live: want ErrNotInstalled, got %v", err)
		}
	})
}

func TestInstallIsIdempotentAndConcurrent(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		dsn := catalogDSN(t, mode)
		// Three installers at once, each with its own pool: all succeed,
		// and each version is applied by exactly one of them.
		applied := make([][]string, 3)
		g, gctx := errgroup.WithContext(ctx)
		for i := range applied {
			g.Go(func() error {
				c, err := catalog.Open(gctx, dsn, catalog.Options{})
				if err != nil {
					return err
				}
				defer c.Close()
				applied[i], err = c.Install(gctx)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		var all []string
		for _, a := range applied {
			all = append(all, a...)
		}
		var want []string
		for _, v := range catalog.Versions() {
			want = append(want, v.ID())
		}
		slices.Sort(all)
		if !slices.Equal(all, want) {
			t.Errorf("versions applied by the concurrent installers: %v, want each of %v once", all, want)
		}
		c := open(t, dsn)
		if again, err := c.Install(ctx); err != nil || len(again) != 0 {
			t.Errorf("a second install: applied %v, err %v; want nothing", again, err)
		}
		if _, err := c.Load(ctx); !errors.Is(err, catalog.ErrEmpty) {
			t.Errorf("Load of a new catalog: want ErrEmpty, got %v", err)
		}
		if e, err := c.Epoch(ctx); err != nil || e != 0 {
			t.Errorf("Epoch of a new catalog: %d, %v", e, err)
		}
	})
}

func TestInstallRefusesAnUnknownVersion(t *testing.T) {
	ctx := testCtx(t)
	c, dsn := installed(t, "direct")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO pgshard_catalog.schema_versions (version, name, checksum) VALUES (99, 'from_the_future', 'x')`); err != nil {
		t.Fatal(err)
	}
	var ue *catalog.UnknownVersionsError
	if _, err := c.Install(ctx); !errors.As(err, &ue) || !strings.Contains(err.Error(), "0099_from_the_future") {
		t.Errorf("want an UnknownVersionsError naming 0099_from_the_future, got %v", err)
	}
}

func TestPushLoadRoundTrip(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		c, _ := installed(t, mode)
		// Shards listed out of ordinal order, one without a pooler DSN:
		// Load must give back the same document.
		m := &shardmap.Map{Epoch: 3, Buckets: 64,
			Shards: []shardmap.Shard{
				{Name: "b", Ordinal: 5, DSN: "postgres://b/x", PoolerDSN: "postgres://b:6432/x"},
				{Name: "a", Ordinal: 2, DSN: "host=a dbname=x"},
			},
			Ranges: []shardmap.Range{{Lo: 0, Hi: 9, Shard: "a"}, {Lo: 10, Hi: 40, Shard: "b"}, {Lo: 41, Hi: 63, Shard: "a"}},
		}
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, m, 0); err != nil {
			t.Fatal(err)
		}
		got, err := c.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if mustMarshal(t, got) != mustMarshal(t, m) {
			t.Errorf("round trip differs:\n--- loaded\n%s\n--- pushed\n%s", mustMarshal(t, got), mustMarshal(t, m))
		}
		if s, err := got.ShardByOrdinal(5); err != nil || s.Name != "b" {
			t.Errorf("the loaded map is not validated/usable: %v, %v", s, err)
		}
		g, err := c.LoadGeneration(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Ranges) != 3 || g.PushedBy != "catalog test" || g.PushedAt.IsZero() {
			t.Errorf("generation: %+v", g)
		}
		for _, r := range g.Ranges {
			if r.State != catalog.Owned {
				t.Errorf("range %v: state %q, want owned", r.Range, r.State)
			}
		}

		// The next epoch replaces it; the epoch reads back.
		next, err := shardmap.PlanAdd(got, shardmap.Shard{Name: "c", Ordinal: 7, DSN: "postgres://c/x"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Push(ctx, next, 3); err != nil {
			t.Fatal(err)
		}
		if e, err := c.Epoch(ctx); err != nil || e != next.Epoch {
			t.Errorf("epoch after the second push: %d, %v; want %d", e, err, next.Epoch)
		}
		got, err = c.Load(ctx)
		if err != nil || mustMarshal(t, got) != mustMarshal(t, next) {
			t.Errorf("second round trip: %v\n%s", err, mustMarshal(t, got))
		}
	})
}

func TestGenerationsAreNeverUpdated(t *testing.T) {
	ctx := testCtx(t)
	c, dsn := installed(t, "direct")
	if err := c.Push(ctx, testMap(t, 1, 64), 0); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{
		`UPDATE pgshard_catalog.ranges SET state = 'frozen'`,
		`UPDATE pgshard_catalog.shards SET dsn = 'elsewhere'`,
		`UPDATE pgshard_catalog.generations SET buckets = 128`,
	} {
		_, err := conn.Exec(ctx, sql)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || !strings.Contains(pe.Message, "never updated") {
			t.Errorf("%s: want the immutability trigger's error, got %v", sql, err)
		}
	}
}

func TestPushEpochMustGrow(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		c, _ := installed(t, mode)
		if err := c.Push(ctx, testMap(t, 5, 64), 0); err != nil {
			t.Fatal(err)
		}
		var ee *catalog.EpochError
		if err := c.Push(ctx, testMap(t, 5, 64), 5); !errors.As(err, &ee) || ee.Current != 5 || ee.Pushed != 5 {
			t.Errorf("the same epoch again: want EpochError{5, 5}, got %v", err)
		}
		if err := c.Push(ctx, testMap(t, 4, 64), 5); !errors.As(err, &ee) {
			t.Errorf("a smaller epoch: want an EpochError, got %v", err)
		}
		// A pusher that believes the catalog is still empty loses the CAS.
		var ce *catalog.ConflictError
		if err := c.Push(ctx, testMap(t, 9, 64), 0); !errors.As(err, &ce) || ce.Found != 5 || ce.Expected != 0 || ce.Pushed != 9 {
			t.Errorf("a stale bootstrap: want ConflictError{expected 0, found 5}, got %v", err)
		}
		// A map that changes B or an ordinal cannot follow; nothing is written.
		var se *catalog.SuccessorError
		if err := c.Push(ctx, testMap(t, 6, 128), 5); !errors.As(err, &se) {
			t.Errorf("a new bucket count: want a SuccessorError, got %v", err)
		}
		if err := c.Push(ctx, testMap(t, 6, 64, "s1", "s0"), 5); !errors.As(err, &se) {
			t.Errorf("changed ordinals: want a SuccessorError, got %v", err)
		}
		// A malformed map is refused before anything is sent.
		bad := testMap(t, 6, 64)
		bad.Ranges = bad.Ranges[1:]
		var ve *shardmap.ValidationError
		if err := c.Push(ctx, bad, 5); !errors.As(err, &ve) {
			t.Errorf("a map with a gap: want a ValidationError, got %v", err)
		}
		if e, err := c.Epoch(ctx); err != nil || e != 5 {
			t.Errorf("after the refused pushes the catalog is at %d (%v), want 5", e, err)
		}
		if err := c.Push(ctx, testMap(t, 6, 64), 5); err != nil {
			t.Errorf("a good successor after the refusals: %v", err)
		}
	})
}

func TestPushConflictExactlyOneWins(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		c, dsn := installed(t, mode)
		if err := c.Push(ctx, testMap(t, 1, 64), 0); err != nil {
			t.Fatal(err)
		}
		// Each round: two pushers with their own pools expect the current
		// epoch and push different successors at once.
		cur := uint64(1)
		for round := range 5 {
			pushers := []*catalog.Catalog{open(t, dsn), open(t, dsn)}
			maps := []*shardmap.Map{testMap(t, cur+1, 64), testMap(t, cur+2, 64, "s0", "s1", "s2")}
			errs := make([]error, 2)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range pushers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = pushers[i].Push(ctx, maps[i], cur)
				}()
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				if err == nil {
					if winner >= 0 {
						t.Fatalf("round %d: both pushers won", round)
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: nobody won: %v", round, errs)
			}
			var ce *catalog.ConflictError
			loser := 1 - winner
			if !errors.As(errs[loser], &ce) || ce.Expected != cur || ce.Found != maps[winner].Epoch || ce.Pushed != maps[loser].Epoch {
				t.Fatalf("round %d: the loser must get ConflictError{expected %d, found %d, pushed %d}, got %v",
					round, cur, maps[winner].Epoch, maps[loser].Epoch, errs[loser])
			}
			got, err := c.Load(ctx)
			if err != nil || mustMarshal(t, got) != mustMarshal(t, maps[winner]) {
				t.Fatalf("round %d: the catalog must hold the winner's map: %v\n%s", round, err, mustMarshal(t, got))
			}
			cur = maps[winner].Epoch
		}
	})
}

func TestLeases(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		c, _ := installed(t, mode)

		// A long TTL: nothing below may see it lapse.
		l, err := c.Acquire(ctx, "proxy-1", "proxy", 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token == 0 || l.ExpiresAt.IsZero() || !l.Valid(time.Now()) {
			t.Errorf("acquired lease: %+v", l)
		}
		var he *catalog.LeaseHeldError
		if _, err := c.Acquire(ctx, "proxy-1", "proxy", 1, time.Hour); !errors.As(err, &he) || he.Token != l.Token || he.Remaining <= 0 {
			t.Errorf("acquiring a live lease again: want LeaseHeldError with token %d, got %v", l.Token, err)
		}
		r, err := c.Renew(ctx, l, 2)
		if err != nil {
			t.Fatal(err)
		}
		if r.Epoch != 2 || r.Token != l.Token || r.ExpiresAt.Before(l.ExpiresAt) {
			t.Errorf("renewed lease: %+v (was %+v)", r, l)
		}
		live, err := c.Live(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(live) != 1 || live[0].Owner != "proxy-1" || live[0].Kind != "proxy" || live[0].Epoch != 2 ||
			live[0].Remaining <= 0 || live[0].Remaining > time.Hour {
			t.Errorf("live leases: %+v", live)
		}

		// A short TTL, then wait (bounded) until the server says it lapsed.
		s, err := c.Acquire(ctx, "router-1", "router", 2, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		waitLapsed(t, c, "router-1")
		var le *catalog.LeaseLostError
		if _, err := c.Renew(ctx, s, 2); !errors.As(err, &le) || !strings.Contains(err.Error(), "expired") {
			t.Errorf("renewing a lapsed lease: want LeaseLostError (expired), got %v", err)
		}
		// Re-acquired after it lapsed: a new, greater token; the old
		// holder can neither renew nor release it.
		s2, err := c.Acquire(ctx, "router-1", "router", 3, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if s2.Token <= s.Token {
			t.Errorf("the token did not grow: %d after %d", s2.Token, s.Token)
		}
		if _, err := c.Renew(ctx, s, 3); !errors.As(err, &le) || !strings.Contains(err.Error(), "acquired again") {
			t.Errorf("renewing with the old token: want LeaseLostError (acquired again), got %v", err)
		}
		if err := c.Release(ctx, s); !errors.Is(err, catalog.ErrLeaseLost) {
			t.Errorf("releasing with the old token: want ErrLeaseLost, got %v", err)
		}

		if err := c.Release(ctx, s2); err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, s2); !errors.As(err, &le) || !strings.Contains(err.Error(), "released") {
			t.Errorf("releasing twice: want LeaseLostError (released), got %v", err)
		}
		live, err = c.Live(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(live) != 1 || live[0].Owner != "proxy-1" {
			t.Errorf("live leases after the release: %+v", live)
		}
		if _, err := c.Acquire(ctx, "", "proxy", 1, time.Minute); err == nil {
			t.Error("an empty owner was accepted")
		}
		if _, err := c.Acquire(ctx, "x", "proxy", 1, 0); err == nil {
			t.Error("a zero TTL was accepted")
		}
	})
}

// waitLapsed polls (bounded) until the catalog no longer lists owner as
// live: the server's now() decides, never the test's clock.
func waitLapsed(t *testing.T, c *catalog.Catalog, owner string) {
	t.Helper()
	ctx := testCtx(t)
	for range 600 {
		live, err := c.Live(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(live, func(l catalog.LeaseInfo) bool { return l.Owner == owner }) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("lease %q still live after 600 polls", owner)
}

func TestWatchSeesNewEpochs(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		c, dsn := installed(t, mode)
		if err := c.Push(ctx, testMap(t, 1, 64), 0); err != nil {
			t.Fatal(err)
		}
		follower := open(t, dsn)
		wctx, stop := context.WithCancel(ctx)
		seen := make(chan *shardmap.Map, 16)
		done := make(chan error, 1)
		go func() {
			done <- follower.Watch(wctx, 1, catalog.WatchOptions{Interval: 20 * time.Millisecond}, func(m *shardmap.Map) error {
				seen <- m
				return nil
			})
		}()
		defer func() {
			stop()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Watch ended with %v, want context.Canceled", err)
			}
		}()
		expect := func(want *shardmap.Map) {
			t.Helper()
			select {
			case m := <-seen:
				if m.Epoch != want.Epoch || mustMarshal(t, m) != mustMarshal(t, want) {
					t.Fatalf("Watch delivered epoch %d, want %d", m.Epoch, want.Epoch)
				}
			case err := <-done:
				t.Fatalf("Watch ended early: %v", err)
			case <-ctx.Done():
				t.Fatalf("Watch did not deliver epoch %d", want.Epoch)
			}
		}
		m2 := testMap(t, 2, 64, "s0", "s1", "s2")
		if err := c.Push(ctx, m2, 1); err != nil {
			t.Fatal(err)
		}
		expect(m2)
		m7 := testMap(t, 7, 64)
		if err := c.Push(ctx, m7, 2); err != nil {
			t.Fatal(err)
		}
		expect(m7)
		select {
		case m := <-seen:
			t.Errorf("Watch delivered epoch %d again", m.Epoch)
		default:
		}
	})
}

// TestWatchWakes: a Watch whose interval is an hour sees a new epoch only
// when woken (WatchOptions.Wake, as Follower.Nudge does): the first poll
// is immediate, then nothing until the wake; a wake sent while nothing
// changed delivers nothing.
func TestWatchWakes(t *testing.T) {
	ctx := testCtx(t)
	c, dsn := installed(t, "pgbouncer")
	if err := c.Push(ctx, testMap(t, 1, 64), 0); err != nil {
		t.Fatal(err)
	}
	follower := open(t, dsn)
	wctx, stop := context.WithCancel(ctx)
	seen := make(chan uint64, 16)
	wake := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- follower.Watch(wctx, 0, catalog.WatchOptions{Interval: time.Hour, Wake: wake}, func(m *shardmap.Map) error {
			seen <- m.Epoch
			return nil
		})
	}()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch ended with %v, want context.Canceled", err)
		}
	}()
	next := func(what string) uint64 {
		t.Helper()
		select {
		case e := <-seen:
			return e
		case err := <-done:
			t.Fatalf("%s: Watch ended early: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("%s: nothing delivered", what)
		}
		return 0
	}
	if e := next("first poll"); e != 1 {
		t.Fatalf("first poll delivered epoch %d, want 1", e)
	}
	for epoch := uint64(2); epoch <= 4; epoch++ {
		if err := c.Push(ctx, testMap(t, epoch, 64), epoch-1); err != nil {
			t.Fatal(err)
		}
		wake <- struct{}{}
		if e := next(fmt.Sprintf("wake for epoch %d", epoch)); e != epoch {
			t.Fatalf("woken, Watch delivered epoch %d, want %d", e, epoch)
		}
	}
	// A wake with nothing new delivers nothing: the next delivery is
	// epoch 5's, not epoch 4 again.
	wake <- struct{}{}
	if err := c.Push(ctx, testMap(t, 5, 64), 4); err != nil {
		t.Fatal(err)
	}
	wake <- struct{}{}
	if e := next("wake for epoch 5"); e != 5 {
		t.Fatalf("woken, Watch delivered epoch %d, want 5", e)
	}
}

func TestWatchReportsErrorsAndStopsOnCallbackError(t *testing.T) {
	ctx := testCtx(t)
	// Not installed: every poll fails and goes to OnError; Watch goes on
	// until its context ends.
	c := open(t, catalogDSN(t, "pgbouncer"))
	wctx, cancel := context.WithCancel(ctx)
	var errs []error
	err := c.Watch(wctx, 0, catalog.WatchOptions{Interval: 10 * time.Millisecond, OnError: func(err error) {
		errs = append(errs, err)
		if len(errs) == 3 {
			cancel()
		}
	}}, func(*shardmap.Map) error { return nil })
	if !errors.Is(err, context.Canceled) || len(errs) != 3 || !errors.Is(errs[0], catalog.ErrNotInstalled) {
		t.Errorf("Watch on an uninstalled catalog: %v after %d errors (%v)", err, len(errs), errs)
	}

	// fn's error ends Watch and is returned.
	ic, _ := installed(t, "direct")
	if err := ic.Push(ctx, testMap(t, 1, 64), 0); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = ic.Watch(ctx, 0, catalog.WatchOptions{Interval: 10 * time.Millisecond}, func(m *shardmap.Map) error {
		if !reflect.DeepEqual(m.BucketCounts(), map[string]int{"s0": 32, "s1": 32}) {
			t.Errorf("delivered map: %+v", m)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("Watch returned %v, want fn's error", err)
	}
}
