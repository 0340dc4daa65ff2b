package catalog_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestFreezeRecordsGolden: the freezes a move's detail records, as the
// journal stores them (testdata/freezes.golden.json), and back: UTC starts
// to the microsecond, holds in ms to the microsecond, the outcome and,
// for an abandoned one, why.
func TestFreezeRecordsGolden(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 1, 123456789, time.FixedZone("CET", 3600))
	fs := []catalog.FreezeRecord{
		catalog.NewFreezeRecord(start, 304612345*time.Nanosecond, catalog.FreezeAbandoned, catalog.WhyDeadline, "writers in flight did not finish within the budget"),
		catalog.NewFreezeRecord(start.Add(time.Second), 140*time.Millisecond, catalog.FreezeAbandoned, catalog.WhyCatchUp, "freeze abandoned: changes kept coming during the freeze"),
		catalog.NewFreezeRecord(start.Add(2*time.Second), time.Second, catalog.FreezeAbandoned, catalog.WhyError, "shard shard0: connection refused"),
		catalog.NewFreezeRecord(start.Add(3*time.Second), 65191*time.Microsecond, catalog.FreezeFlipped, "", ""),
		catalog.NewFreezeRecord(start.Add(4*time.Second), -time.Millisecond, catalog.FreezeFlipped, "", ""),
	}
	got, err := json.MarshalIndent(map[string]any{"copy_rows": 40, "freezes": fs}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	p := filepath.Join("testdata", "freezes.golden.json")
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update if intended):\n--- got\n%s\n--- want\n%s", p, got, want)
	}
	back, err := catalog.DecodeFreezes(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(fs) {
		t.Fatalf("decoded %d freezes, want %d", len(back), len(fs))
	}
	for i := range fs {
		if !back[i].StartedAt.Equal(fs[i].StartedAt) || back[i].MS != fs[i].MS || back[i].Outcome != fs[i].Outcome || back[i].Why != fs[i].Why || back[i].Error != fs[i].Error {
			t.Errorf("freeze %d: decoded %+v, want %+v", i, back[i], fs[i])
		}
	}
	if f := back[0]; f.StartedAt.Location() != time.UTC || f.StartedAt.Nanosecond() != 123456000 || f.MS != 304.612 || !f.Abandoned() || f.Duration() != 304612*time.Microsecond {
		t.Errorf("freeze 0: %+v (%v), want UTC to the µs, 304.612 ms, abandoned", f, f.Duration())
	}
	if back[3].Abandoned() || back[4].MS != 0 {
		t.Errorf("freezes 3, 4: %+v %+v, want flipped, a negative hold as 0", back[3], back[4])
	}
	sum := catalog.SummarizeFreezes(back)
	if sum.Recorded != 5 || sum.Abandoned != 3 || sum.Longest != time.Second {
		t.Errorf("summary %+v, want 5 recorded, 3 abandoned, longest 1s", sum)
	}
}

// TestDecodeFreezesOfOldRows: a detail journaled before freezes were
// recorded (or of a move that never froze) has none, without an error;
// only a "freezes" that is not a list of freezes is one.
func TestDecodeFreezesOfOldRows(t *testing.T) {
	for _, d := range []string{``, `{}`, `{"copy_rows": 10, "copy_ms": 3}`, `{"freezes": null}`, `{"freezes": []}`} {
		fs, err := catalog.MoveRecord{Detail: json.RawMessage(d)}.Freezes()
		if err != nil || len(fs) != 0 {
			t.Errorf("detail %q: %+v, %v; want none", d, fs, err)
		}
	}
	for _, d := range []string{`{"freezes": 3}`, `{"freezes": [{"ms": "long"}]}`, `[1]`} {
		if fs, err := catalog.DecodeFreezes([]byte(d)); err == nil {
			t.Errorf("detail %q: %+v, want an error", d, fs)
		}
	}
}
