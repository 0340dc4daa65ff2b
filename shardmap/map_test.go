package shardmap_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/shardmap"
)

var update = flag.Bool("update", false, "rewrite testdata/validation_errors.golden from the current messages")

// base is a valid three-shard map over 4096 buckets, as YAML-free Go values;
// each validation case breaks exactly one thing in a copy of it.
func base() *shardmap.Map {
	return &shardmap.Map{
		Epoch:   7,
		Buckets: 4096,
		Shards: []shardmap.Shard{
			{Name: "a", Ordinal: 0, DSN: "postgres://a/db"},
			{Name: "b", Ordinal: 1, DSN: "postgres://b/db", PoolerDSN: "postgres://b:6432/db"},
			{Name: "c", Ordinal: 5, DSN: "postgres://c/db"},
		},
		Ranges: []shardmap.Range{
			{Lo: 0, Hi: 1365, Shard: "a"},
			{Lo: 1366, Hi: 2730, Shard: "b"},
			{Lo: 2731, Hi: 4095, Shard: "c"},
		},
	}
}

// TestValidate: every map with a single defect fails with exactly one
// problem, on one line, naming the defect; the full messages are pinned in
// testdata/validation_errors.golden (refresh with -update).
func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(m *shardmap.Map)
		want   []string // substrings of the single problem
	}{
		{"gap", func(m *shardmap.Map) { m.Ranges[1].Hi = 2000 },
			[]string{"buckets 2001-2730", "gap"}},
		{"gap of one bucket", func(m *shardmap.Map) { m.Ranges[2].Lo = 2732 },
			[]string{"bucket 2731 is not assigned", "gap"}},
		{"gap at the end", func(m *shardmap.Map) { m.Ranges[2].Hi = 4000 },
			[]string{"buckets 4001-4095", "gap"}},
		{"overlap", func(m *shardmap.Map) { m.Ranges[1].Hi = 2800; m.Ranges[2].Lo = 2700 },
			[]string{`ranges[2] 2700-4095 (shard "c")`, "buckets 2700-2800 overlap"}},
		{"range inside another", func(m *shardmap.Map) {
			m.Ranges = append(m.Ranges, shardmap.Range{Lo: 10, Hi: 20, Shard: "b"})
		}, []string{`ranges[3] 10-20 (shard "b")`, "buckets 10-20 overlap"}},
		{"unknown shard in a range", func(m *shardmap.Map) {
			m.Ranges[2].Hi = 4000
			m.Ranges = append(m.Ranges, shardmap.Range{Lo: 4001, Hi: 4095, Shard: "zz"})
		}, []string{`ranges[3] 4001-4095: unknown shard "zz"`}},
		{"range beyond the buckets", func(m *shardmap.Map) { m.Ranges[2].Hi = 5000 },
			[]string{"ranges[2] 2731-5000", "within 0-4095"}},
		{"negative range", func(m *shardmap.Map) { m.Ranges[0].Lo = -1 },
			[]string{"ranges[0] -1-1365", "within 0-4095"}},
		{"reversed range", func(m *shardmap.Map) { m.Ranges[2].Lo, m.Ranges[2].Hi = 4095, 2731 },
			[]string{"ranges[2] 4095-2731", "within 0-4095"}},
		{"duplicate name", func(m *shardmap.Map) { m.Shards[2].Name = "a"; m.Ranges[2].Shard = "a" },
			[]string{`shards[2]: duplicate name "a" (also shards[0])`}},
		{"duplicate ordinal", func(m *shardmap.Map) { m.Shards[2].Ordinal = 1 },
			[]string{`shards[2] "c": duplicate ordinal 1 (also shard "b")`}},
		{"ordinal too large", func(m *shardmap.Map) { m.Shards[1].Ordinal = 1024 },
			[]string{`shards[1] "b": ordinal 1024 is outside 0..1023`}},
		{"negative ordinal", func(m *shardmap.Map) { m.Shards[0].Ordinal = -1 },
			[]string{`shards[0] "a": ordinal -1 is outside 0..1023`}},
		{"empty name", func(m *shardmap.Map) { m.Shards[0].Name = ""; m.Ranges[0].Shard = "" },
			[]string{"shards[0]: name is empty"}},
		{"bad name", func(m *shardmap.Map) { m.Shards[0].Name = "a\nb"; m.Ranges[0].Shard = "a\nb" },
			[]string{`shards[0]: name "a\nb" may only contain`}},
		{"buckets not a power of two", func(m *shardmap.Map) { m.Buckets = 4095; m.Ranges[2].Hi = 4094 },
			[]string{"buckets: 4095 is not a power of two"}},
		{"buckets zero", func(m *shardmap.Map) { m.Buckets = 0 },
			[]string{"buckets: 0 is not a power of two"}},
		{"buckets negative", func(m *shardmap.Map) { m.Buckets = -4096 },
			[]string{"buckets: -4096 is not a power of two"}},
		{"buckets too many", func(m *shardmap.Map) { m.Buckets = 1 << 21 },
			[]string{"buckets: 2097152 is not a power of two between 1 and 1048576"}},
		{"epoch zero", func(m *shardmap.Map) { m.Epoch = 0 },
			[]string{"epoch: must be at least 1"}},
		{"empty dsn", func(m *shardmap.Map) { m.Shards[1].DSN = "" },
			[]string{`shards[1] "b": dsn is empty`}},
		{"shard without buckets", func(m *shardmap.Map) {
			m.Shards = append(m.Shards, shardmap.Shard{Name: "d", Ordinal: 9, DSN: "postgres://d/db"})
		}, []string{`shards[3] "d": owns no buckets`, "empty: true"}},
		{"empty shard with buckets", func(m *shardmap.Map) { m.Shards[1].Empty = true },
			[]string{`shards[1] "b": marked empty but owns buckets`, "1366-2730"}},
		{"no shards", func(m *shardmap.Map) { m.Shards = nil; m.Ranges = nil },
			[]string{"shards: the map has no shards"}},
	}
	var golden bytes.Buffer
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.break_(m)
			err := m.Validate()
			if err == nil {
				t.Fatal("Validate accepted the map")
			}
			fmt.Fprintf(&golden, "%s: %s\n", tt.name, err)
			var ve *shardmap.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T is not a *ValidationError", err)
			}
			if len(ve.Problems) != 1 {
				t.Errorf("%d problems, want exactly 1: %q", len(ve.Problems), ve.Problems)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			// A map that failed validation must not route.
			assertPanics(t, func() { m.ShardForBucket(0) })
		})
	}
	checkGolden(t, "testdata/validation_errors.golden", golden.Bytes())
}

