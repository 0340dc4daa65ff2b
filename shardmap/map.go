package shardmap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DefaultBuckets is the bucket count of a new cluster.
const DefaultBuckets = 4096

// MaxOrdinal is the largest shard ordinal. Ordinals also stride the global
// sequences (outbox.seq, spawns.seq), so there can never be more than
// SeqStride shards.
const MaxOrdinal = SeqStride - 1

// SeqStride is the increment of outbox.seq and spawns.seq on every shard: on
// the shard with ordinal k they yield k+1, k+1+SeqStride, k+1+2*SeqStride, ...
const SeqStride = 1024

// MaxBuckets bounds the bucket count so that a map's bucket table stays small.
const MaxBuckets = 1 << 20

// Shard is one Postgres database of the cluster.
type Shard struct {
	// Name is unique in the map and stable for the shard's lifetime.
	Name string `yaml:"name" json:"name"`
	// Ordinal is unique in the map, in 0..MaxOrdinal, and never changes: it
	// selects the shard's stride of the global sequences.
	Ordinal int `yaml:"ordinal" json:"ordinal"`
	// DSN connects directly to the shard's Postgres.
	DSN string `yaml:"dsn" json:"dsn"`
	// PoolerDSN optionally connects through the shard's PgBouncer
	// (transaction pooling).
	PoolerDSN string `yaml:"pooler_dsn,omitempty" json:"pooler_dsn,omitempty"`
	// Empty marks a shard that owns no buckets on purpose: one just added,
	// waiting for bucket ranges to be moved to it, or one drained before
	// its removal. Validate requires it to be exact — a shard without
	// ranges must be Empty and an Empty shard may own none — so a shard
	// left out of the ranges by mistake is still an error.
	Empty bool `yaml:"empty,omitempty" json:"empty,omitempty"`
}

// Range assigns the inclusive bucket range [Lo, Hi] to the shard named Shard.
type Range struct {
	Lo    int    `yaml:"lo" json:"lo"`
	Hi    int    `yaml:"hi" json:"hi"`
	Shard string `yaml:"shard" json:"shard"`
}

// Len is the number of buckets in r.
func (r Range) Len() int { return r.Hi - r.Lo + 1 }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// MarshalYAML writes a range on one line: {lo: 0, hi: 1023, shard: shard0}.
func (r Range) MarshalYAML() (any, error) {
	var n yaml.Node
	type plain Range // no MarshalYAML: avoids recursion
	if err := n.Encode(plain(r)); err != nil {
		return nil, err
	}
	n.Style = yaml.FlowStyle
	return &n, nil
}

// Map is a versioned assignment of buckets to shards. A Map is immutable once
// validated; build a changed copy and give it a greater Epoch.
type Map struct {
	// Epoch only grows: a map with a greater epoch supersedes one with a
	// smaller epoch.
	Epoch uint64 `yaml:"epoch" json:"epoch"`
	// Buckets is the number of virtual buckets (B), a power of two fixed
	// when the cluster is created.
	Buckets int     `yaml:"buckets" json:"buckets"`
	Shards  []Shard `yaml:"shards" json:"shards"`
	// Ranges cover 0..Buckets-1 exactly once, sorted by Lo.
	Ranges []Range `yaml:"ranges" json:"ranges"`

	owner     []uint16 // bucket → index into Shards; built by Validate
	byOrdinal map[int]int
	byName    map[string]int
}

// ValidationError lists every problem found in a map, each naming the key,
// shard or bucket at fault.
type ValidationError struct {
	Problems []string
}

func (e *ValidationError) Error() string {
	return "invalid shard map: " + strings.Join(e.Problems, "; ")
}

// ErrNoShard is returned by lookups for a shard name or ordinal not in the map.
var ErrNoShard = errors.New("no such shard")

