package cli

import (
	"context"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/shardmap"
)

// TestRunFreezes turns journal rows into the run's freezes: the freezes a
// move's detail records, exactly; a flipped move without them, its flip
// (AtFlip); nothing for a move not flipped, or outside the run.
func TestRunFreezes(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	end := start.Add(45 * time.Second)
	at := func(s float64) *time.Time {
		x := start.Add(time.Duration(s * float64(time.Second)))
		return &x
	}
	ms := []journalMove{
		{ID: 1, Lo: 0, Hi: 63, From: "shard0", To: "shard2", FlippedAt: at(12)},
		{ID: 2, Lo: 64, Hi: 127, From: "shard1", To: "shard2", FlippedAt: at(30),
			Detail: `{"copy_rows": 10, "freezes": [{"started_at": "` + at(20).Format(time.RFC3339Nano) + `", "ms": 140, "abandoned": true},
			                                         {"started_at": "` + at(29.9).Format(time.RFC3339Nano) + `", "ms": 61.5}]}`},
		{ID: 3, Lo: 128, Hi: 191, From: "shard0", To: "shard2"},                    // not flipped
		{ID: 4, Lo: 192, Hi: 255, From: "shard1", To: "shard2", FlippedAt: at(-3)}, // before the run
		{ID: 5, Lo: 256, Hi: 300, From: "shard1", To: "shard2", FlippedAt: at(46)}, // after it
	}
	got := runFreezes(ms, start, start, end)
	if len(got) != 3 {
		t.Fatalf("freezes %+v, want 3", got)
	}
	want := []struct {
		move      int64
		startS    float64
		ms        float64
		atFlip    bool
		abandoned bool
	}{{1, 12, 0, true, false}, {2, 20, 140, false, true}, {2, 29.9, 61.5, false, false}}
	for i, w := range want {
		g := got[i]
		if g.Move != w.move || g.StartS < w.startS-1e-6 || g.StartS > w.startS+1e-6 || g.DurationMS != w.ms || g.AtFlip != w.atFlip || g.Abandoned != w.abandoned {
			t.Errorf("freeze %d: %+v, want %+v", i, g, w)
		}
	}
	if got[0].Lo != 0 || got[0].Hi != 63 || got[0].From != "shard0" || got[0].To != "shard2" || got[0].Label() != "0-63 shard0→shard2 flip" {
		t.Errorf("freeze 0: %+v (%s)", got[0], got[0].Label())
	}
	if runFreezes(nil, start, start, end) != nil {
		t.Error("no moves: want no freezes")
	}
	// With the setup in the window: move 4, 3 s before the start.
	if got := runFreezes(ms, start.Add(-5*time.Second), start, end); len(got) != 4 || got[0].Move != 4 || got[0].StartS != -3 {
		t.Errorf("with 5 s of setup: %+v, want move 4 first at -3 s", got)
	}
}

// TestFreezeCatalog: the journal is read from catalog.dsn, else from the
// proxy's own catalog; none when the config names no catalog.
func TestFreezeCatalog(t *testing.T) {
	for _, c := range []struct {
		cfg  config.Config
		want string
	}{
		{config.Config{}, ""},
		{config.Config{Catalog: config.Catalog{DSN: "postgres://c/cat"}}, "postgres://c/cat"},
		{config.Config{Proxy: config.Proxy{Catalog: "off"}}, ""},
		{config.Config{Proxy: config.Proxy{Catalog: "postgres://p/cat"}}, "postgres://p/cat"},
	} {
		if got := freezeCatalog(&c.cfg); got != c.want {
			t.Errorf("%+v: %q, want %q", c.cfg, got, c.want)
		}
	}
}

// TestReadRunFreezesFromACatalog reads a real catalog's journal (through
// PgBouncer, as catalog.dsn may): a flipped move is one freeze at its
// flip, with its range and shards; a window before it has none.
func TestReadRunFreezesFromACatalog(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster")
	}
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	m, err := c.MapFor(db, 64)
	if err != nil {
		t.Fatal(err)
	}
	dsn := m.Shards[0].PoolerDSN
	if dsn == "" {
		t.Fatal("the shared test cluster has no PgBouncer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cat, err := catalog.Open(ctx, dsn, catalog.Options{ApplicationName: "pgshard test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if _, err := cat.Install(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cat.Push(ctx, m, 0); err != nil {
		t.Fatal(err)
	}
	from, to := m.Shards[0].Name, m.Shards[1].Name
	r := m.RangesOf(from)[0]
	before := time.Now().Add(-time.Hour)
	// Before the move: nothing (and no error on an empty journal).
	if fz, err := readRunFreezes(ctx, dsn, before, before, time.Now().Add(time.Hour)); err != nil || len(fz) != 0 {
		t.Fatalf("empty journal: %+v, %v", fz, err)
	}
	ms, err := cat.PlanMoves(ctx, m.Epoch, []shardmap.Move{{Lo: r.Lo, Hi: r.Hi, From: from, To: to}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.UpdateMove(ctx, ms[0].ID, nil, catalog.MoveUpdate{Phase: catalog.PhaseFrozen, AddAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.FlipMove(ctx, ms[0].ID); err != nil {
		t.Fatal(err)
	}
	fz, err := readRunFreezes(ctx, dsn, before, before, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(fz) != 1 || fz[0].Move != ms[0].ID || fz[0].Lo != r.Lo || fz[0].Hi != r.Hi || fz[0].From != from || fz[0].To != to || !fz[0].AtFlip {
		t.Fatalf("freezes %+v, want move %d's flip (%d-%d %s→%s)", fz, ms[0].ID, r.Lo, r.Hi, from, to)
	}
	if fz, err := readRunFreezes(ctx, dsn, before, before, before.Add(time.Minute)); err != nil || len(fz) != 0 {
		t.Errorf("a window before the move: %+v, %v", fz, err)
	}
}