// TestValidateReportsAll: several defects are all reported, in one line.
func TestValidateReportsAll(t *testing.T) {
	m := base()
	m.Epoch = 0
	m.Shards[1].DSN = ""
	m.Ranges[1].Hi = 2000
	err := m.Validate()
	var ve *shardmap.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("got %v, want 3 problems", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("multi-line error %q", err)
	}
}

func assertPanics(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	f()
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update after reviewing):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

const validYAML = `# a three-shard map
epoch: 3
buckets: 16
shards:
  - name: a
    ordinal: 0
    dsn: postgres://a/db
  - name: b
    ordinal: 1
    dsn: postgres://b/db
    pooler_dsn: postgres://b:6432/db
  - name: c
    ordinal: 2
    dsn: "postgres://c/db?sslmode=disable"
ranges:
  - {lo: 8, hi: 11, shard: b}
  - {lo: 0, hi: 7, shard: a}
  - {lo: 12, hi: 15, shard: c}
`

// TestParse: strict YAML decoding; every failure is one line naming the
// problem (and, for YAML errors, its line).
func TestParse(t *testing.T) {
	m, err := shardmap.Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch != 3 || m.Buckets != 16 || len(m.Shards) != 3 || m.Shards[1].PoolerDSN != "postgres://b:6432/db" {
		t.Errorf("decoded %+v", m)
	}
	if m.Ranges[0].Shard != "a" || m.Ranges[1].Shard != "b" {
		t.Errorf("ranges not sorted by lo: %+v", m.Ranges)
	}
	if got := m.Lookup("x"); got == nil {
		t.Error("parsed map does not route")
	}

	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"unknown top-level key", strings.Replace(validYAML, "buckets: 16\n", "buckets: 16\nreplicas: 2\n", 1),
			[]string{"line 4", "field replicas not found"}},
		{"unknown shard key", strings.Replace(validYAML, "    dsn: postgres://a/db\n", "    dsn: postgres://a/db\n    weight: 2\n", 1),
			[]string{"line 8", "field weight not found"}},
		{"unknown range key", strings.Replace(validYAML, "{lo: 0, hi: 7, shard: a}", "{lo: 0, hi: 7, shard: a, owner: x}", 1),
			[]string{"line 17", "field owner not found"}},
		{"misspelled key", strings.Replace(validYAML, "pooler_dsn", "poolerdsn", 1),
			[]string{"line 11", "field poolerdsn not found"}},
		{"duplicate key", strings.Replace(validYAML, "epoch: 3\n", "epoch: 3\nepoch: 4\n", 1),
			[]string{"line 3", `"epoch" already defined`}},
		{"malformed", "epoch: [1\n", []string{"decode shard map", "line 1"}},
		{"tab indentation", "epoch: 1\nshards:\n\t- name: a\n", []string{"decode shard map", "line 3"}},
		{"wrong type", strings.Replace(validYAML, "buckets: 16", "buckets: many", 1),
			[]string{"line 3", "many"}},
		{"negative epoch", strings.Replace(validYAML, "epoch: 3", "epoch: -3", 1),
			[]string{"line 2", "-3"}},
		{"not a mapping", "- 1\n- 2\n", []string{"decode shard map", "line 1"}},
		{"empty", "", []string{"decode shard map", "empty"}},
		{"only a comment", "# nothing\n", []string{"decode shard map", "empty"}},
		{"two documents", validYAML + "---\nepoch: 4\n", []string{"decode shard map", "one YAML document"}},
		{"valid YAML, invalid map", strings.Replace(validYAML, "hi: 11", "hi: 10", 1),
			[]string{"invalid shard map", "bucket 11 is not assigned"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := shardmap.Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", m)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

// TestEven: 4096 buckets over 1..7 shards (and the edges) split into
// contiguous ranges, in shard order, sizes differing by at most one.
func TestEven(t *testing.T) {
	type tc struct{ buckets, n int }
	var tests []tc
	for n := 1; n <= 7; n++ {
		tests = append(tests, tc{4096, n})
	}
	tests = append(tests, tc{16, 16}, tc{1, 1}, tc{64, 3}, tc{4096, 1024})
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d over %d", tt.buckets, tt.n), func(t *testing.T) {
			m, err := shardmap.Even(tt.buckets, shards(tt.n))
			if err != nil {
				t.Fatal(err)
			}
			if m.Epoch != 1 || m.Buckets != tt.buckets {
				t.Errorf("epoch %d buckets %d", m.Epoch, m.Buckets)
			}
			if len(m.Ranges) != tt.n {
				t.Fatalf("%d ranges, want one per shard", len(m.Ranges))
			}
			next, lo, hi := 0, tt.buckets, 0
			for i, r := range m.Ranges {
				if r.Shard != m.Shards[i].Name || r.Lo != next {
					t.Fatalf("range %d = %+v, want shard %s from %d", i, r, m.Shards[i].Name, next)
				}
				next = r.Hi + 1
				lo, hi = min(lo, r.Len()), max(hi, r.Len())
				if i > 0 && r.Len() > m.Ranges[i-1].Len() {
					t.Errorf("range %d larger than range %d: earlier shards take the remainder", i, i-1)
				}
			}
			if next != tt.buckets || hi-lo > 1 {
				t.Errorf("covers 0..%d, sizes %d..%d", next-1, lo, hi)
			}
		})
	}
	for _, bad := range []struct {
		name    string
		buckets int
		shards  []shardmap.Shard
		want    string
	}{
		{"more shards than buckets", 4, shards(5), "5 shards"},
		{"no shards", 4096, nil, "no shards"},
		{"not a power of two", 100, shards(2), "power of two"},
		{"duplicate ordinal", 16, append(shards(2), shardmap.Shard{Name: "x", Ordinal: 1, DSN: "d"}), "duplicate ordinal"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			_, err := shardmap.Even(bad.buckets, bad.shards)
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("Even = %v, want an error mentioning %q", err, bad.want)
			}
		})
	}
}

