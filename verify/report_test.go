package verify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/verify"
)

func checkCase(t *testing.T, name string) *verify.Verdict {
	t.Helper()
	dir := filepath.Join(corpusDir, name)
	h, err := verify.OpenHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := verify.ReadStateFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	return verify.Check(context.Background(), h, st, verify.Options{})
}

// TestWriteReport writes the report of a failing case and checks that it
// is self-contained and links porcupine's visualization of the failing
// partition, and that verdict.json decodes to the same verdict.
func TestWriteReport(t *testing.T) {
	for _, name := range []string{"stale-read", "faults-landed", "mutant-outbox-outside-tx"} {
		t.Run(name, func(t *testing.T) {
			v := checkCase(t, name)
			dir := t.TempDir()
			if keep := os.Getenv("PGSHARD_VERIFY_REPORT_DIR"); keep != "" {
				dir = filepath.Join(keep, name)
			}
			if err := verify.WriteReport(dir, v); err != nil {
				t.Fatal(err)
			}
			page, err := os.ReadFile(filepath.Join(dir, verify.ReportFile))
			if err != nil {
				t.Fatal(err)
			}
			s := string(page)
			for _, bad := range []string{"<script", "src=", "https://", "<link"} {
				if strings.Contains(s, bad) {
					t.Errorf("report.html contains %q: it must be self-contained", bad)
				}
			}
			if !strings.Contains(s, "<svg") || !strings.Contains(s, string(v.Result)) {
				t.Errorf("report.html lacks the timeline or the result")
			}
			for _, x := range v.Violations {
				if !strings.Contains(s, htmlEscape(x.Summary)) {
					t.Errorf("report.html lacks violation %q", x.Summary)
				}
			}
			wantViz := name == "stale-read"
			if got := len(v.Visualizations) > 0; got != wantViz {
				t.Fatalf("visualizations %v, want some: %v", v.Visualizations, wantViz)
			}
			for _, f := range v.Visualizations {
				if !strings.Contains(s, `href="`+f+`"`) {
					t.Errorf("report.html does not link %s", f)
				}
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil || !bytes.Contains(b, []byte("<html")) {
					t.Errorf("visualization %s: %v", f, err)
				}
			}
			js, err := os.ReadFile(filepath.Join(dir, verify.VerdictFile))
			if err != nil {
				t.Fatal(err)
			}
			var back verify.Verdict
			if err := json.Unmarshal(js, &back); err != nil {
				t.Fatal(err)
			}
			if back.Result != v.Result || len(back.Violations) != len(v.Violations) || len(back.Invariants) != len(v.Invariants) {
				t.Errorf("verdict.json does not round-trip: %s vs %s", back.Result, v.Result)
			}
		})
	}
}

func htmlEscape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")
	return r.Replace(s)
}

// TestVerdictText pins the text form's shape: the table, the fault table
// and the cap on explained violations.
func TestVerdictText(t *testing.T) {
	v := checkCase(t, "exec-row-deleted")
	var b bytes.Buffer
	if err := v.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"verdict: FAIL", "invariant  checked  violations", "cas", "acknowledged commit", "    row executions[id="} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	// More than MaxExplained violations of one invariant are capped.
	many := &verify.Verdict{Result: verify.Fail}
	for range verify.MaxExplained + 3 {
		many.Violations = append(many.Violations, verify.Violation{Invariant: verify.InvCAS, Summary: "x"})
	}
	b.Reset()
	_ = many.WriteText(&b)
	if !strings.Contains(b.String(), "[cas] and 3 more") {
		t.Errorf("no cap:\n%s", b.String())
	}
	for _, c := range []struct {
		r    verify.Result
		code int
	}{{verify.Pass, 0}, {verify.Fail, 1}, {verify.Vacuous, 2}, {verify.Error, 2}} {
		if got := (&verify.Verdict{Result: c.r}).ExitCode(); got != c.code {
			t.Errorf("%s: exit %d, want %d", c.r, got, c.code)
		}
	}
}

// checkCaseWith is checkCase with options.
func checkCaseWith(t *testing.T, name string, o verify.Options) *verify.Verdict {
	t.Helper()
	dir := filepath.Join(corpusDir, name)
	h, err := verify.OpenHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := verify.ReadStateFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	return verify.Check(context.Background(), h, st, o)
}

