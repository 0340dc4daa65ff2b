//go:build replay

// A debugging aid, not part of the suite: built only with the replay tag,
// so `go test ./...` neither runs nor skips it. Run it on a recorded run:
//
//	PGSHARD_CORR_REPLAY=out/history.jsonl go test -tags replay -run TestCorroborationReplay -v ./chaos/
package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// TestCorroborationReplay replays a recorded history (its lines in the
// order written, which is the order the writer saw them) through the
// online matcher and logs what the writer credits, by kind: set
// PGSHARD_CORR_REPLAY to a history.jsonl. The schedule's offset is read
// from the earliest injection against its planned time.
func TestCorroborationReplay(t *testing.T) {
	path := os.Getenv("PGSHARD_CORR_REPLAY")
	if path == "" {
		t.Fatal("set PGSHARD_CORR_REPLAY to a history.jsonl to replay")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type line struct {
		Type     string          `json:"type"`
		Schedule []HeaderPlanned `json:"schedule"`
		ID       string          `json:"id"`
		Kind     string          `json:"kind"`
		Phase    string          `json:"phase"`
		T        int64           `json:"t"`
		Shard    string          `json:"shard"`
		Landed   bool            `json:"landed"`
		Evidence map[string]any  `json:"evidence"`
		T0       int64           `json:"t0"`
		T1       int64           `json:"t1"`
		Outcome  string          `json:"outcome"`
		Conflict bool            `json:"conflict"`
		Err      string          `json:"err"`
	}
	var lines []line
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 || lines[0].Type != "header" {
		t.Fatal("no header")
	}
	m := newCorrMatcher(lines[0].Schedule)
	at := map[string]int64{}
	for _, s := range lines[0].Schedule {
		at[s.ID] = s.AtMs * int64(time.Millisecond)
	}
	offset := int64(1 << 62)
	for _, l := range lines {
		if l.Type == "fault" && l.Phase == "inject" {
			offset = min(offset, l.T-at[l.ID])
		}
	}
	m.start(offset)
	full, maxT := int64(-1), int64(0)
	for _, l := range lines[1:] {
		maxT = max(maxT, l.T1, l.T)
		if full < 0 && len(m.pending) >= maxCorrPending {
			full = maxT
		}
		switch l.Type {
		case "op":
			m.observe(corrOp{shard: l.Shard, bucket: -1, t0: l.T0, t1: l.T1, bad: l.Outcome == "info" || (l.Outcome == "fail" && !l.Conflict),
				ok: l.Outcome == "ok", info: l.Outcome == "info" && l.Kind == "commit"})
		case "fault":
			m.fault(Event{ID: l.ID, Kind: Kind(l.Kind), Phase: l.Phase, T: time.Duration(l.T), Done: time.Duration(l.T), Shard: l.Shard, Landed: l.Landed, Err: l.Err}, l.Evidence, l.T)
		}
	}
	out := map[Kind]int{}
	for id, k := range m.credited {
		if m.landed[id] {
			out[k]++
		}
	}
	t.Logf("writer-corroborated by kind: %v (%d ops still pending; the table first full at %v, the last line at %v)", out, len(m.pending), time.Duration(full), time.Duration(maxT))
}
