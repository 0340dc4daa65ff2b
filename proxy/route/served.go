package route

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/jackc/pgx/v5"
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"

	"github.com/pgshard/pgshard/shardmap"
)

// The served form of a read of every shard: the per-shard statement with
// each keyed table read only in the buckets its shard serves, so that a
// range being moved — copied to its destination at the move's start,
// deleted from its source at its clean-up — is read on one shard only.
//
//	FROM executions e            →  FROM (SELECT * FROM executions
//	                                        WHERE <bucket of executions.id> <@ <served>) AS e
//
// A subquery in FROM keeps what clients see: Postgres takes a column's
// table and attribute for RowDescription from inside it
// (markTargetListOrigins), and SELECT * keeps the table's columns in
// order. <served> is an uncorrelated scalar subquery of the fence: one
// InitPlan per table reference and statement, not a probe per row; a
// fence that is off serves every bucket. Checked (servedCheck), it is
// migration 0015's pgshard_fence_served_by with the map the statement
// was routed by: the shard raises PS002 before the first row of the
// table leaves it when the buckets it serves are not the ones that map
// gives it — a range move flipping between the shards' snapshots, or a
// map behind the shards — so that parts that all pass cover every bucket
// exactly once; unchecked, 0008's pgshard_fence_served (a shard migrated
// before 0015). The key's bucket is computed as the map computes it, the
// bucket count (fixed for a cluster's life) a constant (servedPred).
// Tables placed by a seq key only are read whole.

// servedSet is the buckets this shard serves to reads, every one when its
// fence is off, unchecked.
const servedSet = `coalesce((SELECT s.served FROM pgshard_fence_served() s), '{[0,)}'::pg_catalog.int4multirange)`

// servedCheck is the served set checked against the map m: its epoch,
// and its ranges as parallel arrays of first buckets, last buckets and
// owners (shard names are letters, digits, '_' and '-': no quoting
// inside the array literals).
func servedCheck(m *shardmap.Map) string {
	var los, his, owners strings.Builder
	for i, r := range m.Ranges {
		if i > 0 {
			los.WriteByte(',')
			his.WriteByte(',')
			owners.WriteByte(',')
		}
		los.WriteString(strconv.Itoa(r.Lo))
		his.WriteString(strconv.Itoa(r.Hi))
		owners.WriteString(r.Shard)
	}
	return fmt.Sprintf(`coalesce((SELECT pgshard_fence_served_by(%d, '{%s}'::pg_catalog.int4[], '{%s}'::pg_catalog.int4[], '{%s}'::pg_catalog.text[])), '{[0,)}'::pg_catalog.int4multirange)`,
		m.Epoch, los.String(), his.String(), owners.String())
}

// servedBy is what a served form filters by: the bucket count and the
// served set's expression (servedSet or servedCheck).
type servedBy struct {
	nb  int
	set string
}

// servedPred is the filter of table t's rows (rel: its relation name)
// among by.nb buckets, by by.set: the key's bucket as shardmap computes it (Postgres's
// partition hash, hashtextextended or hashint8extended with
// HashPartitionSeed, plus HashCombineConst, modulo nb), written inline
// with nb a constant so that it folds to one hash per row. Migration
// 0004's pgshard_bucket is not inlined (STRICT around a CASE), nor is
// 0008's pgshard_fence_bucket given the bucket count by a subquery: on a
// quiet shard a 200,000-row count took 280 and 180 ms with them, 25 ms
// with this predicate, 35 ms unfiltered (parallel plans either way).
func servedPred(t *tableInfo, rel string, by servedBy) *pg.Node {
	k := t.keys[t.place]
	col, hashFn, cast := pgx.Identifier{rel, k.col}.Sanitize(), "hashtextextended", "text"
	if k.typ == KeyInt8 {
		hashFn, cast = "hashint8extended", "int8"
	}
	mask := uint64(by.nb - 1)
	bucket := fmt.Sprintf("((((pg_catalog.%s(%s::%s, %d) & %d) + %d) & %d)::int4)",
		hashFn, col, cast, int64(shardmap.HashPartitionSeed), mask, shardmap.HashCombineConst&mask, mask)
	return mustExpr(bucket + " <@ " + by.set)
}

