package route

import (
	"math/bits"

	"github.com/pgshard/pgshard/shardmap"
)

// maxShards bounds a map's shard count: ordinals are unique in 0..MaxOrdinal.
const maxShards = shardmap.MaxOrdinal + 1

// sset is a set of shard indexes, or "all shards" (all). A value type
// without pointers, so that evaluating a plan does not allocate.
type sset struct {
	all bool
	w   [maxShards / 64]uint64
}

func setAll() sset { return sset{all: true} }

func setOne(i int) sset {
	var s sset
	s.w[i>>6] |= 1 << (uint(i) & 63)
	return s
}

func (s *sset) empty() bool {
	if s.all {
		return false
	}
	for _, w := range s.w {
		if w != 0 {
			return false
		}
	}
	return true
}

// one returns the only member of s, or -1 when s is all, empty or larger.
func (s *sset) one() int {
	if s.all {
		return -1
	}
	found := -1
	for i, w := range s.w {
		if w == 0 {
			continue
		}
		if found >= 0 || w&(w-1) != 0 {
			return -1
		}
		found = i<<6 + bits.TrailingZeros64(w)
	}
	return found
}

func (s *sset) has(i int) bool { return s.all || s.w[i>>6]&(1<<(uint(i)&63)) != 0 }

func (s *sset) and(o *sset) {
	if o.all {
		return
	}
	if s.all {
		*s = *o
		return
	}
	for i := range s.w {
		s.w[i] &= o.w[i]
	}
}

func (s *sset) or(o *sset) {
	if s.all {
		return
	}
	if o.all {
		*s = *o
		return
	}
	for i := range s.w {
		s.w[i] |= o.w[i]
	}
}

// members lists s's shard indexes (n = the map's shard count, for all).
func (s *sset) members(n int) []int {
	var out []int
	for i := 0; i < n; i++ {
		if s.has(i) {
			out = append(out, i)
		}
	}
	return out
}