// Validate checks m and prepares its lookup tables. It reports every problem
// at once: bucket count not a power of two, duplicate or invalid shard names
// and ordinals, ranges naming unknown shards, out-of-range, overlapping or
// missing buckets, shards without buckets not marked Empty, and Empty
// shards that own buckets.
func (m *Map) Validate() error {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	if m.Buckets <= 0 || m.Buckets&(m.Buckets-1) != 0 || m.Buckets > MaxBuckets {
		add("buckets: %d is not a power of two between 1 and %d", m.Buckets, MaxBuckets)
	}
	if m.Epoch == 0 {
		add("epoch: must be at least 1")
	}
	if len(m.Shards) == 0 {
		add("shards: the map has no shards")
	}
	// Every shard's name is registered, even an empty or invalid one, so
	// that one bad name is reported once, not again by each range naming
	// that shard and as a shard without buckets.
	byName := make(map[string]int, len(m.Shards))
	byOrdinal := make(map[int]int, len(m.Shards))
	for i, s := range m.Shards {
		switch {
		case s.Name == "":
			add("shards[%d]: name is empty", i)
		case !validName(s.Name):
			add("shards[%d]: name %q may only contain letters, digits, '_' and '-'", i, s.Name)
		}
		if j, dup := byName[s.Name]; !dup {
			byName[s.Name] = i
		} else if s.Name != "" {
			add("shards[%d]: duplicate name %q (also shards[%d])", i, s.Name, j)
		}
		if s.Ordinal < 0 || s.Ordinal > MaxOrdinal {
			add("shards[%d] %q: ordinal %d is outside 0..%d", i, s.Name, s.Ordinal, MaxOrdinal)
		} else if j, dup := byOrdinal[s.Ordinal]; dup {
			add("shards[%d] %q: duplicate ordinal %d (also shard %q)", i, s.Name, s.Ordinal, m.Shards[j].Name)
		} else {
			byOrdinal[s.Ordinal] = i
		}
		if s.DSN == "" {
			add("shards[%d] %q: dsn is empty", i, s.Name)
		}
	}

	// Ranges are checked only against a usable bucket count and shard list;
	// otherwise every bucket would also be reported as a gap.
	if m.Buckets > 0 && m.Buckets <= MaxBuckets && len(m.Shards) > 0 {
		owner := make([]int32, m.Buckets)
		for i := range owner {
			owner[i] = -1
		}
		used := make([]bool, len(m.Shards))
		usedBy := make([]int, len(m.Shards)) // a range of each shard, for messages
		for i, r := range m.Ranges {
			si, known := byName[r.Shard]
			if !known {
				add("ranges[%d] %s: unknown shard %q", i, r, r.Shard)
				si = -2 // still mark the buckets, so gaps are not reported twice
			} else {
				used[si], usedBy[si] = true, i
			}
			if r.Lo < 0 || r.Hi >= m.Buckets || r.Lo > r.Hi {
				add("ranges[%d] %s: not a bucket range within 0-%d", i, r, m.Buckets-1)
				// Claim the free buckets it meant (clamped, either order),
				// so that the mistake is not reported again as a gap.
				lo, hi := max(min(r.Lo, r.Hi), 0), min(max(r.Lo, r.Hi), m.Buckets-1)
				for b := lo; b <= hi; b++ {
					if owner[b] == -1 {
						owner[b] = -2
					}
				}
				continue
			}
			for b := r.Lo; b <= r.Hi; b++ {
				if owner[b] != -1 {
					first := b
					for b <= r.Hi && owner[b] != -1 {
						b++
					}
					add("ranges[%d] %s (shard %q): %s another range", i, r, r.Shard, bucketsVerb(first, b-1, "overlaps", "overlap"))
					b--
					continue
				}
				owner[b] = int32(si)
			}
		}
		for b := 0; b < m.Buckets; b++ {
			if owner[b] == -1 {
				first := b
				for b < m.Buckets && owner[b] == -1 {
					b++
				}
				add("ranges: %s not assigned to any shard (gap)", bucketsVerb(first, b-1, "is", "are"))
			}
		}
		for i, u := range used {
			// A duplicate or empty name is reported as such already.
			if m.Shards[i].Name == "" || byName[m.Shards[i].Name] != i {
				continue
			}
			switch {
			case !u && !m.Shards[i].Empty:
				add("shards[%d] %q: owns no buckets (mark it empty: true if it waits for buckets to be moved to it)", i, m.Shards[i].Name)
			case u && m.Shards[i].Empty:
				add("shards[%d] %q: marked empty but owns buckets (ranges[%d] %s)", i, m.Shards[i].Name, usedBy[i], m.Ranges[usedBy[i]])
			}
		}
		if len(p) == 0 {
			m.owner = make([]uint16, m.Buckets)
			for b, o := range owner {
				m.owner[b] = uint16(o)
			}
		}
	}
	if len(p) > 0 {
		m.owner = nil
		return &ValidationError{Problems: p}
	}
	m.byName = byName
	m.byOrdinal = byOrdinal
	slices.SortFunc(m.Ranges, func(a, b Range) int { return a.Lo - b.Lo })
	return nil
}

