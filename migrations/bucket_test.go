package migrations_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/migrations"
)

// randomKeys returns n keys: a third lowercase uuid hex (the store's ids),
// a third ASCII, a third multibyte UTF-8, of random lengths 0..64 runes.
func randomKeys(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	// Rune ranges from 1-byte to 4-byte UTF-8; no NUL (text cannot hold it),
	// no surrogates.
	ranges := [][2]rune{{0x01, 0x7f}, {0x80, 0x7ff}, {0x800, 0xd7ff}, {0xe000, 0xfffd}, {0x10000, 0x10ffff}}
	keys := make([]string, 0, n)
	for i := 0; i < n; i++ {
		switch i % 3 {
		case 0:
			var b [16]byte
			for j := range b {
				b[j] = byte(r.UintN(256))
			}
			keys = append(keys, hex.EncodeToString(b[:]))
		case 1:
			var sb strings.Builder
			for j, l := 0, r.IntN(65); j < l; j++ {
				sb.WriteByte(byte(0x20 + r.IntN(0x5f)))
			}
			keys = append(keys, sb.String())
		default:
			var sb strings.Builder
			for j, l := 0, r.IntN(65); j < l; j++ {
				rg := ranges[r.IntN(len(ranges))]
				sb.WriteRune(rg[0] + rune(r.IntN(int(rg[1]-rg[0]+1))))
			}
			keys = append(keys, sb.String())
		}
	}
	return keys
}

// Go's bucket must equal the live server's for every key: through the raw
// hashtextextended formula (ARCHITECTURE.md §2), through pgshard_bucket(text) on every
// shard (which reads B from the identity record), and through a real
// PARTITION BY HASH table (the definition we claim to reproduce).
func TestBucketMatchesLiveServer(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	const n = 60_000
	keys := randomKeys(n, 42)
	for _, k := range keys {
		if !utf8.ValidString(k) || strings.ContainsRune(k, 0) {
			t.Fatalf("generator produced an invalid key %q", k)
		}
	}
	// Each shard checks its own share of the keys (every shard's
	// functions are checked, every key once): 60,000 keys on each of them
	// took over the 2-minute bound at load 45.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mismatches := 0
	per := (n + len(m.Shards) - 1) / len(m.Shards)
	for si, s := range m.Shards {
		keys := keys[si*per : min(n, (si+1)*per)]
		conn := connect(t, s.DSN)
		rows, err := conn.Query(ctx, `
			SELECT pgshard_bucket(k), pgshard_bucket(k, 4096),
			       ((hashtextextended(k, 8816678312871386365)::numeric + 18446744073709551616) % 18446744073709551616
			         + 5305509591434766563) % 18446744073709551616 % 4096
			  FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i) ORDER BY i`, keys)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		var viaIdentity, viaArg, viaFormula int
		_, err = pgx.ForEachRow(rows, []any{&viaIdentity, &viaArg, &viaFormula}, func() error {
			want := m.Bucket(keys[i])
			if viaIdentity != want || viaArg != want || viaFormula != want {
				mismatches++
				if mismatches <= 5 {
					t.Errorf("%s: key %q: Go %d, pgshard_bucket %d/%d, formula %d", s.Name, keys[i], want, viaIdentity, viaArg, viaFormula)
				}
			}
			i++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i != len(keys) {
			t.Fatalf("%s: %d rows for %d keys", s.Name, i, len(keys))
		}
	}
	if mismatches != 0 {
		t.Fatalf("%d mismatches between Go and the live server", mismatches)
	}
	t.Logf("%d keys over %d shards: 0 mismatches", n, len(m.Shards))
}

func TestBucketPartitionsAndInt8(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	ctx := ctxT(t)
	conn := connect(t, m.Shards[0].DSN)
	// A real hash-partitioned table with 64 partitions: the partition of
	// each row must be its bucket mod 64.
	const parts = 64
	var ddl strings.Builder
	ddl.WriteString(`CREATE TABLE hp (k text) PARTITION BY HASH (k); CREATE TABLE hpi (k int8) PARTITION BY HASH (k);`)
	for r := 0; r < parts; r++ {
		fmt.Fprintf(&ddl, `CREATE TABLE hp_%d PARTITION OF hp FOR VALUES WITH (MODULUS %d, REMAINDER %d);`, r, parts, r)
		fmt.Fprintf(&ddl, `CREATE TABLE hpi_%d PARTITION OF hpi FOR VALUES WITH (MODULUS %d, REMAINDER %d);`, r, parts, r)
	}
	if _, err := conn.Exec(ctx, ddl.String()); err != nil {
		t.Fatal(err)
	}
	keys := randomKeys(20_000, 7)
	if _, err := conn.Exec(ctx, `INSERT INTO hp SELECT unnest($1::text[])`, keys); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ints := []int64{0, 1, -1, 1 << 31, -(1 << 31), 1<<63 - 1, -1 << 63}
	for len(ints) < 20_000 {
		ints = append(ints, int64(r.Uint64()))
	}
	if _, err := conn.Exec(ctx, `INSERT INTO hpi SELECT unnest($1::int8[])`, ints); err != nil {
		t.Fatal(err)
	}
	// A partition's name ends in its remainder: hp_17 holds remainder 17.
	rows, err := conn.Query(ctx, `SELECT k, split_part(tableoid::regclass::text, '_', 2)::int, pgshard_bucket(k) FROM hp`)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	var remainder, fn int
	seen := 0
	_, err = pgx.ForEachRow(rows, []any{&key, &remainder, &fn}, func() error {
		seen++
		if want := m.Bucket(key); want%parts != remainder || want != fn {
			t.Errorf("text key %q: Go bucket %d (mod 64 = %d), partition %d, pgshard_bucket %d", key, want, want%parts, remainder, fn)
		}
		return nil
	})
	if err != nil || seen != len(keys) {
		t.Fatalf("checked %d of %d text keys (err %v)", seen, len(keys), err)
	}
	rows, err = conn.Query(ctx, `SELECT k, split_part(tableoid::regclass::text, '_', 2)::int, pgshard_bucket(k) FROM hpi`)
	if err != nil {
		t.Fatal(err)
	}
	var v int64
	seen = 0
	_, err = pgx.ForEachRow(rows, []any{&v, &remainder, &fn}, func() error {
		seen++
		if want := m.BucketInt8(v); want%parts != remainder || want != fn {
			t.Errorf("int8 key %d: Go bucket %d (mod 64 = %d), partition %d, pgshard_bucket %d", v, want, want%parts, remainder, fn)
		}
		return nil
	})
	if err != nil || seen != len(ints) {
		t.Fatalf("checked %d of %d int8 keys (err %v)", seen, len(ints), err)
	}
}
