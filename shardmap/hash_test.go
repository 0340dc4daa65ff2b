package shardmap_test

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/shardmap"
)

// goldenRow is one line of testdata/hash_golden.tsv.
type goldenRow struct {
	line       int
	kind       string // "text" or "int8"
	key        string // unescaped
	hash       int64  // as Postgres prints hashtextextended / hashint8extended
	bucket4096 int
	bucket64   int
}

// readGolden loads testdata/hash_golden.tsv. The file is produced by a live
// Postgres from testdata/hash_golden.sql (see its header); it is never
// written by this package's code, so it pins placement independently.
func readGolden(t testing.TB) []goldenRow {
	t.Helper()
	f, err := os.Open("testdata/hash_golden.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []goldenRow
	sc := bufio.NewScanner(f)
	sawHeader := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if !sawHeader {
			if line != "kind\tkey\thashextended\tbucket4096\tbucket64" {
				t.Fatalf("hash_golden.tsv:%d: unexpected column header %q", n, line)
			}
			sawHeader = true
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 5 {
			t.Fatalf("hash_golden.tsv:%d: %d columns, want 5", n, len(cols))
		}
		key, err := copyUnescape(cols[1])
		if err != nil {
			t.Fatalf("hash_golden.tsv:%d: %v", n, err)
		}
		h, err1 := strconv.ParseInt(cols[2], 10, 64)
		b4096, err2 := strconv.Atoi(cols[3])
		b64, err3 := strconv.Atoi(cols[4])
		if err1 != nil || err2 != nil || err3 != nil || (cols[0] != "text" && cols[0] != "int8") {
			t.Fatalf("hash_golden.tsv:%d: malformed row %q", n, line)
		}
		rows = append(rows, goldenRow{line: n, kind: cols[0], key: key, hash: h, bucket4096: b4096, bucket64: b64})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) < 300 {
		t.Fatalf("hash_golden.tsv has %d rows; the golden set is ~350", len(rows))
	}
	return rows
}

// copyUnescape undoes Postgres's COPY text-format escaping (\\ \t \n \r).
func copyUnescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("dangling backslash in %q", s)
		}
		i++
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		default:
			return "", fmt.Errorf("unsupported escape \\%c in %q", s[i], s)
		}
	}
	return b.String(), nil
}

// TestGolden pins placement: every key's hash and buckets equal what a live
// PostgreSQL 15 computed (and what its real hash partitions confirmed).
func TestGolden(t *testing.T) {
	rows := readGolden(t)
	lengths := map[int]bool{}
	for _, r := range rows {
		t.Run(fmt.Sprintf("%d/%s/%.40q", r.line, r.kind, r.key), func(t *testing.T) {
			var h uint64
			var b4096, b64 int
			switch r.kind {
			case "text":
				lengths[len(r.key)] = true
				h = shardmap.HashText(r.key, shardmap.HashPartitionSeed)
				b4096 = shardmap.BucketText(r.key, 4096)
				b64 = shardmap.BucketText(r.key, 64)
				if got := refHashText([]byte(r.key), shardmap.HashPartitionSeed); got != uint64(r.hash) {
					t.Errorf("reference hash = %d, Postgres %d (the fuzz reference is wrong)", int64(got), r.hash)
				}
			case "int8":
				v, err := strconv.ParseInt(r.key, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				h = shardmap.HashInt8(v, shardmap.HashPartitionSeed)
				b4096 = shardmap.BucketInt8(v, 4096)
				b64 = shardmap.BucketInt8(v, 64)
			}
			if int64(h) != r.hash {
				t.Errorf("hashextended = %d, Postgres %d", int64(h), r.hash)
			}
			if b4096 != r.bucket4096 || b64 != r.bucket64 {
				t.Errorf("buckets (4096, 64) = (%d, %d), Postgres (%d, %d)", b4096, b64, r.bucket4096, r.bucket64)
			}
		})
	}
	// The golden set must keep covering every length around lookup3's
	// 12-byte blocks, or it stops proving the tail handling.
	for n := 0; n <= 64; n++ {
		if !lengths[n] {
			t.Errorf("golden set has no text key of %d bytes", n)
		}
	}
}

// TestGoldenMapMethods checks that the Map methods route by the same buckets.
func TestGoldenMapMethods(t *testing.T) {
	m, err := shardmap.Even(4096, shards(3))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range readGolden(t) {
		var b int
		var s *shardmap.Shard
		if r.kind == "text" {
			b, s = m.Bucket(r.key), m.Lookup(r.key)
		} else {
			v, _ := strconv.ParseInt(r.key, 10, 64)
			b, s = m.BucketInt8(v), m.LookupInt8(v)
		}
		if b != r.bucket4096 {
			t.Errorf("line %d: bucket %d, want %d", r.line, b, r.bucket4096)
		}
		if want := m.ShardForBucket(r.bucket4096); s.Name != want.Name {
			t.Errorf("line %d: lookup %q, want %q", r.line, s.Name, want.Name)
		}
	}
}

// The same comparison against real PARTITION BY HASH tables runs on every
// CI build against live shards: migrations' TestBucketPartitionsAndInt8
// (20,000 text and 20,000 int8 keys) and TestBucketMatchesLiveServer
// (60,000 keys, pgshard_bucket on every shard). testdata/partition_check.sql
// is the manual version for any server.

// TestHashInt8Edges checks properties of hashint8extended that follow from
// its definition, beyond the golden values.
func TestHashInt8Edges(t *testing.T) {
	tests := []struct {
		name string
		a, b int64
	}{
		// The fold (lo ^= hi for v >= 0, lo ^= ^hi for v < 0) hashes an int8
		// like the int4 of the folded word; these pairs fold alike (Postgres
		// agrees: see the golden rows for 1, 2^32, max, min, ±2^31).
		{"2^32+1 and 0", 1<<32 + 1, 0},
		{"2^32 and 1", 1 << 32, 1},
		{"-2^32-1 and -2", -1<<32 - 1, -2},
		{"max and -2^31", math.MaxInt64, math.MinInt32},
		{"min and 2^31-1", math.MinInt64, math.MaxInt32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ha := shardmap.HashInt8(tt.a, shardmap.HashPartitionSeed)
			hb := shardmap.HashInt8(tt.b, shardmap.HashPartitionSeed)
			if ha != hb {
				t.Errorf("HashInt8(%d) = %#x, HashInt8(%d) = %#x; the int8 fold makes them equal", tt.a, ha, tt.b, hb)
			}
		})
	}
}

