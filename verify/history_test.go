package verify_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/pgshard/pgshard/verify"
)

const hdr = `{"type":"header","format":"pgshard-history","version":1,"run":"r1","started_at":"2026-12-01T10:00:00Z","seed":7,` +
	`"workload":{"trace_max":2},"map":{"epoch":1,"buckets":64,"shards":[{"name":"shard0","ordinal":0,"ranges":[[0,63]]}]},"schedule":[]}`

const setupOp = `{"type":"op","id":"r1/setup/1","kind":"commit","src":"setup","exe":"e1","shard":"shard0","t0":1,"t1":2,"outcome":"ok","exp":0,"new":1,"cause":"setup"}`

const endLine = `{"type":"end","t":10,"ended_at":"2026-12-01T10:00:01Z","ops":1,"interrupted":false,"quiesce":{"ok":true,"ms":1}}`

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

func TestReadHistory(t *testing.T) {
	cases := []struct {
		name string
		in   string
		// errLine is the line the error names (0: no error).
		errLine int
		errHas  string
		check   func(t *testing.T, h *verify.History)
	}{
		{name: "minimal", in: lines(hdr, setupOp, endLine), check: func(t *testing.T, h *verify.History) {
			if len(h.Ops) != 1 || h.Truncated() || h.Header.Run != "r1" || h.Header.Workload.TraceMax != 2 || h.Ops[0].Line != 2 {
				t.Errorf("decoded %+v", h)
			}
			if h.End.Quiesce == nil || !h.End.Quiesce.OK || h.End.EndedAt.IsZero() {
				t.Errorf("end %+v", h.End)
			}
		}},
		{name: "unknown members are ignored", in: lines(strings.Replace(hdr, `"seed":7`, `"seed":7,"future":{"x":[1,2]}`, 1),
			strings.Replace(setupOp, `"cause"`, `"novel":true,"cause"`, 1), endLine),
			check: func(t *testing.T, h *verify.History) {
				if len(h.Ops) != 1 {
					t.Errorf("ops %d", len(h.Ops))
				}
			}},
		{name: "no end line is truncated", in: lines(hdr, setupOp), check: func(t *testing.T, h *verify.History) {
			if !h.Truncated() || h.PartialLine {
				t.Errorf("truncated %v partial %v", h.Truncated(), h.PartialLine)
			}
		}},
		{name: "a partial last line is skipped", in: lines(hdr, setupOp) + `{"type":"op","id":"r1/w0/1","ki`,
			check: func(t *testing.T, h *verify.History) {
				if !h.Truncated() || !h.PartialLine || len(h.Ops) != 1 || h.Lines != 3 {
					t.Errorf("truncated %v partial %v ops %d lines %d", h.Truncated(), h.PartialLine, len(h.Ops), h.Lines)
				}
			}},
		{name: "a complete last line without newline", in: lines(hdr, setupOp) + endLine, check: func(t *testing.T, h *verify.History) {
			if h.Truncated() {
				t.Error("truncated")
			}
		}},
		{name: "empty input", in: "", errHas: "no header"},
		{name: "header not first", in: lines(setupOp, hdr), errLine: 1, errHas: "first line must be the header"},
		{name: "another format", in: lines(strings.Replace(hdr, "pgshard-history", "jepsen", 1)), errLine: 1, errHas: `format is "jepsen"`},
		{name: "another version", in: lines(strings.Replace(hdr, `"version":1`, `"version":3`, 1)), errLine: 1, errHas: "version 3, this reader knows versions 1..2"},
		{name: "version 0", in: lines(strings.Replace(hdr, `"version":1`, `"version":0`, 1)), errLine: 1, errHas: "version 0"},
		{name: "digests in a version-1 history", in: lines(hdr, strings.Replace(setupOp, `"cause":"setup"`, `"cause":"setup","data_digest":"ab"`, 1)), errLine: 2, errHas: "content digests in a version-1 history"},
		{name: "spawn digests not one per spawn", in: lines(strings.Replace(hdr, `"version":1`, `"version":2`, 1), strings.Replace(setupOp, `"cause":"setup"`, `"cause":"setup","spawns":["c1"],"spawn_digests":["ab","cd"]`, 1)), errLine: 2, errHas: "2 spawn_digests for 1 spawns"},
		{name: "version 2 read", in: lines(strings.Replace(hdr, `"version":1`, `"version":2`, 1), strings.Replace(setupOp, `"cause":"setup"`, `"cause":"setup","data_digest":"ab"`, 1)), check: func(t *testing.T, h *verify.History) {
			if h.Header.Version != 2 || h.Ops[0].DataDigest != "ab" {
				t.Errorf("version %d, data_digest %q", h.Header.Version, h.Ops[0].DataDigest)
			}
		}},
		{name: "no version", in: lines(strings.Replace(hdr, `"version":1,`, ``, 1)), errLine: 1, errHas: "version <missing>"},
		{name: "two headers", in: lines(hdr, hdr), errLine: 2, errHas: "second header"},
		{name: "unknown line type", in: lines(hdr, `{"type":"progress","t":1}`), errLine: 2, errHas: `unknown line type "progress"`},
		{name: "unknown op kind", in: lines(hdr, strings.Replace(setupOp, `"commit"`, `"vacuum"`, 1)), errLine: 2, errHas: `unknown kind "vacuum"`},
		{name: "bad outcome", in: lines(hdr, strings.Replace(setupOp, `"ok"`, `"maybe"`, 1)), errLine: 2, errHas: "outcome"},
		{name: "member of the wrong type", in: lines(hdr, strings.Replace(setupOp, `"exp":0`, `"exp":"0"`, 1)), errLine: 2, errHas: "exp"},
		{name: "t1 before t0", in: lines(hdr, strings.Replace(setupOp, `"t1":2`, `"t1":0`, 1)), errLine: 2, errHas: "t0 <= t1"},
		{name: "ok commit with a wrong new", in: lines(hdr, strings.Replace(setupOp, `"new":1`, `"new":3`, 1)), errLine: 2, errHas: "want 1"},
		{name: "duplicate op id", in: lines(hdr, setupOp, setupOp), errLine: 3, errHas: "used twice (first on line 2)"},
		{name: "line after end", in: lines(hdr, setupOp, endLine, setupOp), errLine: 4, errHas: "after the end"},
		{name: "empty line", in: lines(hdr, "", setupOp), errLine: 2, errHas: "empty line"},
		{name: "not JSON", in: lines(hdr, "hello"), errLine: 2, errHas: "not a JSON object"},
		{name: "two values on a line", in: lines(hdr, setupOp+" {}"), errLine: 2, errHas: "not a JSON object"},
		{name: "delivery without origin", in: lines(hdr, strings.Replace(setupOp, `"cause":"setup"`, `"cause":"outbox","seq":1`, 1)), errLine: 2, errHas: "seq and origin"},
		{name: "overlapping map ranges", in: lines(strings.Replace(hdr, `"ranges":[[0,63]]}]`, `"ranges":[[0,40],[30,63]]}]`, 1)), errLine: 1, errHas: "overlap"},
		{name: "fault with a bad phase", in: lines(hdr, `{"type":"fault","id":"f1","kind":"reset","phase":"maybe","t":1}`), errLine: 2, errHas: "phase"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := verify.ReadHistory(strings.NewReader(c.in))
			if c.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), c.errHas) {
					t.Fatalf("error %v, want one containing %q", err, c.errHas)
				}
				var le *verify.LineError
				if c.errLine > 0 && (!errors.As(err, &le) || le.Line != c.errLine) {
					t.Fatalf("error %v does not name line %d", err, c.errLine)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, h)
		})
	}
}

