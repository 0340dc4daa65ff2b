package router

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/store"
)

func TestCoverage(t *testing.T) {
	fenced := func(rs ...store.BucketRange) store.Served {
		return store.Served{Fenced: true, Buckets: 16, Ranges: rs}
	}
	br := func(lo, hi int) store.BucketRange { return store.BucketRange{Lo: lo, Hi: hi} }
	for _, c := range []struct {
		name   string
		served []store.Served
		want   string // "" for covered
	}{
		{"exactly once", []store.Served{fenced(br(0, 3), br(8, 9)), fenced(br(4, 7), br(10, 15))}, ""},
		{"one shard", []store.Served{fenced(br(0, 15))}, ""},
		{"no fence", []store.Served{{}, {}}, ""},
		{"some fences off: the map is trusted", []store.Served{{}, fenced(br(0, 3))}, ""},
		{"no shards", nil, ""},
		{"gap inside", []store.Served{fenced(br(0, 3)), fenced(br(6, 15))}, "buckets 4-5 are served by no shard"},
		{"gap at the start", []store.Served{fenced(br(1, 15))}, "buckets 0-0 are served by no shard"},
		{"gap at the end", []store.Served{fenced(br(0, 7)), fenced(br(8, 13))}, "buckets 14-15 are served by no shard"},
		{"nothing served", []store.Served{fenced(), fenced()}, "buckets 0-15 are served by no shard"},
		{"overlap", []store.Served{fenced(br(0, 9)), fenced(br(8, 15))}, "buckets 8-9 are served by two shards"},
		{"overlap inside", []store.Served{fenced(br(0, 15)), fenced(br(4, 5))}, "buckets 4-5 are served by two shards"},
		{"past the end", []store.Served{{Fenced: true, Buckets: 8, Ranges: []store.BucketRange{br(0, 9)}}}, "past the last bucket 7"},
		{"bucket counts differ", []store.Served{fenced(br(0, 15)), {Fenced: true, Buckets: 8}}, "disagree on the bucket count"},
	} {
		err := coverage(c.served)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want covered", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