// TestLookup: routing by bucket, name and ordinal, and the global-sequence
// stride (seq k+1+1024n comes from ordinal k).
func TestLookup(t *testing.T) {
	m := base()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		bucket int
		want   string
	}{{0, "a"}, {1365, "a"}, {1366, "b"}, {2730, "b"}, {2731, "c"}, {4095, "c"}} {
		if got := m.ShardForBucket(tt.bucket).Name; got != tt.want {
			t.Errorf("ShardForBucket(%d) = %s, want %s", tt.bucket, got, tt.want)
		}
		if got := m.Shards[m.ShardIndexForBucket(tt.bucket)].Name; got != tt.want {
			t.Errorf("ShardIndexForBucket(%d) names %s, want %s", tt.bucket, got, tt.want)
		}
	}
	key := "0f8fad5bd9cb469fa16570867728950e"
	if got, want := m.Lookup(key), m.ShardForBucket(shardmap.BucketText(key, 4096)); got != want {
		t.Errorf("Lookup(%s) = %s, want %s", key, got.Name, want.Name)
	}

	if s, err := m.ShardByName("c"); err != nil || s.Ordinal != 5 {
		t.Errorf("ShardByName(c) = %+v, %v", s, err)
	}
	if _, err := m.ShardByName("zz"); !errors.Is(err, shardmap.ErrNoShard) {
		t.Errorf("ShardByName(zz) error %v, want ErrNoShard", err)
	}
	if _, err := m.ShardByOrdinal(3); !errors.Is(err, shardmap.ErrNoShard) {
		t.Errorf("ShardByOrdinal(3) error %v, want ErrNoShard", err)
	}

	seqs := []struct {
		seq     int64
		ordinal int
		shard   string // "" = no shard with that ordinal
	}{
		{1, 0, "a"}, {2, 1, "b"}, {6, 5, "c"}, {1025, 0, "a"}, {1026, 1, "b"},
		{5 + 1 + 1024*1_000_000, 5, "c"}, {1024, 1023, ""}, {4, 3, ""},
		{1 << 62, 1023, ""}, {1<<62 + 1, 0, "a"}, {9223372036854775807, 1022, ""},
	}
	for _, tt := range seqs {
		t.Run(fmt.Sprintf("seq %d", tt.seq), func(t *testing.T) {
			k, err := shardmap.OrdinalForSeq(tt.seq)
			if err != nil || k != tt.ordinal {
				t.Errorf("OrdinalForSeq = %d, %v; want %d", k, err, tt.ordinal)
			}
			s, err := m.ShardForSeq(tt.seq)
			switch {
			case tt.shard == "" && !errors.Is(err, shardmap.ErrNoShard):
				t.Errorf("ShardForSeq = %v, %v; want ErrNoShard", s, err)
			case tt.shard != "" && (err != nil || s.Name != tt.shard):
				t.Errorf("ShardForSeq = %v, %v; want %s", s, err, tt.shard)
			}
		})
	}
	for _, seq := range []int64{0, -1, -1025, -9223372036854775808} {
		if k, err := shardmap.OrdinalForSeq(seq); err == nil {
			t.Errorf("OrdinalForSeq(%d) = %d, want an error", seq, k)
		}
		if s, err := m.ShardForSeq(seq); err == nil {
			t.Errorf("ShardForSeq(%d) = %v, want an error", seq, s)
		}
	}
	// Every ordinal's seqs name it.
	for k := 0; k <= shardmap.MaxOrdinal; k++ {
		for n := int64(0); n < 3; n++ {
			if got, _ := shardmap.OrdinalForSeq(int64(k) + 1 + shardmap.SeqStride*n); got != k {
				t.Fatalf("seq %d: ordinal %d, want %d", int64(k)+1+shardmap.SeqStride*n, got, k)
			}
		}
	}
}

