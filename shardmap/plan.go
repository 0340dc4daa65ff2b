package shardmap

import (
	"fmt"
	"slices"
)

// Move says that the inclusive bucket range [Lo, Hi] moves from shard From to
// shard To.
type Move struct {
	Lo   int    `json:"lo"`
	Hi   int    `json:"hi"`
	From string `json:"from"`
	To   string `json:"to"`
}

// Len is the number of buckets that move.
func (mv Move) Len() int { return mv.Hi - mv.Lo + 1 }

func (mv Move) String() string {
	return fmt.Sprintf("buckets %s: %s -> %s", span(mv.Lo, mv.Hi), mv.From, mv.To)
}

// Diff lists, in bucket order, the ranges whose owner differs between two
// validated maps of the same bucket count. Adjacent buckets with the same
// (from, to) pair are coalesced into one Move.
func Diff(old, new *Map) ([]Move, error) {
	old.mustBeValid()
	new.mustBeValid()
	if old.Buckets != new.Buckets {
		return nil, fmt.Errorf("diff: bucket counts differ (%d vs %d); the bucket count is fixed for a cluster's lifetime", old.Buckets, new.Buckets)
	}
	var moves []Move
	for b := 0; b < old.Buckets; b++ {
		from := old.ShardForBucket(b).Name
		to := new.ShardForBucket(b).Name
		if from == to {
			continue
		}
		if n := len(moves); n > 0 && moves[n-1].Hi == b-1 && moves[n-1].From == from && moves[n-1].To == to {
			moves[n-1].Hi = b
			continue
		}
		moves = append(moves, Move{Lo: b, Hi: b, From: from, To: to})
	}
	return moves, nil
}

// PlanAdd returns a map (epoch+1) that adds shard s and rebalances with the
// fewest bucket moves: every shard ends within one bucket of every other, and
// buckets move only from shards above their share to the new shard.
func PlanAdd(m *Map, s Shard) (*Map, error) {
	m.mustBeValid()
	if _, err := m.ShardByName(s.Name); err == nil {
		return nil, fmt.Errorf("plan: shard %q is already in the map", s.Name)
	}
	if _, err := m.ShardByOrdinal(s.Ordinal); err == nil {
		return nil, fmt.Errorf("plan: ordinal %d is already used by shard %q", s.Ordinal, m.Shards[m.byOrdinal[s.Ordinal]].Name)
	}
	shards := append(slices.Clone(m.Shards), s)
	return rebalance(m, shards)
}

// PlanRemove returns a map (epoch+1) without the named shard, its buckets
// spread over the remaining shards so that they end within one bucket of
// each other with the fewest moves.
func PlanRemove(m *Map, name string) (*Map, error) {
	m.mustBeValid()
	i, ok := m.byName[name]
	if !ok {
		return nil, fmt.Errorf("plan: shard %q is not in the map", name)
	}
	if len(m.Shards) == 1 {
		return nil, fmt.Errorf("plan: cannot remove %q, the only shard", name)
	}
	shards := slices.Delete(slices.Clone(m.Shards), i, i+1)
	return rebalance(m, shards)
}

// NextOrdinal returns the smallest ordinal not used in m.
func (m *Map) NextOrdinal() int {
	m.mustBeValid()
	for k := 0; ; k++ {
		if _, used := m.byOrdinal[k]; !used {
			return k
		}
	}
}

// rebalance assigns m's buckets to shards so that counts differ by at most
// one, moving only what must move: each shard keeps min(current, target)
// of its buckets (its lowest ones, so its ranges stay contiguous), and the
// released buckets go, in ascending runs, to the shards below target.
func rebalance(m *Map, shards []Shard) (*Map, error) {
	n := len(shards)
	if n > m.Buckets {
		return nil, fmt.Errorf("plan: %d shards cannot share %d buckets", n, m.Buckets)
	}
	idx := make(map[string]int, n)
	for i, s := range shards {
		idx[s.Name] = i
	}
	owner := make([]int, m.Buckets) // bucket → index in shards, -1 = released
	cur := make([]int, n)
	for b := range owner {
		if i, ok := idx[m.ShardForBucket(b).Name]; ok {
			owner[b] = i
			cur[i]++
		} else {
			owner[b] = -1
		}
	}
	// The remainder buckets go to the shards that hold the most already, so
	// that fewer buckets move; ties broken by ordinal for determinism.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if cur[a] != cur[b] {
			return cur[b] - cur[a]
		}
		return shards[a].Ordinal - shards[b].Ordinal
	})
	target := make([]int, n)
	for rank, i := range order {
		target[i] = m.Buckets / n
		if rank < m.Buckets%n {
			target[i]++
		}
	}
	// Release each donor's highest buckets beyond its target.
	kept := make([]int, n)
	for b := range owner {
		i := owner[b]
		if i < 0 {
			continue
		}
		if kept[i] < target[i] {
			kept[i]++
		} else {
			owner[b] = -1
		}
	}
	// Hand released buckets, in ascending order, to receivers in ordinal order.
	recv := make([]int, 0, n)
	for i := range shards {
		if kept[i] < target[i] {
			recv = append(recv, i)
		}
	}
	slices.SortFunc(recv, func(a, b int) int { return shards[a].Ordinal - shards[b].Ordinal })
	r := 0
	for b := range owner {
		if owner[b] >= 0 {
			continue
		}
		for kept[recv[r]] == target[recv[r]] {
			r++
		}
		owner[b] = recv[r]
		kept[recv[r]]++
	}
	for i := range shards {
		shards[i].Empty = false // every shard gets its share
	}
	out := &Map{Epoch: m.Epoch + 1, Buckets: m.Buckets, Shards: shards}
	for b, i := range owner {
		name := shards[i].Name
		if k := len(out.Ranges); k > 0 && out.Ranges[k-1].Shard == name {
			out.Ranges[k-1].Hi = b
			continue
		}
		out.Ranges = append(out.Ranges, Range{Lo: b, Hi: b, Shard: name})
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return out, nil
}
