package verify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