func TestUnvalidatedMapPanics(t *testing.T) {
	m := base() // never validated
	assertPanics(t, func() { m.Lookup("x") })
	assertPanics(t, func() { _, _ = m.ShardByName("a") })
	assertPanics(t, func() { _, _ = shardmap.Diff(m, m) })
	assertPanics(t, func() { _, _ = shardmap.PlanAdd(m, shardmap.Shard{Name: "d", Ordinal: 9, DSN: "d"}) })
	assertPanics(t, func() { m.NextOrdinal() })
}

// exported projects a Map onto its exported fields, for comparisons.
type exported struct {
	Epoch   uint64
	Buckets int
	Shards  []shardmap.Shard
	Ranges  []shardmap.Range
}

func export(m *shardmap.Map) exported {
	return exported{m.Epoch, m.Buckets, m.Shards, m.Ranges}
}

// TestMarshalRoundTrip: Parse(Marshal(m)) equals m, and Marshal is stable.
func TestMarshalRoundTrip(t *testing.T) {
	even, _ := shardmap.Even(4096, shards(5))
	odd := base()
	odd.Shards[0].DSN = "host=a port=5432 dbname='x y' password=#:{}[]\"\\"
	odd.Shards[2].Name = "yes" // a YAML 1.1 boolean, must stay a string
	odd.Ranges[2].Shard = "yes"
	odd.Ranges[0], odd.Ranges[2] = odd.Ranges[2], odd.Ranges[0]
	if err := odd.Validate(); err != nil {
		t.Fatal(err)
	}
	parsed, err := shardmap.Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*shardmap.Map{"even": even, "odd": odd, "parsed": parsed} {
		t.Run(name, func(t *testing.T) {
			data, err := m.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			back, err := shardmap.Parse(data)
			if err != nil {
				t.Fatalf("Parse(Marshal(m)): %v\n%s", err, data)
			}
			if !reflect.DeepEqual(export(back), export(m)) {
				t.Errorf("round trip changed the map:\n got %+v\nwant %+v", export(back), export(m))
			}
			again, _ := back.Marshal()
			if !bytes.Equal(again, data) {
				t.Errorf("Marshal not stable:\n%s\nvs\n%s", data, again)
			}
		})
	}
}