// TestOneVerdict: Check alone decides the result from everything that
// bears on it — a run that errored is ERROR (FAIL when violations were
// found anyway: they are real), the floors make a run VACUOUS — and the
// text, the JSON, verdict.json, report.html and the exit code all say the
// same, with every reason.
func TestOneVerdict(t *testing.T) {
	cases := []struct {
		name, from string
		o          verify.Options
		want       verify.Result
		reasons    []string
	}{
		{"pass", "clean", verify.Options{}, verify.Pass, nil},
		{"run error", "clean", verify.Options{RunError: "workload: connect: refused"}, verify.Error, []string{"the run itself failed: workload: connect: refused"}},
		{"run error with violations", "acked-commit-lost", verify.Options{RunError: "boom"}, verify.Fail, []string{"violations", "the run itself failed: boom"}},
		{"too few commits", "clean", verify.Options{MinCommits: 1000}, verify.Vacuous, []string{"acknowledged commits; the scenario asks for at least 1000"}},
		{"configured, nothing scheduled", "clean", verify.Options{ExpectKinds: []string{"reset"}}, verify.Vacuous, []string{"the fault schedule is empty", "fault reset: configured but never scheduled"}},
		{"run error beats vacuous", "clean", verify.Options{RunError: "x", MinCommits: 1000}, verify.Error, []string{"the run itself failed: x", "at least 1000"}},
		{"landed on too few of its injections", "faults-landed", verify.Options{MinLanded: 2}, verify.Vacuous, []string{"landed 1 (< 2)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := checkCaseWith(t, c.from, c.o)
			if v.Result != c.want {
				t.Fatalf("%s %q, want %s", v.Result, v.Reasons, c.want)
			}
			all := strings.Join(v.Reasons, "\n")
			for _, r := range c.reasons {
				if !strings.Contains(all, r) {
					t.Errorf("reasons %q lack %q", v.Reasons, r)
				}
			}
			if (len(v.Reasons) == 0) != (c.want == verify.Pass) {
				t.Errorf("%s with reasons %q", v.Result, v.Reasons)
			}
			var text, js bytes.Buffer
			if err := v.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(text.String(), "verdict: "+string(c.want)) {
				t.Errorf("text: %s", text.String())
			}
			_ = v.WriteJSON(&js)
			dir := t.TempDir()
			if err := verify.WriteReport(dir, v); err != nil {
				t.Fatal(err)
			}
			file, _ := os.ReadFile(filepath.Join(dir, verify.VerdictFile))
			page, _ := os.ReadFile(filepath.Join(dir, verify.ReportFile))
			for what, b := range map[string][]byte{"json": js.Bytes(), "verdict.json": file} {
				var back verify.Verdict
				if err := json.Unmarshal(b, &back); err != nil || back.Result != c.want || strings.Join(back.Reasons, "\n") != all {
					t.Errorf("%s: %s %q (%v)", what, back.Result, back.Reasons, err)
				}
			}
			if !strings.Contains(string(page), `<span class="badge `+strings.ToLower(string(c.want))+`">`+string(c.want)+`</span>`) {
				t.Errorf("report.html does not show %s", c.want)
			}
			for _, r := range v.Reasons {
				if !strings.Contains(string(page), htmlEscape(r)) && !strings.Contains(string(page), strings.ReplaceAll(htmlEscape(r), "+", "&#43;")) {
					t.Errorf("report.html lacks the reason %q", r)
				}
			}
			if code := map[verify.Result]int{verify.Pass: 0, verify.Fail: 1, verify.Vacuous: 2, verify.Error: 2}[c.want]; v.ExitCode() != code {
				t.Errorf("exit %d, want %d", v.ExitCode(), code)
			}
		})
	}
}

// TestTimelineLanded: the report's timeline draws a window as landed
// exactly when the fault table counts it landed — also for the kinds whose
// proof is in the heal line (lost-ack, latency, stall, shard-crash,
// backend-kill), which it used to draw as not landed.
func TestTimelineLanded(t *testing.T) {
	s := newSim()
	sc := baseScenario(s, nil)
	s.fault("f1", verify.FaultLostAck, "shard1", true, obj{{"via", "shard"}, {"armed", 1}})
	ev := lostAckEvidence(s, true, false)
	s.step("w1", sc.B, spec{}, mInfoApplied)
	s.now += int64(time.Millisecond)
	s.emit(obj{{"type", "fault"}, {"id", "f1"}, {"kind", verify.FaultLostAck}, {"phase", "heal"}, {"t", s.now}, {"shard", "shard1"}, {"landed", true}, {"evidence", ev}})
	s.fault("f2", verify.FaultShardCrash, "shard0", false, obj{{"old_pid", 10}})
	s.errOp("w0", sc.A, "57P01")
	s.now += int64(time.Millisecond)
	s.emit(obj{{"type", "fault"}, {"id", "f2"}, {"kind", verify.FaultShardCrash}, {"phase", "heal"}, {"t", s.now}, {"shard", "shard0"}, {"landed", true},
		{"evidence", obj{{"old_pid", 10}, {"new_pid", 11}, {"recovery", []string{"LOG:  automatic recovery in progress"}}}}})
	s.fault("f3", verify.FaultStall, "shard1", true, obj{{"conns", 2}})
	s.step("w1", sc.B, spec{}, mOK)
	s.now += int64(time.Millisecond)
	s.emit(obj{{"type", "fault"}, {"id", "f3"}, {"kind", verify.FaultStall}, {"phase", "heal"}, {"t", s.now}, {"shard", "shard1"}, {"landed", false}, {"evidence", obj{{"stalled", 0}}}})
	s.finish(true)
	v := simVerdict(t, s, verify.Options{})
	want := map[string]bool{"f1": true, "f2": true, "f3": false}
	if v.Timeline == nil || len(v.Timeline.Faults) != 3 {
		t.Fatalf("timeline %+v", v.Timeline)
	}
	for _, f := range v.Timeline.Faults {
		if f.Landed != want[f.ID] {
			t.Errorf("%s %s drawn landed=%v, want %v (%+v)", f.ID, f.Kind, f.Landed, want[f.ID], v.Faults)
		}
	}
	var page bytes.Buffer
	if err := v.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for id, landed := range want {
		if !strings.Contains(page.String(), id+" ") || !strings.Contains(page.String(), "landed="+map[bool]string{true: "true", false: "false"}[landed]) {
			t.Errorf("report.html: %s not drawn landed=%v", id, landed)
		}
	}
}

