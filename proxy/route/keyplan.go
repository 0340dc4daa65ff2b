package route

import "strings"

// A plan is what Analyze leaves for Route: everything that depends only on
// the statement text is decided once; Route only decodes the parameters
// that carry keys, hashes them and combines shard sets.
//
//	statement ─► refs (each reference to a keyed table, or a keyed
//	             function argument, inserted row, assigned key)
//	          ─► groups (refs whose keys are equal: joined on the key
//	             in an inner join or WHERE) with a constraint tree of
//	             key sources (=, IN, AND, OR)
//	          ─► edges (group A's rows that matter are limited by group
//	             B's: outer join, correlated subquery, IN (SELECT ...))
//	Route:    sources ─► values ─► shard sets ─► per-group sets ─► Dest

// source is one place a key value comes from: a constant or a $n, with the
// casts applied to it, compared with (or stored into) a key of type key.
type source struct {
	param int // 1-based $n; 0 for a constant
	// lit is the 1-based literal slot of a normalized text's constant (its
	// value is the text's, in Route's input); 0 otherwise. Its expr is then
	// what follows the literal ("::text"): see appendExpr.
	lit   int
	cast  vtype   // the cast applied directly to $n ($1::int8), vtNone if none
	chain []vtype // further casts around it, innermost first
	key   KeyType
	// insert: the value is stored as a key (INSERT, SET key = ...): NULL is
	// refused instead of matching no row.
	insert bool
	// what the key column is ("executions.id") and the SQL of the value
	// ("$1::text"), for reasons
	col, expr string
	konst     kval // a constant's value, already converted (param == 0)
	table     string
}

// desc is "column = expression", for reasons.
func (s *source) desc(lits []literal) string { return s.col + " = " + s.exprText(lits) }

// exprText is the source's SQL ("$1::text", "'abc'").
func (s *source) exprText(lits []literal) string {
	if s.lit == 0 {
		return s.expr
	}
	return string(s.appendExpr(nil, lits))
}

// appendExpr appends the source's SQL: a literal slot is rendered as
// exprText renders the constant it stands for.
func (s *source) appendExpr(b []byte, lits []literal) []byte {
	if s.lit > 0 && s.lit <= len(lits) {
		b = appendConstExpr(b, lits[s.lit-1].v)
	}
	return append(b, s.expr...)
}

type cop uint8

const (
	cSrc  cop = iota // a key source
	cAnd             // all kids hold: intersection
	cOr              // any kid holds: union
	cAll             // no constraint: every shard
	cNone            // no row, or a row that follows the statement: no shard needed
)

// cnode is a constraint on the keys of a group, as shard sets combine.
type cnode struct {
	op   cop
	src  *source
	kids []*cnode
	note string // why cAll / cNone, for explanations
}

// group is a set of refs whose keys are equal in every row that matters.
type group struct {
	expr  *cnode // nil: unconstrained (every shard)
	write bool   // it writes (or locks, or calls a keyed function)
	coloc int    // co-location class: groups joined on the key
	desc  string // "executions e, timers t"
	sub   string // why a subquery reads it from every shard at once (tref.sub)
	// leaf is the branch of a top-level set operation its refs are in
	// (topInfo.leafOf; -1: none, or refs in several).
	leaf int
}

// plan is the routing plan of one statement.
type plan struct {
	groups []group
	edges  [][2]int // groups[e[1]] ∩= groups[e[0]]
	hint   *hintPlan

	write     bool   // changes data or locks rows: never fans out
	writeWhat string // "UPDATE executions", for messages
	// notReadOnly says why a key-less read may not fan out (a function
	// that may write, FOR UPDATE, ...); "" when it may.
	notReadOnly string
	// unknownFn names a called function that is neither PostgreSQL's own
	// nor in the sharding schema: it may touch any shard's data, so a
	// statement without a key that calls it cannot go to "any shard".
	unknownFn string

	merge *mergePlan // how a key-less read fans out; nil = refused with mergeWhy
	// unsharded names the tables outside the sharding schema the statement
	// reads: they live on the default shard only, so it never fans out.
	unsharded string
	mergeWhy  string
	// setop: the statement is a UNION/INTERSECT/EXCEPT (merged when
	// merge is set: setop.go).
	setop bool
	// noFrom: the statement is a SELECT without FROM (its keyed tables
	// are in subqueries: answered in two stages when they need shards).
	noFrom bool
	// copyOut: a COPY ... TO whose fan-out concatenates (copyPlan).
	copyOut *CopyOut
	// copyStaged, for COPY (query) TO whose options pgshard can write
	// itself: the query's text and the COPY it writes, should the query
	// be answered in two stages (twostage.go).
	copyStaged *copyStaged

	// refusal, when set, refuses the statement unless a hint routes it.
	refusal *Refusal
	// ddl: without a hint the statement runs on every shard (or, when
	// every table it names is unsharded, on the default shard).
	ddl bool
	// ddlTables are the relations a DDL statement names.
	ddlTables []string
	// defaultWhy, when set, says why a statement that needs no shard by
	// its keys must run on the default shard (a DO block, a procedure or
	// function the schema does not know): it is DestAny with Default.
	defaultWhy string
	// explain: the statement is EXPLAIN (analyze = EXPLAIN ANALYZE).
	explain, analyze bool
	// anyReason explains DestAny when no group needs a shard.
	anyReason string

	// static is the decision when it depends on no parameter; decided
	// says it came from the full evaluation (Explain can retrace it).
	static  *Dest
	decided bool
	// fast is the only source of the only group, when nothing else
	// matters: Route decodes it and is done.
	fast *source
}

// hintPlan is a statement's hint, resolved at analysis.
type hintPlan struct {
	shard int // the shard the hint names or whose key it gives
	key   string
	b     int // bucket, -1 for a shard hint
	desc  string
}

// mergePlan is a fan-out: the Merge to use, and the parameters that carry
// LIMIT / OFFSET (then Merge's Limit/Offset are filled in per Route).
type mergePlan struct {
	merge         Merge
	limit, offset *source // parameters (or literal slots) that carry LIMIT / OFFSET, nil = constant
	desc          string
	// litDesc: desc holds litMark where the LIMIT literal is rendered.
	litDesc bool
	// litFanout: the per-shard SQL was deparsed with literal placeholders;
	// a text whose decision is this fan-out is analyzed in full.
	litFanout bool
}

// litMark stands for the LIMIT literal in a merge description (no text
// holds a NUL byte).
const litMark = "\x00"

// descText is the merge's description for the given literals.
func (mp *mergePlan) descText(lits []literal) string {
	if !mp.litDesc {
		return mp.desc
	}
	return strings.Replace(mp.desc, litMark, mp.limit.exprText(lits), 1)
}