// servedForm returns a copy of the read stmt whose keyed tables are read
// in the buckets the shard serves, or nil when it reads none.
func (sc *compiled) servedForm(stmt *pg.Node, by servedBy) *pg.Node {
	out := proto.Clone(stmt).(*pg.Node)
	ctes := map[string]bool{} // a CTE of the statement shadows a table of its name
	inspect(out, func(n *pg.Node) bool {
		if c := n.GetCommonTableExpr(); c != nil {
			ctes[c.Ctename] = true
		}
		return true
	})
	var at []*pg.Node
	inspect(out, func(n *pg.Node) bool {
		if rv := n.GetRangeVar(); rv != nil && !(rv.Schemaname == "" && ctes[rv.Relname]) {
			if t := sc.tables[rv.Relname]; t != nil && t.place >= 0 && !isCatalog(rv.Schemaname, rv.Relname) {
				at = append(at, n)
			}
		}
		return true
	})
	if len(at) == 0 {
		return nil
	}
	for _, n := range at {
		rv := n.GetRangeVar()
		t := sc.tables[rv.Relname]
		alias := rv.Alias
		if alias == nil {
			alias = &pg.Alias{Aliasname: rv.Relname}
		}
		inner := proto.Clone(rv).(*pg.RangeVar)
		inner.Alias = nil
		n.Node = &pg.Node_RangeSubselect{RangeSubselect: &pg.RangeSubselect{
			Subquery: &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: &pg.SelectStmt{
				TargetList:  []*pg.Node{starTarget()},
				FromClause:  []*pg.Node{{Node: &pg.Node_RangeVar{RangeVar: inner}}},
				WhereClause: servedPred(t, rv.Relname, by),
			}}},
			Alias: alias,
		}}
	}
	return out
}

// starTarget is the select list entry *.
func starTarget() *pg.Node {
	star := &pg.Node{Node: &pg.Node_ColumnRef{ColumnRef: &pg.ColumnRef{Fields: []*pg.Node{{Node: &pg.Node_AStar{AStar: &pg.A_Star{}}}}}}}
	return &pg.Node{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: star}}}
}

// servedCache is a statement's served form of one per-shard text,
// checked or not.
type servedCache struct {
	base, sql string
	checked   bool
	err       error
}

// ServedSQL returns the served form of base — the text a shard runs for
// st's read of every shard: Merge.SQL, a Merge.ShardSQL entry, or st.SQL
// — or "" when base reads no keyed table (or is not a read, or does not
// parse: the shard says so); checked, its served sets are checked against
// r's map (servedCheck). A read of keyed tables whose served form cannot
// be written is an error (0A000): run as it is, it could read a moving
// range on both shards. It is built once per statement, base and form and
// kept in st (a parse and a deparse; only shards whose fence is on read
// it).
func (r *Table) ServedSQL(st *Statement, base string, checked bool) (string, error) {
	if c := (*servedCache)(atomic.LoadPointer(&st.served)); c != nil && c.base == base && c.checked == checked {
		return c.sql, c.err
	}
	by := servedBy{nb: r.pl.m.Buckets, set: servedSet}
	if checked {
		by.set = r.servedCheck()
	}
	c := &servedCache{base: base, checked: checked}
	c.sql, c.err = r.sc.servedText(base, by)
	atomic.StorePointer(&st.served, unsafe.Pointer(c))
	return c.sql, c.err
}

// unservable is the error of a read of keyed tables whose served form
// could not be written.
func unservable(err error) error {
	return &Refusal{SQLState: "0A000",
		Message: "pgshard cannot write this read of every shard so that each shard reads only the buckets it serves (the shards' fence is on)",
		Detail:  err.Error(),
		Hint:    "Write the read another way (a simpler expression), or read each shard with /* pgshard:shard=NAME */."}
}

// servedCheck is servedCheck of r's map, built once.
func (r *Table) servedCheck() string {
	r.checkOnce.Do(func() { r.check = servedCheck(r.pl.m) })
	return r.check
}

// servedText is the served form of the one statement sql, a read (a
// SELECT, or COPY ... TO of a table or a query).
func (sc *compiled) servedText(sql string, by servedBy) (string, error) {
	res, err := pg.Parse(sql)
	if err != nil || len(res.Stmts) != 1 {
		return "", nil
	}
	n := res.Stmts[0].Stmt
	if cp := n.GetCopyStmt(); cp != nil {
		return sc.copyServed(cp, by)
	}
	if n.GetSelectStmt() == nil {
		return "", nil
	}
	sf := sc.servedForm(n, by)
	if sf == nil {
		return "", nil
	}
	out, err := deparse(sf)
	if err != nil {
		return "", unservable(err)
	}
	return out, nil
}

// copyServed is the served form of a COPY ... TO STDOUT: COPY (the read,
// filtered) TO STDOUT with the statement's options.
func (sc *compiled) copyServed(cp *pg.CopyStmt, by servedBy) (string, error) {
	if cp.IsFrom {
		return "", nil
	}
	q := cp.Query
	if q == nil {
		if cp.Relation == nil {
			return "", nil
		}
		q = selectCols(cp.Relation, cp.Attlist)
	}
	sf := sc.servedForm(q, by)
	if sf == nil {
		return "", nil
	}
	out, err := deparse(&pg.Node{Node: &pg.Node_CopyStmt{CopyStmt: &pg.CopyStmt{Query: sf, Options: cp.Options}}})
	if err != nil {
		return "", unservable(err)
	}
	return out, nil
}
