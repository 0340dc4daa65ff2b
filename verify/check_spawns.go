package verify

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// spawns checks that every spawn intent (a final row, or one the relay
// acked) is a child of a committed commit of its parent, and that every
// committed child exists exactly once (one seq, pending or acked). A row
// left after the quiesce is a liveness failure.
func (ck *checker) spawns() {
	w := ck.w
	for _, id := range w.exeOrder {
		e := w.exes[id]
		seqs := map[string]map[int64][]string{} // child → seq → where
		seen := func(child string, seq int64, where string) {
			m := seqs[child]
			if m == nil {
				m = map[int64][]string{}
				seqs[child] = m
			}
			m[seq] = append(m[seq], where)
		}
		pending := map[string][]RowRef{}
		for _, s := range e.spawnRows {
			ck.count(InvSpawns, 1)
			rr := RowRef{Shard: s.shard, Table: "spawns", Key: fmt.Sprintf("seq=%d", s.r.Seq), Note: "child " + s.r.ChildID}
			seen(s.r.ChildID, s.r.Seq, "row on "+s.shard)
			pending[s.r.ChildID] = append(pending[s.r.ChildID], rr)
			var d spawnDoc
			if err := decodeDoc(s.r.Context, &d); err != nil || d.Op == "" {
				ck.add(InvSpawns, id, fmt.Sprintf("spawn row seq %d: context is not {\"op\":...}", s.r.Seq), nil, []RowRef{rr})
				continue
			}
			c := w.commits[d.Op]
			switch {
			case c == nil || c.Exe != id:
				ck.add(InvSpawns, id, fmt.Sprintf("spawn row seq %d (child %s) names op %q, which is not a commit of %s", s.r.Seq, s.r.ChildID, d.Op, id), nil, []RowRef{rr})
			case c.st != present:
				ck.add(InvSpawns, id, fmt.Sprintf("spawn row seq %d (child %s) was written by %s, which did not commit%s", s.r.Seq, s.r.ChildID, c.ID, c.wholly()),
					[]OpRef{c.ref("the spawner")}, []RowRef{rr})
			case !contains(c.Spawns, s.r.ChildID):
				ck.add(InvSpawns, id, fmt.Sprintf("spawn row seq %d: child %s is not a spawn of %s", s.r.Seq, s.r.ChildID, c.ID),
					[]OpRef{c.ref("the op named")}, []RowRef{rr})
			default:
				if i := slices.Index(c.Spawns, s.r.ChildID); i < len(c.SpawnDigests) && c.SpawnDigests[i] != "" {
					ck.count(InvSpawns, 1)
					got, _ := spawnDigest(s.r.RootPath, s.r.Context)
					if want := c.SpawnDigests[i]; got != want {
						ck.add(InvSpawns, id, fmt.Sprintf("spawn row seq %d (child %s): root_path and context have digest %s, but %s wrote %s: the row does not hold what its writer wrote",
							s.r.Seq, s.r.ChildID, got, c.ID, want), []OpRef{c.ref("the spawner")}, []RowRef{rr})
					}
				}
			}
		}
		for _, a := range e.spawnAcks {
			ck.count(InvSpawns, 1)
			seen(a.Child, a.Seq, "ack "+a.ID)
			cands := w.spawners[id+"\x00"+a.Child]
			ok, maybe := false, false
			for _, c := range cands {
				ok = ok || c.st == present
				maybe = maybe || c.st == unresolved
			}
			if !ok && maybe {
				ck.skip(id, InvSpawns, fmt.Sprintf("ack_spawn %s acked child %s, spawned only by unresolved commits", a.ID, a.Child))
				continue
			}
			if !ok {
				ck.add(InvSpawns, id, fmt.Sprintf("ack_spawn %s acked seq %d (child %s), which no committed commit of %s spawned", a.ID, a.Seq, a.Child, id),
					append([]OpRef{ref(a, "")}, refsOf(cands, "spawns it, did not commit")...), nil)
			}
		}
		for _, c := range e.chain {
			for _, ch := range c.Spawns {
				ck.count(InvSpawns, 1)
				ck.count(InvLiveness, 1) // acked after the quiesce
				m := seqs[ch]
				switch {
				case len(m) == 0:
					ck.add(InvSpawns, id, fmt.Sprintf("child %s spawned by %s has no spawn intent (no row, never acked)%s", ch, c.ID, c.wholly()), []OpRef{c.ref("the spawner")}, nil)
				case len(m) > 1 && !ck.movedCopies(id, slices.Collect(maps.Keys(m))):
					// Copies a move made (the spawner's range moved:
					// each copy numbered from its destination's sequence,
					// redelivered like an outbox event) are one intent.
					var parts []string
					for seq, where := range m {
						parts = append(parts, fmt.Sprintf("seq %d (%s)", seq, strings.Join(where, ", ")))
					}
					sort.Strings(parts)
					ck.add(InvSpawns, id, fmt.Sprintf("child %s spawned by %s has %d spawn intents: %s", ch, c.ID, len(m), strings.Join(parts, "; ")),
						[]OpRef{c.ref("the spawner")}, pending[ch])
				case len(pending[ch]) > 0:
					ck.add(InvLiveness, id, fmt.Sprintf("spawn intent of child %s (by %s) was never acked", ch, c.ID), []OpRef{c.ref("the spawner")}, pending[ch])
				}
			}
		}
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