// TestClone: a clone shares nothing mutable with its original.
func TestClone(t *testing.T) {
	m := base()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	before, _ := m.Marshal()
	c := m.Clone()
	if !reflect.DeepEqual(export(c), export(m)) {
		t.Fatal("clone differs")
	}
	if c.Lookup("x").Name != m.Lookup("x").Name {
		t.Fatal("validated clone routes differently")
	}
	c.Epoch++
	c.Shards[0].DSN = "postgres://elsewhere/db"
	c.Ranges[0].Shard = "b"
	c.Ranges = append(c.Ranges, shardmap.Range{Lo: 1, Hi: 2, Shard: "zz"})
	after, _ := m.Marshal()
	if !bytes.Equal(before, after) {
		t.Errorf("mutating the clone changed the original:\n%s", after)
	}
	if err := m.Validate(); err != nil {
		t.Errorf("original no longer validates: %v", err)
	}
	if err := c.Validate(); err == nil {
		t.Error("the broken clone validates")
	}
	if m.ShardForBucket(0).Name != "a" {
		t.Error("original's routing changed")
	}
	// Clone of an unvalidated map stays unvalidated.
	u := base().Clone()
	assertPanics(t, func() { u.ShardForBucket(0) })
}

func TestBucketCountsAndRangesOf(t *testing.T) {
	m := base()
	m.Ranges = []shardmap.Range{{0, 99, "a"}, {100, 199, "b"}, {200, 4000, "a"}, {4001, 4095, "c"}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := m.BucketCounts(), map[string]int{"a": 3901, "b": 100, "c": 95}; !reflect.DeepEqual(got, want) {
		t.Errorf("BucketCounts = %v, want %v", got, want)
	}
	if got := m.RangesOf("a"); len(got) != 2 || got[0].Lo != 0 || got[1].Lo != 200 {
		t.Errorf("RangesOf(a) = %v", got)
	}
	if got := m.NextOrdinal(); got != 2 {
		t.Errorf("NextOrdinal = %d, want 2", got)
	}
}

// FuzzParse: arbitrary bytes never panic and errors stay on one line; a map
// that parses survives Marshal → Parse unchanged.
func FuzzParse(f *testing.F) {
	f.Add([]byte(validYAML))
	m, _ := shardmap.Even(64, shards(3))
	data, _ := m.Marshal()
	f.Add(data)
	f.Add([]byte("epoch: 1\nbuckets: 1\nshards: [{name: a, ordinal: 0, dsn: x}]\nranges: [{lo: 0, hi: 0, shard: a}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := shardmap.Parse(data)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		out, err := m.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := shardmap.Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(m)): %v\n%s", err, out)
		}
		if !reflect.DeepEqual(export(back), export(m)) {
			t.Fatalf("round trip changed the map:\n got %+v\nwant %+v", export(back), export(m))
		}
		for b := 0; b < m.Buckets; b += 1 + m.Buckets/64 {
			if m.ShardForBucket(b).Name != back.ShardForBucket(b).Name {
				t.Fatalf("bucket %d routes differently after the round trip", b)
			}
		}
	})
}