// TestTimelineMoveMarks: a move fault's window carries its range, shards
// and freezes from its evidence (the heal's laid over the inject's), and
// the report marks it on the charts: its label, and each freeze whose
// start the evidence gives as a band titled with its duration.
func TestTimelineMoveMarks(t *testing.T) {
	s := newSim()
	sc := baseScenario(s, nil)
	s.fault("m1", verify.FaultMove, "", true, obj{{"lo", 0}, {"hi", 3}, {"from", "shard0"}, {"to", "shard1"}})
	freezeAt := s.now + int64(400*time.Millisecond)
	for range 8 {
		s.step("w1", sc.B, spec{}, mOK)
		s.now += int64(100 * time.Millisecond)
	}
	s.emit(obj{{"type", "fault"}, {"id", "m1"}, {"kind", verify.FaultMove}, {"phase", "heal"}, {"t", s.now}, {"landed", true},
		{"evidence", obj{{"lo", 0}, {"hi", 3}, {"from", "shard0"}, {"to", "shard1"}, {"epoch", 2},
			{"freeze_ms", []float64{12.5, 40}}, {"freeze_t", []int64{freezeAt, freezeAt + int64(200*time.Millisecond)}}}}})
	s.fault("m2", verify.FaultMove, "", true, obj{{"lo", 0}, {"hi", 3}, {"from", "shard1"}, {"to", "shard0"}, {"freeze_ms", []float64{7}}})
	s.now += int64(600 * time.Millisecond)
	s.heal("m2", verify.FaultMove, "")
	s.finish(true)
	v := simVerdict(t, s, verify.Options{MinLanded: -1})
	var m1, m2 *verify.FaultWindow
	for i, f := range v.Timeline.Faults {
		switch f.ID {
		case "m1":
			m1 = &v.Timeline.Faults[i]
		case "m2":
			m2 = &v.Timeline.Faults[i]
		}
	}
	if m1 == nil || m1.Move == nil || m1.Move.Lo != 0 || m1.Move.Hi != 3 || m1.Move.To != "shard1" || m1.Move.Epoch != 2 ||
		len(m1.Move.FreezeMS) != 2 || len(m1.Move.FreezeNS) != 2 || m1.Move.FreezeNS[0] != freezeAt {
		t.Fatalf("m1 window %+v", m1)
	}
	if m2 == nil || m2.Move == nil || len(m2.Move.FreezeMS) != 1 || m2.Move.FreezeNS != nil {
		t.Fatalf("m2 window %+v (freezes without times)", m2)
	}
	var page bytes.Buffer
	if err := v.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	p := page.String()
	for _, want := range []string{
		"move 0-3 shard0→shard1",            // m1's label on the chart
		"freeze 1 of m1: 12.5 ms",           // its freezes, as bands
		"freeze 2 of m1: 40 ms",             //
		"move 0-3 shard1→shard0 · freeze 7", // m2's label: a duration without a time
		"buckets 0-3 shard0→shard1 (epoch 2), 2 freeze(s): 12.5, 40 ms",
	} {
		if !strings.Contains(p, html.EscapeString(want)) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if !strings.Contains(p, `stroke-dasharray="4 3"`) {
		t.Errorf("report.html: no dashed edges of the move windows")
	}
	if keep := os.Getenv("PGSHARD_VERIFY_REPORT_DIR"); keep != "" {
		if err := verify.WriteReport(filepath.Join(keep, "move-marks"), v); err != nil {
			t.Fatal(err)
		}
	}
}
