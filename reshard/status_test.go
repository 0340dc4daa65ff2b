package reshard_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/reshard"
)

// TestWriteStatusFreezes: status shows per move the freezes tried, the
// longest recorded and the abandoned ones; "-" for a row journaled before
// freezes were recorded, "?" (and a note) for a detail it cannot read.
func TestWriteStatusFreezes(t *testing.T) {
	at := time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)
	rec := func(ms int, outcome, why string) catalog.FreezeRecord {
		return catalog.NewFreezeRecord(at, time.Duration(ms)*time.Millisecond, outcome, why, "")
	}
	detail, err := json.Marshal(map[string]any{"copy_rows": 40, "freezes": []catalog.FreezeRecord{
		rec(304, catalog.FreezeAbandoned, catalog.WhyDeadline), rec(12, catalog.FreezeAbandoned, catalog.WhyCatchUp), rec(65, catalog.FreezeFlipped, "")}})
	if err != nil {
		t.Fatal(err)
	}
	moves := reshard.Statuses([]catalog.MoveRecord{
		{ID: 1, Lo: 0, Hi: 15, From: "shard0", To: "shard1", Phase: catalog.PhaseDone, Attempts: 3, Detail: detail, UpdatedAt: at},
		{ID: 2, Lo: 16, Hi: 31, From: "shard0", To: "shard1", Phase: catalog.PhaseDone, Attempts: 1, Detail: json.RawMessage(`{"copy_rows": 7}`), UpdatedAt: at},
		{ID: 3, Lo: 32, Hi: 47, From: "shard0", To: "shard1", Phase: catalog.PhaseDone, Attempts: 1, Detail: json.RawMessage(`{"freezes": 1}`), UpdatedAt: at},
	})
	var b strings.Builder
	if err := reshard.WriteStatus(&b, moves); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	fields := func(i int) []string { return strings.Fields(lines[i]) }
	if h := fields(0); len(h) < 8 || h[5] != "FREEZES" || h[6] != "LONGEST" || h[7] != "ABANDONED" {
		t.Fatalf("header %q", lines[0])
	}
	for i, want := range [][3]string{{"3", "304.0", "2"}, {"1", "-", "-"}, {"1", "?", "?"}} {
		if f := fields(i + 1); len(f) < 8 || f[5] != want[0] || f[6] != want[1] || f[7] != want[2] {
			t.Errorf("move %d: %q, want freezes %s, longest %s, abandoned %s", i+1, lines[i+1], want[0], want[1], want[2])
		}
	}
	if !strings.Contains(b.String(), "move 3: freezes unreadable") {
		t.Errorf("no note for the unreadable detail:\n%s", b.String())
	}
}