// TestReadHistoryCompressed reads the same history plain, gzip and zstd,
// whatever the file is called.
func TestReadHistoryCompressed(t *testing.T) {
	plain := []byte(lines(hdr, setupOp, endLine))
	var gz, zs bytes.Buffer
	gw := gzip.NewWriter(&gz)
	_, _ = gw.Write(plain)
	_ = gw.Close()
	zw, _ := zstd.NewWriter(&zs)
	_, _ = zw.Write(plain)
	_ = zw.Close()
	dir := t.TempDir()
	for name, b := range map[string][]byte{"history.jsonl": plain, "history.jsonl.gz": gz.Bytes(), "history.jsonl.zst": zs.Bytes(), "misnamed.jsonl": zs.Bytes()} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		h, err := verify.OpenHistory(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(h.Ops) != 1 || h.Truncated() {
			t.Errorf("%s: %d ops, truncated %v", name, len(h.Ops), h.Truncated())
		}
	}
	// A corrupt compressed stream is an error, not a truncated history.
	bad := append([]byte{}, zs.Bytes()...)
	bad[len(bad)/2] ^= 0xff
	if _, err := verify.ReadHistory(bytes.NewReader(bad)); err == nil {
		t.Error("a corrupt zstd stream was accepted")
	}
}

// TestReadHistoryLongLine refuses a line over the 16 MiB bound.
func TestReadHistoryLongLine(t *testing.T) {
	long := `{"type":"op","id":"` + strings.Repeat("x", 17<<20) + `"}`
	_, err := verify.ReadHistory(strings.NewReader(lines(hdr, long)))
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("error %v", err)
	}
}

// FuzzReadHistory feeds arbitrary bytes to the decoder: it must never
// panic, a decoded history must satisfy the decoder's promises, and Check
// must not panic on it either (with an empty state of the history's map).
func FuzzReadHistory(f *testing.F) {
	f.Add([]byte(lines(hdr, setupOp, endLine)))
	for _, name := range []string{"clean", "faults-landed", "mutant-outbox-outside-tx", "truncated"} {
		// The first lines of corpus histories: small seeds keep the
		// fuzzer's minimization fast.
		if b, err := os.ReadFile(filepath.Join(corpusDir, name, "history.jsonl")); err == nil {
			ls := bytes.SplitAfter(b, []byte("\n"))
			f.Add(bytes.Join(ls[:min(len(ls), 12)], nil))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := verify.ReadHistory(bytes.NewReader(data))
		if err != nil {
			return
		}
		if h.Header.Format != verify.Format || h.Header.Version < verify.MinVersion || h.Header.Version > verify.Version || h.Header.Run == "" {
			t.Fatalf("accepted header %+v", h.Header)
		}
		ids := map[string]bool{}
		for _, o := range h.Ops {
			if o.ID == "" || ids[o.ID] || o.T1 < o.T0 {
				t.Fatalf("accepted op %+v", o)
			}
			ids[o.ID] = true
			switch o.Outcome {
			case verify.OutcomeOK, verify.OutcomeFail, verify.OutcomeInfo:
			default:
				t.Fatalf("accepted outcome %q", o.Outcome)
			}
		}
		if len(h.Ops) > 200 {
			return
		}
		st := &verify.State{Map: h.Header.Map}
		for _, s := range h.Header.Map.Shards {
			st.Shards = append(st.Shards, &verify.ShardState{Name: s.Name, Ordinal: s.Ordinal})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		v := verify.Check(ctx, h, st, verify.Options{PartitionTimeout: 100 * time.Millisecond})
		var b bytes.Buffer
		if err := v.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if err := v.WriteHTML(&b); err != nil {
			t.Fatal(err)
		}
	})
}
