package route_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestCacheSharedStatement: a hit returns the very *Statement of the miss,
// also when many goroutines analyze the same texts at once.
func TestCacheSharedStatement(t *testing.T) {
	// Large enough that nothing is evicted (the cache is split in shards,
	// each bounded on its own).
	r, err := route.New(testMap(t), testSchema(t, "default"), route.Options{CacheSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, 32)
	for i := range texts {
		texts[i] = fmt.Sprintf("SELECT data FROM executions WHERE id = $1 AND version = %d", i)
	}
	const workers = 8
	got := make([][]*route.Statement, workers)
	g, _ := errgroup.WithContext(context.Background())
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			got[w] = make([]*route.Statement, len(texts))
			for round := 0; round < 20; round++ {
				for i, q := range texts {
					st, err := r.Analyze(q)
					if err != nil {
						return err
					}
					if got[w][i] == nil {
						got[w][i] = st
					} else if got[w][i] != st {
						return fmt.Errorf("worker %d: text %d analyzed twice while cached", w, i)
					}
					if d := r.Route(st, [][]byte{[]byte("abc")}, nil, nil); d.Kind != route.DestShard {
						return fmt.Errorf("route: %+v", d)
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for w := 1; w < workers; w++ {
		for i := range texts {
			if got[w][i] != got[0][i] {
				t.Fatalf("text %d: workers 0 and %d hold different analyses", i, w)
			}
		}
	}
	if n := r.CacheLen(); n != len(texts) {
		t.Errorf("CacheLen = %d, want %d", n, len(texts))
	}
}

// TestCacheBounded: the cache never holds more than its size, keeps texts
// in use over texts seen once, and skips texts that must not fill it.
func TestCacheBounded(t *testing.T) {
	const size = 128
	r, err := route.New(testMap(t), testSchema(t, "default"), route.Options{CacheSize: size, MaxCachedSQL: 200})
	if err != nil {
		t.Fatal(err)
	}
	hot := "SELECT data FROM executions WHERE id = $1"
	hotSt, _ := r.Analyze(hot)
	for i := 0; i < 20*size; i++ {
		if _, err := r.Analyze(fmt.Sprintf("SELECT data FROM executions WHERE id = 'k%d'", i)); err != nil {
			t.Fatal(err)
		}
		// Used between any two misses, the hot statement always has its
		// second chance when the clock hand reaches it.
		if st, _ := r.Analyze(hot); st != hotSt {
			t.Fatalf("after %d one-off texts the hot statement was evicted", i)
		}
		if n := r.CacheLen(); n > size {
			t.Fatalf("CacheLen = %d > %d", n, size)
		}
	}
	before := r.CacheLen()
	long := "SELECT data FROM executions WHERE id = '" + strings.Repeat("x", 300) + "'"
	a, _ := r.Analyze(long)
	b, _ := r.Analyze(long)
	if a == b {
		t.Error("a text longer than MaxCachedSQL was cached")
	}
	for i := 0; i < 10; i++ {
		st, _ := r.Analyze(fmt.Sprintf("SET LOCAL pgshard.key = 'key-%d'", i))
		if st.Kind != route.KindSetLocal || st.SetValue != fmt.Sprintf("key-%d", i) {
			t.Fatalf("SET LOCAL pgshard.key: %+v", st)
		}
	}
	if r.CacheLen() != before {
		t.Errorf("SET LOCAL pgshard.key texts filled the cache: %d → %d", before, r.CacheLen())
	}
}

func TestCacheDisabled(t *testing.T) {
	r, err := route.New(testMap(t), testSchema(t, "default"), route.Options{CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Analyze("SELECT 1")
	b, _ := r.Analyze("SELECT 1")
	if a == b || r.CacheLen() != 0 {
		t.Error("a disabled cache cached")
	}
}