// refHashText is a deliberately literal transcription of
// hash_bytes_extended's unaligned, little-endian path in PostgreSQL's
// src/common/hashfn.c: one byte at a time, C's macros spelled out, no
// helpers shared with the code under test.
func refHashText(k []byte, seed uint64) uint64 {
	rot := func(x uint32, n uint) uint32 { return (x << n) | (x >> (32 - n)) }
	var a, b, c uint32
	length := uint32(len(k))
	a = 0x9e3779b9 + length + 3923095
	b = a
	c = a
	mix := func() {
		a -= c
		a ^= rot(c, 4)
		c += b
		b -= a
		b ^= rot(a, 6)
		a += c
		c -= b
		c ^= rot(b, 8)
		b += a
		a -= c
		a ^= rot(c, 16)
		c += b
		b -= a
		b ^= rot(a, 19)
		a += c
		c -= b
		c ^= rot(b, 4)
		b += a
	}
	final := func() {
		c ^= b
		c -= rot(b, 14)
		a ^= c
		a -= rot(c, 11)
		b ^= a
		b -= rot(a, 25)
		c ^= b
		c -= rot(b, 16)
		a ^= c
		a -= rot(c, 4)
		b ^= a
		b -= rot(a, 14)
		c ^= b
		c -= rot(b, 24)
	}
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		mix()
	}
	for length >= 12 {
		a += uint32(k[0]) + uint32(k[1])<<8 + uint32(k[2])<<16 + uint32(k[3])<<24
		b += uint32(k[4]) + uint32(k[5])<<8 + uint32(k[6])<<16 + uint32(k[7])<<24
		c += uint32(k[8]) + uint32(k[9])<<8 + uint32(k[10])<<16 + uint32(k[11])<<24
		mix()
		k = k[12:]
		length -= 12
	}
	if length >= 11 {
		c += uint32(k[10]) << 24
	}
	if length >= 10 {
		c += uint32(k[9]) << 16
	}
	if length >= 9 {
		c += uint32(k[8]) << 8
	}
	// the lowest byte of c is reserved for the length
	if length >= 8 {
		b += uint32(k[7]) << 24
	}
	if length >= 7 {
		b += uint32(k[6]) << 16
	}
	if length >= 6 {
		b += uint32(k[5]) << 8
	}
	if length >= 5 {
		b += uint32(k[4])
	}
	if length >= 4 {
		a += uint32(k[3]) << 24
	}
	if length >= 3 {
		a += uint32(k[2]) << 16
	}
	if length >= 2 {
		a += uint32(k[1]) << 8
	}
	if length >= 1 {
		a += uint32(k[0])
	}
	final()
	return uint64(b)<<32 | uint64(c)
}

// FuzzHashText compares HashText with refHashText (itself pinned by the
// golden file) on inputs of 0..200 bytes, for the partition seed, seed 0
// (no mixing of the seed) and a seed derived from the input.
func FuzzHashText(f *testing.F) {
	for _, s := range []string{"", "a", "abcdefghijk", "abcdefghijkl", "abcdefghijklm", "\xff\xfe\x80", "日本語", strings.Repeat("é", 40), "0123456789abcdef0123456789abcdef"} {
		f.Add([]byte(s), uint64(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		if len(data) > 200 {
			data = data[:200]
		}
		for _, sd := range []uint64{shardmap.HashPartitionSeed, 0, seed} {
			if got, want := shardmap.HashText(string(data), sd), refHashText(data, sd); got != want {
				t.Fatalf("HashText(%q, %#x) = %#x, reference %#x", data, sd, got, want)
			}
		}
		want := (refHashText(data, shardmap.HashPartitionSeed) + 0x49a0f4dd15e5a8e3) % 4096
		if got := shardmap.BucketText(string(data), 4096); uint64(got) != want {
			t.Fatalf("BucketText(%q, 4096) = %d, reference %d", data, got, want)
		}
	})
}

// sink keeps the compiler from discarding benchmarked results.
var sink int

func BenchmarkBucketText(b *testing.B) {
	key := "0f8fad5bd9cb469fa16570867728950e" // a 32-char execution id
	b.ReportAllocs()
	for b.Loop() {
		sink += shardmap.BucketText(key, shardmap.DefaultBuckets)
	}
}

func BenchmarkBucketInt8(b *testing.B) {
	b.ReportAllocs()
	v := int64(1234567890123)
	for b.Loop() {
		sink += shardmap.BucketInt8(v, shardmap.DefaultBuckets)
	}
}
