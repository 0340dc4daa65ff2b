// Package merge executes a fan-out's merge: the analyzer (proxy/route)
// plans it as a route.Merge value, the proxy reads every shard's answer
// and hands the rows to a Run as Sources; Run writes the client's
// RowDescription and rows into the client's output buffer. It knows no
// session, backend connection or pool: a Source is one shard's answer a
// row at a time, the output is a buffer and a flush. Values compare and
// encode as package pgvalue says.
//
//	Rows:   shard0 ─┐
//	        shard1 ─┼─ k-way merge by OrderBy ─ [dedup] ─ OFFSET ─ LIMIT ─▶ client
//	        shard2 ─┘  (one row per shard in memory)
//
//	Groups: shard0 ─┐  rows sorted by the group key
//	        shard1 ─┼─ equal keys combined ─ HAVING ─ [sort, bounded] ─ OFFSET ─ LIMIT ─▶ client
//	        shard2 ─┘  (one group in memory; Run.GroupLimit when sorted)
//
//	merge.go   Run, Source, ShardFormats (the formats to ask the shards
//	           for), Answer, Description; Answer hands the Run to a
//	           rowMerge or a groupMerge
//	rows.go    rowMerge: the k-way merge of rows; row comparison by sort
//	           keys (Run's, groups compare their keys with it too)
//	groups.go  groupMerge: aggregates combined and finished (string_agg
//	           and count(DISTINCT x) from the shards' arrays of values;
//	           sums and averages of intervals in the shards'
//	           IntervalStyle), the bounded sort after grouping
//	having.go  groupMerge's HAVING over merged groups, constants and Bind
//	           parameters
package merge
