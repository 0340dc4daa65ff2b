package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/shardmap"
)

// TestRunFreezes turns journal rows into the run's freezes: the freezes a
// move's detail records, exactly (abandoned ones with why); a flipped
// move without a flipped freeze recorded (an old row, or a mover that died
// before recording it), its flip (AtFlip); nothing for a move not
// flipped, or outside the run.
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
			Detail: `{"copy_rows": 10, "freezes": [{"started_at": "` + at(20).Format(time.RFC3339Nano) + `", "ms": 140, "outcome": "abandoned", "why": "deadline"},
			                                         {"started_at": "` + at(29.9).Format(time.RFC3339Nano) + `", "ms": 61.5, "outcome": "flipped"}]}`},
		{ID: 3, Lo: 128, Hi: 191, From: "shard0", To: "shard2"},                    // not flipped
		{ID: 4, Lo: 192, Hi: 255, From: "shard1", To: "shard2", FlippedAt: at(-3)}, // before the run
		{ID: 5, Lo: 256, Hi: 300, From: "shard1", To: "shard2", FlippedAt: at(46)}, // after it
		// Flipped, but only an abandoned freeze recorded: that and the flip.
		{ID: 6, Lo: 301, Hi: 310, From: "shard1", To: "shard2", FlippedAt: at(40),
			Detail: `{"freezes": [{"started_at": "` + at(35).Format(time.RFC3339Nano) + `", "ms": 3, "outcome": "abandoned", "why": "catch_up"}]}`},
		// A detail that cannot be read: the flip.
		{ID: 7, Lo: 311, Hi: 320, From: "shard1", To: "shard2", FlippedAt: at(41), Detail: `{"freezes": 3}`},
	}
	got := runFreezes(ms, start, start, end)
	if len(got) != 6 {
		t.Fatalf("freezes %+v, want 6", got)
	}
	want := []struct {
		move   int64
		startS float64
		ms     float64
		atFlip bool
		why    string
	}{{1, 12, 0, true, ""}, {2, 20, 140, false, "deadline"}, {2, 29.9, 61.5, false, ""}, {6, 35, 3, false, "catch_up"}, {6, 40, 0, true, ""}, {7, 41, 0, true, ""}}
	for i, w := range want {
		g := got[i]
		if g.Move != w.move || g.StartS < w.startS-1e-6 || g.StartS > w.startS+1e-6 || g.DurationMS != w.ms || g.AtFlip != w.atFlip || g.Abandoned != (w.why != "") || g.Why != w.why {
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
	if got := runFreezes(ms, start.Add(-5*time.Second), start, end); len(got) != 7 || got[0].Move != 4 || got[0].StartS != -3 {
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
	// The freezes the mover records (one that failed, then the flipped
	// one with the clean-up's step) replace the flip's mark, appended in
	// order to what the detail holds.
	t0 := time.Now().Add(-time.Minute)
	failed := catalog.NewFreezeRecord(t0, 12*time.Millisecond, catalog.FreezeAbandoned, catalog.WhyError, "shard down")
	flipped := catalog.NewFreezeRecord(t0.Add(time.Second), 34*time.Millisecond, catalog.FreezeFlipped, "", "")
	if err := cat.RecordFreezes(ctx, ms[0].ID, []catalog.FreezeRecord{failed}); err != nil {
		t.Fatal(err)
	}
	if err := cat.UpdateMove(ctx, ms[0].ID, []string{catalog.PhaseFlipped}, catalog.MoveUpdate{Phase: catalog.PhaseCleaning,
		Detail: []byte(`{"note": 1}`), Freezes: []catalog.FreezeRecord{flipped}}); err != nil {
		t.Fatal(err)
	}
	if fz, err = readRunFreezes(ctx, dsn, before, before, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if len(fz) != 2 || fz[0].AtFlip || !fz[0].Abandoned || fz[0].Why != catalog.WhyError || fz[0].DurationMS != 12 ||
		!fz[0].Started.Equal(failed.StartedAt) || fz[1].AtFlip || fz[1].Abandoned || fz[1].DurationMS != 34 {
		t.Fatalf("freezes %+v, want the two recorded (12 ms abandoned, 34 ms flipped)", fz)
	}
	all, err := cat.Moves(ctx, false)
	if err != nil || len(all) != 1 || !strings.Contains(string(all[0].Detail), `"note": 1`) {
		t.Errorf("the journal step's detail merged beside the freezes: %+v, %v", all, err)
	}
	if fz, err := readRunFreezes(ctx, dsn, before, before, before.Add(time.Minute)); err != nil || len(fz) != 0 {
		t.Errorf("a window before the move: %+v, %v", fz, err)
	}
}