// FuzzMarshalRoundTrip: whatever strings a valid map holds (DSNs with
// YAML syntax, newlines, invalid UTF-8, ...), Marshal → Parse gives it back.
// Random bytes rarely form a valid map, so FuzzParse alone seldom reaches
// the round trip.
func FuzzMarshalRoundTrip(f *testing.F) {
	f.Add("postgres://a/db", "", "a", uint64(1), 3)
	f.Add("host=a port=5432 dbname='x y' password=#:{}[]\"\\", "- *x\n: y", "yes", uint64(1<<63), 1)
	f.Add("\xff\xfe\x00\t\r\n", "~", "0x1F", uint64(18446744073709551615), 16)
	f.Fuzz(func(t *testing.T, dsn, pooler, name string, epoch uint64, n int) {
		if dsn == "" || epoch == 0 || n < 1 || n > 64 {
			return
		}
		ss := shards(n)
		ss[0].DSN, ss[0].PoolerDSN = dsn, pooler
		ss[n-1].PoolerDSN = dsn
		if name != "" && len(name) < 64 && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == "" && !strings.HasPrefix(name, "s") {
			ss[0].Name = name
		}
		m, err := shardmap.Even(64, ss)
		if err != nil {
			t.Fatal(err)
		}
		m.Epoch = epoch
		data, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := shardmap.Parse(data)
		if err != nil {
			t.Fatalf("Parse(Marshal(m)): %v\n%s", err, data)
		}
		if !reflect.DeepEqual(export(back), export(m)) {
			t.Fatalf("round trip changed the map:\n got %+v\nwant %+v\n%s", export(back), export(m), data)
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	m, err := shardmap.Even(shardmap.DefaultBuckets, shards(8))
	if err != nil {
		b.Fatal(err)
	}
	key := "0f8fad5bd9cb469fa16570867728950e"
	b.ReportAllocs()
	for b.Loop() {
		sink += m.Lookup(key).Ordinal
	}
}

// TestEmptyShard: a shard may own no buckets only when it says so, and
// AddEmpty adds one (epoch+1, next ordinal, every bucket where it was).
func TestEmptyShard(t *testing.T) {
	m := base()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	next, err := shardmap.AddEmpty(m, shardmap.Shard{Name: "d", Ordinal: -1, DSN: "postgres://d/db"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := next.ShardByName("d")
	if err != nil {
		t.Fatal(err)
	}
	if next.Epoch != 8 || d.Ordinal != 2 || !d.Empty || len(next.Shards) != 4 {
		t.Errorf("AddEmpty: epoch %d, shard %+v, %d shards; want epoch 8, ordinal 2 (the first free), empty, 4 shards", next.Epoch, *d, len(next.Shards))
	}
	if moves, err := shardmap.Diff(m, next); err != nil || len(moves) != 0 {
		t.Errorf("AddEmpty moved buckets: %v %v", moves, err)
	}
	if len(m.Shards) != 3 || m.Epoch != 7 {
		t.Errorf("AddEmpty changed its input: %+v", m)
	}
	if got := next.BucketCounts()["d"]; got != 0 {
		t.Errorf("the empty shard owns %d buckets", got)
	}
	if s, err := next.ShardForSeq(3); err != nil || s.Name != "d" { // ordinal 2 names it
		t.Errorf("ShardForSeq(3): %v %v, want shard d", s, err)
	}

	// Round trip through YAML keeps the mark.
	b, err := next.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "empty: true") {
		t.Errorf("marshalled map lacks empty: true:\n%s", b)
	}
	back, err := shardmap.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Shards, next.Shards) {
		t.Errorf("round trip: %+v != %+v", back.Shards, next.Shards)
	}

	for _, tc := range []struct {
		s    shardmap.Shard
		want string
	}{
		{shardmap.Shard{Name: "b", Ordinal: -1, DSN: "x"}, `"b" is already in the map (epoch 7)`},
		{shardmap.Shard{Name: "e", Ordinal: 5, DSN: "x"}, `ordinal 5 is already used by shard "c"`},
		{shardmap.Shard{Name: "e", Ordinal: -1}, `dsn is empty`},
		{shardmap.Shard{Name: "e f", Ordinal: -1, DSN: "x"}, `may only contain letters`},
	} {
		if _, err := shardmap.AddEmpty(m, tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddEmpty(%+v): %v, want an error mentioning %q", tc.s, err, tc.want)
		}
	}

	// Planning from a map with an empty shard gives it its share and
	// clears the mark; removing it moves nothing.
	planned, err := shardmap.PlanAdd(next, shardmap.Shard{Name: "e", Ordinal: 3, DSN: "postgres://e/db"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range planned.Shards {
		if s.Empty || planned.BucketCounts()[s.Name] < 4096/5 {
			t.Errorf("after PlanAdd: %+v owns %d buckets", s, planned.BucketCounts()[s.Name])
		}
	}
	removed, err := shardmap.PlanRemove(next, "d")
	if err != nil {
		t.Fatal(err)
	}
	if moves, err := shardmap.Diff(next, removed); err != nil || len(moves) != 0 {
		t.Errorf("removing the empty shard moved buckets: %v %v", moves, err)
	}
}
