package route_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// corpusCase is one routing case of testdata/corpus.yaml.
type corpusCase struct {
	Name   string    `yaml:"name"`
	SQL    string    `yaml:"sql"`
	Params []*string `yaml:"params"`
	OIDs   []uint32  `yaml:"oids"`
	Schema string    `yaml:"schema"`
	Simple bool      `yaml:"simple"`
	Expect string    `yaml:"expect"`
}

func loadCorpus(t testing.TB) []corpusCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "corpus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var cases []corpusCase
	if err := dec.Decode(&cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestCorpus routes every corpus case, checks the hand-written expected
// destination, checks invariants every decision must satisfy, and pins the
// full decision (reasons, keys, merge plans) in testdata/corpus.golden.
func TestCorpus(t *testing.T) {
	cases := loadCorpus(t)
	if len(cases) < 80 {
		t.Fatalf("corpus has %d cases, want at least 80", len(cases))
	}
	routers := map[string]*route.Table{"default": newRouter(t, "default"), "int8": newRouter(t, "int8")}
	var golden strings.Builder
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.Name] {
			t.Errorf("duplicate case name %q", c.Name)
		}
		names[c.Name] = true
		schema := c.Schema
		if schema == "" {
			schema = "default"
		}
		r := routers[schema]
		if r == nil {
			t.Fatalf("%s: unknown schema %q", c.Name, c.Schema)
		}
		params, formats, err := encodeParams(c.Params)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		var st *route.Statement
		if c.Simple {
			sts, err := r.Split(c.SQL)
			if err != nil || len(sts) != 1 {
				t.Fatalf("%s: Split: %v (%d statements)", c.Name, err, len(sts))
			}
			st, params = sts[0], nil
		} else if st, err = r.Analyze(c.SQL); err != nil {
			t.Fatalf("%s: Analyze: %v", c.Name, err)
		}
		ex := r.Explain(st, params, formats, c.OIDs)
		t.Run(c.Name, func(t *testing.T) {
			checkExpect(t, r.Map(), c.Expect, ex.Dest)
			checkInvariants(t, r.Map(), st, ex.Dest)
			// Route and Explain agree, and routing is deterministic.
			if d := r.Route(st, params, formats, c.OIDs); !sameDest(d, ex.Dest) {
				t.Errorf("Route = %+v, Explain = %+v", d, ex.Dest)
			}
		})
		fmt.Fprintf(&golden, "== %s\nsql:     %s\n", c.Name, c.SQL)
		if c.Params != nil {
			var ps []string
			for _, p := range c.Params {
				if p == nil {
					ps = append(ps, "NULL")
				} else {
					ps = append(ps, strconv.Quote(*p))
				}
			}
			fmt.Fprintf(&golden, "params:  %s\n", strings.Join(ps, ", "))
		}
		golden.WriteString(describe(r.Map(), st, ex))
		golden.WriteString("\n")
	}
	compareGolden(t, filepath.Join("testdata", "corpus.golden"), golden.String())
}

func sameDest(a, b route.Dest) bool {
	if (a.Refusal == nil) != (b.Refusal == nil) || (a.Merge == nil) != (b.Merge == nil) {
		return false
	}
	if a.Refusal != nil && *a.Refusal != *b.Refusal {
		return false
	}
	if a.Merge != nil {
		ma, mb := *a.Merge, *b.Merge
		if !sameStages(ma.Stages, mb.Stages) {
			return false
		}
		ma.Stages, mb.Stages = nil, nil
		if !reflect.DeepEqual(ma, mb) {
			return false
		}
	}
	return a.Kind == b.Kind && a.Shard == b.Shard && a.KeyText() == b.KeyText() && a.Bucket == b.Bucket && a.Why() == b.Why()
}

// sameStages compares two-stage plans by their texts (each router has
// its own analyses of them).
func sameStages(a, b *route.Stages) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Outer != b.Outer || len(a.Inner) != len(b.Inner) {
		return false
	}
	for i := range a.Inner {
		if a.Inner[i].SQL != b.Inner[i].SQL {
			return false
		}
	}
	return true
}

func checkExpect(t *testing.T, m *shardmap.Map, expect string, d route.Dest) {
	t.Helper()
	verb, arg, _ := strings.Cut(expect, " ")
	switch verb {
	case "shard-of", "shard-of-int8", "shard":
		want := -1
		switch verb {
		case "shard-of":
			want = m.ShardIndexForBucket(m.Bucket(arg))
		case "shard-of-int8":
			v, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				t.Fatalf("bad expectation %q", expect)
			}
			want = m.ShardIndexForBucket(m.BucketInt8(v))
		default:
			for i, s := range m.Shards {
				if s.Name == arg {
					want = i
				}
			}
		}
		if d.Kind != route.DestShard || d.Shard != want {
			t.Fatalf("want shard %s (%s), got %s %d: %s", m.Shards[want].Name, expect, d.Kind, d.Shard, d.Why())
		}
		if verb != "shard" && d.KeyText() != arg {
			t.Errorf("Key = %q, want %q", d.KeyText(), arg)
		}
	case "all":
		if d.Kind != route.DestAll {
			t.Fatalf("want all, got %s: %s", d.Kind, d.Why())
		}
	case "default":
		if d.Kind != route.DestAny || !d.Default {
			t.Fatalf("want any on the default shard, got %s (default %v): %s", d.Kind, d.Default, d.Why())
		}
	case "any":
		if d.Kind != route.DestAny {
			t.Fatalf("want any, got %s: %s", d.Kind, d.Why())
		}
	case "refuse":
		if d.Kind != route.DestRefuse || d.Refusal == nil || d.Refusal.SQLState != arg {
			state := ""
			if d.Refusal != nil {
				state = d.Refusal.SQLState
			}
			t.Fatalf("want refusal %s, got %s %s: %s", arg, d.Kind, state, d.Why())
		}
	default:
		t.Fatalf("bad expectation %q", expect)
	}
}

// checkInvariants holds for every decision.
func checkInvariants(t testing.TB, m *shardmap.Map, st *route.Statement, d route.Dest) {
	t.Helper()
	if d.Why() == "" {
		t.Error("decision without a reason")
	}
	switch d.Kind {
	case route.DestShard:
		if d.Shard < 0 || d.Shard >= len(m.Shards) {
			t.Errorf("shard index %d out of range", d.Shard)
		}
		if d.Bucket >= 0 && m.ShardIndexForBucket(d.Bucket) != d.Shard {
			t.Errorf("bucket %d is not on shard %d", d.Bucket, d.Shard)
		}
	case route.DestAll:
		if st.Kind == route.KindOther && d.Merge == nil {
			t.Error("a fan-out read without a merge plan")
		}
		if st.Kind == route.KindOther && !st.ReadOnly {
			t.Error("a fan-out of a statement that is not read-only")
		}
	case route.DestRefuse:
		if d.Refusal == nil || len(d.Refusal.SQLState) != 5 || d.Refusal.Message == "" {
			t.Errorf("refusal without SQLSTATE or message: %+v", d.Refusal)
		}
	}
	if d.Kind != route.DestAll && d.Merge != nil {
		t.Error("a merge plan on a decision that is not a fan-out")
	}
}

// compareGolden compares got with the golden file, or rewrites it with -update.
func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) == got {
		return
	}
	wl, gl := strings.Split(string(want), "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			t.Fatalf("%s differs at line %d (run with -update and review the diff):\nwant: %s\ngot:  %s", path, i+1, w, g)
		}
	}
}
