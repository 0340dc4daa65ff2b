package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/verify"
)

// TestVerdictAgreement: whatever decides a run's result, the exit status,
// the printed verdict (text and JSON), verdict.json and report.html say
// the same thing, with the same reasons — for PASS, FAIL, ERROR and every
// way a run can be VACUOUS (a fault kind that did not land, an
// interrupted run, too few acknowledged commits, an empty schedule or a
// kind never scheduled although the scenario configures faults). Runs on
// the corpus's saved histories and states: no database.
func TestVerdictAgreement(t *testing.T) {
	corpus := filepath.Join("..", "..", "verify", "testdata", "corpus")
	cases := []struct {
		name, from string
		edit       func(history string) string // nil: as is
		scenario   *chaos.Scenario             // written as run.json next to the history
		args       []string
		want       verify.Result
		reason     string // a reason the verdict must give ("" for PASS)
	}{
		{name: "pass", from: "clean", want: verify.Pass},
		{name: "fail", from: "acked-commit-lost", want: verify.Fail, reason: "violations"},
		{name: "error truncated", from: "truncated", want: verify.Error, reason: "truncated"},
		{name: "vacuous fault did not land", from: "vacuous", want: verify.Vacuous, reason: "fault pgbouncer-kill"},
		{name: "vacuous interrupted", from: "clean", want: verify.Vacuous, reason: "interrupted",
			edit: func(h string) string { return strings.Replace(h, `"interrupted":false`, `"interrupted":true`, 1) }},
		{name: "vacuous too few commits", from: "clean", args: []string{"--min-commits", "100000"}, want: verify.Vacuous,
			reason: "the scenario asks for at least 100000"},
		{name: "vacuous too few commits from run.json", from: "clean", want: verify.Vacuous, reason: "the scenario asks for at least 5000",
			scenario: &chaos.Scenario{Name: "floor", MinCommits: 5000}},
		{name: "vacuous empty schedule", from: "clean", want: verify.Vacuous, reason: "the fault schedule is empty",
			scenario: &chaos.Scenario{Name: "faults", Faults: []chaos.ScenarioFault{{Kind: chaos.KindTerminate}}}},
		{name: "vacuous kind never scheduled", from: "faults-landed", want: verify.Vacuous, reason: "fault stall: configured but never scheduled",
			scenario: &chaos.Scenario{Name: "faults", Faults: []chaos.ScenarioFault{{Kind: chaos.KindTerminate}, {Kind: chaos.KindStall}}}},
		{name: "pass with the scenario's floors met", from: "faults-landed", want: verify.Pass,
			scenario: &chaos.Scenario{Name: "faults", MinLanded: 1, Faults: []chaos.ScenarioFault{{Kind: chaos.KindTerminate}, {Kind: chaos.KindLatency}}}},
	}
	codes := map[verify.Result]int{verify.Pass: 0, verify.Fail: 1, verify.Vacuous: 2, verify.Error: 2}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			h, err := os.ReadFile(filepath.Join(corpus, c.from, "history.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if c.edit != nil {
				edited := c.edit(string(h))
				if edited == string(h) {
					t.Fatal("the edit changed nothing")
				}
				h = []byte(edited)
			}
			hist := filepath.Join(dir, "history.jsonl")
			if err := os.WriteFile(hist, h, 0o644); err != nil {
				t.Fatal(err)
			}
			if c.scenario != nil {
				b, err := json.Marshal(chaos.RunRecord{RunID: "r1", Scenario: *c.scenario})
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, chaos.RunFile), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			state := filepath.Join(corpus, c.from, "state.json")
			for _, asJSON := range []bool{false, true} {
				out := filepath.Join(dir, "out")
				args := append([]string{"verify", "--history", hist, "--state", state, "--out", out}, c.args...)
				if asJSON {
					args = append(args, "--json")
				}
				res := run(t, "", args...)
				if res.code != codes[c.want] {
					t.Errorf("json=%v: exit %d, want %d for %s\n%s\n%s", asJSON, res.code, codes[c.want], c.want, res.stdout, res.stderr)
				}
				var printed string
				if asJSON {
					var v struct {
						Result  string   `json:"result"`
						Reasons []string `json:"reasons"`
					}
					if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
						t.Fatalf("printed JSON: %v\n%s", err, res.stdout)
					}
					printed = v.Result
					if !hasReason(v.Reasons, c.reason) {
						t.Errorf("printed JSON reasons %q lack %q", v.Reasons, c.reason)
					}
				} else {
					first, _, _ := strings.Cut(res.stdout, "\n")
					printed = strings.Fields(first + " ?")[1]
					if c.reason != "" && !strings.Contains(res.stdout, c.reason) {
						t.Errorf("printed text lacks %q:\n%s", c.reason, res.stdout)
					}
				}
				if printed != string(c.want) {
					t.Errorf("json=%v: printed %s, want %s\n%s", asJSON, printed, c.want, res.stdout)
				}
				var file struct {
					Result  string   `json:"result"`
					Reasons []string `json:"reasons"`
				}
				b, err := os.ReadFile(filepath.Join(out, verify.VerdictFile))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &file); err != nil {
					t.Fatal(err)
				}
				if file.Result != string(c.want) || !hasReason(file.Reasons, c.reason) {
					t.Errorf("verdict.json says %s %q, want %s with %q", file.Result, file.Reasons, c.want, c.reason)
				}
				if (len(file.Reasons) == 0) != (c.want == verify.Pass) {
					t.Errorf("verdict.json: %s with reasons %q", file.Result, file.Reasons)
				}
				page, err := os.ReadFile(filepath.Join(out, verify.ReportFile))
				if err != nil {
					t.Fatal(err)
				}
				badge := `<span class="badge ` + strings.ToLower(string(c.want)) + `">` + string(c.want) + `</span>`
				if !strings.Contains(string(page), badge) || strings.Count(string(page), `<span class="badge `) != 1 {
					t.Errorf("report.html lacks the one badge %s", badge)
				}
				if !strings.Contains(string(page), "<title>pgshard verify: "+string(c.want)+" ") {
					t.Errorf("report.html's title does not say %s", c.want)
				}
				for _, r := range file.Reasons {
					if !strings.Contains(string(page), htmlText(r)) {
						t.Errorf("report.html lacks the reason %q", r)
					}
				}
			}
		})
	}
}

func hasReason(rs []string, want string) bool {
	if want == "" {
		return true
	}
	for _, r := range rs {
		if strings.Contains(r, want) {
			return true
		}
	}
	return false
}

// htmlText is s as html/template escapes text.
func htmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;", "+", "&#43;").Replace(s)
}
