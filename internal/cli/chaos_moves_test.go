package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChaosMoves runs a short scenario that moves bucket ranges while the
// workload runs through PgBouncer on a router following the run's
// catalog, kills the mover at some of its steps (then resumes or aborts),
// and verifies the run: every invariant holds across the moves, with rows
// placed by the map the moves left.
func TestChaosMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster")
	}
	r := newChaosRig(t)
	out := filepath.Join(r.dir, "moves")
	sc := r.scenario(t, "moves", "pgbouncer", "8s", `
  - {kind: move, every: 400ms, params: {freeze_budget: 100ms}}
  - {kind: mover-kill, every: 2s}
  - {kind: reset, every: 3s}`)
	// Moves are slow on a loaded machine (a freeze abandoned and tried
	// again, a kill resumed): give the goals twice the usual bound.
	if b, err := os.ReadFile(sc); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(sc, []byte(strings.Replace(string(b), "max_duration: 2m", "max_duration: 4m", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Landed twice each (and the margin) is the goal: few moves.
	res := runWithin(t, 8*time.Minute, "", r.args("chaos", "run", "--scenario", sc, "--out", out)...)
	b, err := os.ReadFile(filepath.Join(out, "faults.json"))
	if res.code != 0 || !strings.Contains(res.stdout, "verdict: PASS") {
		logFaultErrors(t, b)
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var fr struct {
		Events []struct {
			Kind     string
			Phase    string
			Landed   bool
			Evidence map[string]any
		}
	}
	if err := json.Unmarshal(b, &fr); err != nil {
		t.Fatal(err)
	}
	moved, killed := 0, 0
	for _, e := range fr.Events {
		switch {
		case e.Kind == "move" && e.Phase == "inject" && e.Landed:
			moved++
		case e.Kind == "mover-kill" && e.Phase == "heal" && e.Landed:
			killed++
		}
	}
	if moved < 2 || killed < 2 {
		logFaultErrors(t, b)
		t.Errorf("%d moves done, %d mover kills resolved: want at least 2 each", moved, killed)
	}
	v := readVerdict(t, out)
	if v["result"] != "PASS" {
		t.Errorf("verdict %v", v["result"])
	}
	// The verdict's timeline has each move's freezes with their starts
	// (the evidence's freeze_t, paired with freeze_ms), drawn as bands.
	var vt struct {
		Timeline struct {
			Faults []struct {
				ID   string
				Move *struct {
					FreezeMS []float64 `json:"freeze_ms"`
					FreezeT  []int64   `json:"freeze_t"`
				}
			}
		}
	}
	vb, err := os.ReadFile(filepath.Join(out, "verdict.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(vb, &vt); err != nil {
		t.Fatal(err)
	}
	timed := 0
	for _, w := range vt.Timeline.Faults {
		if w.Move == nil || len(w.Move.FreezeMS) == 0 {
			continue
		}
		if len(w.Move.FreezeT) != len(w.Move.FreezeMS) {
			t.Errorf("fault %s: freezes %v ms with starts %v: want a start for each", w.ID, w.Move.FreezeMS, w.Move.FreezeT)
			continue
		}
		timed++
	}
	if timed == 0 {
		t.Errorf("no move window of the verdict's timeline has its freezes (want the %d moves done)", moved)
	}
}

// logFaultErrors logs the distinct errors of a faults.json's events.
func logFaultErrors(t *testing.T, faults []byte) {
	t.Helper()
	var fr struct {
		Events []struct{ ID, Kind, Phase, Err string }
	}
	_ = json.Unmarshal(faults, &fr)
	seen := map[string]bool{}
	for _, e := range fr.Events {
		if e.Err != "" && !seen[e.Kind+e.Err] {
			seen[e.Kind+e.Err] = true
			t.Logf("%s %s %s: %s", e.ID, e.Kind, e.Phase, e.Err)
		}
	}
}
