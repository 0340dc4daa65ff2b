package verify

import (
	"fmt"
	"sort"
	"strings"
)

// seqStride is the stride of outbox.seq and spawns.seq: on the shard with
// ordinal k they are k+1 modulo seqStride (ARCHITECTURE.md §2).
const seqStride = 1024

// placement checks every row against the map: it sits on the shard whose
// ranges own its bucket (the bucket the shard itself computed), its key is
// on one shard only, outbox and spawns seqs are on their shard's stride,
// and each shard's identity record matches its map entry.
func (ck *checker) placement() {
	w := ck.w
	m := w.s.Map
	byName := map[string]MapShard{}
	for _, s := range m.Shards {
		byName[s.Name] = s
	}
	for _, sh := range w.s.Shards {
		ck.count(InvPlacement, 1)
		ms, inMap := byName[sh.Name]
		idRow := RowRef{Shard: sh.Name, Table: "pgshard_identity", Key: "singleton"}
		switch {
		case !inMap:
			ck.add(InvPlacement, "", fmt.Sprintf("shard %s of the state is not in the map", sh.Name), nil, nil)
		case sh.Identity == nil:
			ck.add(InvPlacement, "", fmt.Sprintf("shard %s has no identity record", sh.Name), nil, []RowRef{idRow})
		default:
			id := sh.Identity
			var p []string
			if id.Name != sh.Name {
				p = append(p, fmt.Sprintf("it says it is shard %q", id.Name))
			}
			if id.Ordinal != ms.Ordinal {
				p = append(p, fmt.Sprintf("ordinal %d, the map says %d", id.Ordinal, ms.Ordinal))
			}
			if id.Buckets != m.Buckets {
				p = append(p, fmt.Sprintf("%d buckets, the map has %d", id.Buckets, m.Buckets))
			}
			if id.MapEpoch > m.Epoch {
				p = append(p, fmt.Sprintf("map epoch %d, newer than the map's %d", id.MapEpoch, m.Epoch))
			}
			if len(p) > 0 {
				ck.add(InvPlacement, "", fmt.Sprintf("the identity record of shard %s disagrees with the map: %s", sh.Name, strings.Join(p, "; ")), nil, []RowRef{idRow})
			}
		}
	}
	// first: (table, key) → the shard it was first seen on; dups: the
	// shards of a key seen more than once, in the order seen.
	type rowKey struct{ table, key string }
	first := map[rowKey]string{}
	dups := map[rowKey][]string{}
	place := func(shard, table, key, exeID string, bucket int) {
		ck.count(InvPlacement, 1)
		rk := rowKey{table, key}
		if s0, ok := first[rk]; ok {
			if dups[rk] == nil {
				dups[rk] = []string{s0}
			}
			dups[rk] = append(dups[rk], shard)
		} else {
			first[rk] = shard
		}
		if bucket == NoBucket {
			return // an unreadable outbox row: the outbox check reports it
		}
		if owner := w.mp.owner(bucket); owner != shard {
			where := "no shard"
			if owner != "" {
				where = "shard " + owner
			}
			ck.add(InvPlacement, exeID, fmt.Sprintf("%s row %s is on shard %s, but its bucket %d belongs to %s", table, key, shard, bucket, where),
				nil, []RowRef{{Shard: shard, Table: table, Key: key, Note: fmt.Sprintf("bucket %d", bucket)}})
		}
	}
	stride := func(shard, table string, seq int64) {
		ms, ok := byName[shard]
		if !ok {
			return
		}
		if want := int64(ms.Ordinal+1) % seqStride; ((seq%seqStride)+seqStride)%seqStride != want {
			ck.add(InvPlacement, "", fmt.Sprintf("%s seq %d on shard %s (ordinal %d) is off its stride: want seq ≡ %d (mod %d)", table, seq, shard, ms.Ordinal, want, seqStride),
				nil, []RowRef{{Shard: shard, Table: table, Key: fmt.Sprintf("seq=%d", seq)}})
		}
	}
	for _, sh := range w.s.Shards {
		for _, r := range sh.Executions {
			place(sh.Name, "executions", "id="+r.ID, r.ID, r.Bucket)
		}
		for _, r := range sh.Processed {
			place(sh.Name, "processed_events", "execution_id="+r.ExecutionID+" event_id="+r.EventID, r.ExecutionID, r.Bucket)
		}
		for _, r := range sh.Timers {
			place(sh.Name, "timers", "execution_id="+r.ExecutionID+" path="+r.Path, r.ExecutionID, r.Bucket)
		}
		for _, r := range sh.Trace {
			place(sh.Name, "trace", fmt.Sprintf("execution_id=%s idx=%d", r.ExecutionID, r.Idx), r.ExecutionID, r.Bucket)
		}
		for _, r := range sh.Spawns {
			place(sh.Name, "spawns", fmt.Sprintf("seq=%d", r.Seq), r.ParentID, r.Bucket)
			stride(sh.Name, "spawns", r.Seq)
		}
		for _, r := range sh.Outbox {
			from, _ := outboxFrom(r.Event)
			place(sh.Name, "outbox", fmt.Sprintf("seq=%d", r.Seq), from, r.Bucket)
			stride(sh.Name, "outbox", r.Seq)
		}
	}
	keys := map[string][]string{} // table \x00 key → shards, of the keys seen more than once
	ks := make([]string, 0)
	for rk, shards := range dups {
		k := rk.table + "\x00" + rk.key
		keys[k] = shards
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		table, key, _ := strings.Cut(k, "\x00")
		var rows []RowRef
		for _, s := range keys[k] {
			rows = append(rows, RowRef{Shard: s, Table: table, Key: key})
		}
		ck.add(InvPlacement, "", fmt.Sprintf("%s row %s exists %d times (%s): every row must exist once", table, key, len(keys[k]), strings.Join(keys[k], ", ")), nil, rows)
	}
}