func span(lo, hi int) string {
	if lo == hi {
		return fmt.Sprintf("%d", lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// bucketsVerb says "bucket 7 is" or "buckets 7-9 are".
func bucketsVerb(lo, hi int, singular, plural string) string {
	if lo == hi {
		return fmt.Sprintf("bucket %d %s", lo, singular)
	}
	return fmt.Sprintf("buckets %d-%d %s", lo, hi, plural)
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func (m *Map) mustBeValid() {
	if m.owner == nil {
		panic("shardmap: Map used before a successful Validate")
	}
}

// Bucket returns the bucket of a text key: the value Postgres's PARTITION BY
// HASH computes for it with modulus m.Buckets.
func (m *Map) Bucket(key string) int { return BucketText(key, m.Buckets) }

// BucketInt8 returns the bucket of an integer key.
func (m *Map) BucketInt8(v int64) int { return BucketInt8(v, m.Buckets) }

// BucketText returns the bucket of a text key among n buckets.
func BucketText(key string, n int) int { return int(PartitionHashText(key) % uint64(n)) }

// BucketInt8 returns the bucket of an int8 key among n buckets.
func BucketInt8(v int64, n int) int { return int(PartitionHashInt8(v) % uint64(n)) }

// ShardForBucket returns the shard owning bucket b. It panics if b is out of
// range or m was not validated.
func (m *Map) ShardForBucket(b int) *Shard {
	m.mustBeValid()
	return &m.Shards[m.owner[b]]
}

// ShardIndexForBucket returns the index in m.Shards of the shard owning b.
func (m *Map) ShardIndexForBucket(b int) int {
	m.mustBeValid()
	return int(m.owner[b])
}

// Lookup returns the shard owning a text key.
func (m *Map) Lookup(key string) *Shard { return m.ShardForBucket(m.Bucket(key)) }

// LookupInt8 returns the shard owning an integer key.
func (m *Map) LookupInt8(v int64) *Shard { return m.ShardForBucket(m.BucketInt8(v)) }

// ShardByName returns the shard named name.
func (m *Map) ShardByName(name string) (*Shard, error) {
	m.mustBeValid()
	i, ok := m.byName[name]
	if !ok {
		return nil, fmt.Errorf("shard %q: %w in map epoch %d", name, ErrNoShard, m.Epoch)
	}
	return &m.Shards[i], nil
}

// ShardByOrdinal returns the shard with ordinal k.
func (m *Map) ShardByOrdinal(k int) (*Shard, error) {
	m.mustBeValid()
	i, ok := m.byOrdinal[k]
	if !ok {
		return nil, fmt.Errorf("ordinal %d: %w in map epoch %d", k, ErrNoShard, m.Epoch)
	}
	return &m.Shards[i], nil
}

// OrdinalForSeq returns the ordinal of the shard that generated a global
// sequence value (outbox.seq, spawns.seq).
func OrdinalForSeq(seq int64) (int, error) {
	if seq < 1 {
		return 0, fmt.Errorf("sequence value %d: global sequences start at 1", seq)
	}
	return int((seq - 1) % SeqStride), nil
}

// ShardForSeq returns the shard that generated a global sequence value.
func (m *Map) ShardForSeq(seq int64) (*Shard, error) {
	k, err := OrdinalForSeq(seq)
	if err != nil {
		return nil, err
	}
	return m.ShardByOrdinal(k)
}

// RangesOf returns the ranges owned by the named shard, sorted by Lo.
func (m *Map) RangesOf(name string) []Range {
	var out []Range
	for _, r := range m.Ranges {
		if r.Shard == name {
			out = append(out, r)
		}
	}
	return out
}

// BucketCounts returns how many buckets each shard owns, by name.
func (m *Map) BucketCounts() map[string]int {
	out := make(map[string]int, len(m.Shards))
	for _, s := range m.Shards {
		out[s.Name] = 0
	}
	for _, r := range m.Ranges {
		out[r.Shard] += r.Len()
	}
	return out
}

// Clone returns a deep copy of m, validated if m was.
func (m *Map) Clone() *Map {
	c := &Map{
		Epoch:   m.Epoch,
		Buckets: m.Buckets,
		Shards:  slices.Clone(m.Shards),
		Ranges:  slices.Clone(m.Ranges),
	}
	if m.owner != nil {
		c.owner = slices.Clone(m.owner)
		c.byName = m.byName
		c.byOrdinal = m.byOrdinal
	}
	return c
}

// AddEmpty returns a map (epoch+1) that adds shard s owning no buckets
// (s.Empty set), every bucket staying where it is: the first step of
// adding a shard online, before any range is moved to it. s's name and
// ordinal must be new to m; s.Ordinal < 0 takes m.NextOrdinal().
func AddEmpty(m *Map, s Shard) (*Map, error) {
	m.mustBeValid()
	if s.Ordinal < 0 {
		s.Ordinal = m.NextOrdinal()
	}
	if _, err := m.ShardByName(s.Name); err == nil {
		return nil, fmt.Errorf("add shard: %q is already in the map (epoch %d)", s.Name, m.Epoch)
	}
	if o, err := m.ShardByOrdinal(s.Ordinal); err == nil {
		return nil, fmt.Errorf("add shard %q: ordinal %d is already used by shard %q", s.Name, s.Ordinal, o.Name)
	}
	s.Empty = true
	out := m.Clone()
	out.owner = nil
	out.Epoch = m.Epoch + 1
	out.Shards = append(out.Shards, s)
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("add shard %q: %w", s.Name, err)
	}
	return out, nil
}

// Even builds a map (epoch 1) that splits n buckets into contiguous, equally
// sized ranges over shards, in order; earlier shards take one more bucket
// when n does not divide evenly.
func Even(n int, shards []Shard) (*Map, error) {
	if len(shards) > n && n > 0 {
		return nil, fmt.Errorf("even: %d shards cannot share %d buckets", len(shards), n)
	}
	m := &Map{Epoch: 1, Buckets: n, Shards: slices.Clone(shards)}
	if len(shards) > 0 && n >= len(shards) {
		lo := 0
		for i, s := range shards {
			size := n / len(shards)
			if i < n%len(shards) {
				size++
			}
			m.Ranges = append(m.Ranges, Range{Lo: lo, Hi: lo + size - 1, Shard: s.Name})
			lo += size
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Parse decodes a YAML shard map and validates it. It is strict: unknown or
// duplicate keys, wrong types and anything but exactly one YAML document are
// rejected with a one-line error naming the key and its line.
func Parse(data []byte) (*Map, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var m Map
	if err := dec.Decode(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("decode shard map: empty document")
		}
		return nil, fmt.Errorf("decode shard map: %s", oneLine(err))
	}
	// Strict: a second document would otherwise be ignored silently.
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode shard map: the file must hold exactly one YAML document")
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// oneLine flattens a yaml error (which may list several lines) to one line.
func oneLine(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		// "yaml: unmarshal errors:\n  line 3: field foo not found ..."
		return strings.Join(strings.Fields(strings.Join(te.Errors, "; ")), " ")
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// Marshal encodes m as YAML, ranges sorted by Lo.
func (m *Map) Marshal() ([]byte, error) {
	c := m.Clone()
	sort.Slice(c.Ranges, func(i, j int) bool { return c.Ranges[i].Lo < c.Ranges[j].Lo })
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
