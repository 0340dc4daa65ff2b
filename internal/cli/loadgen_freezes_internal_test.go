package cli

import (
	"testing"
	"time"

	"github.com/pgshard/pgshard/internal/config"
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
		{ID: 3, Lo: 128, Hi: 191, From: "shard0", To: "shard2"},                   // not flipped
		{ID: 4, Lo: 192, Hi: 255, From: "shard1", To: "shard2", FlippedAt: at(-3)}, // before the run
		{ID: 5, Lo: 256, Hi: 300, From: "shard1", To: "shard2", FlippedAt: at(46)}, // after it
	}
	got := runFreezes(ms, start, end)
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
	if runFreezes(nil, start, end) != nil {
		t.Error("no moves: want no freezes")
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
