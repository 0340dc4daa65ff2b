package proxy_test

// The unsharded shape of the query generator (PGSHARD_FUZZSQL_SHAPE=
// unsharded; a share of the default mix): any other shape's query, with
// the unsharded table lookup (on the default shard alone; the other
// shards hold an empty table of that name) or the global table gdefs
// (the same rows on every shard) among the tables it reads —
// as the statement's table, joined, in a subquery, a CTE, a set
// operation's branch — beside the sharded ones. pgshard must answer it
// from the default shard's rows (in two stages where it needs other
// shards' too) or refuse it: an answer read from another shard's empty
// copy is wrong, and so is one with a global row taken from two shards.

// unshardedMix writes one query of the unsharded shape.
func (g *ggen) unshardedMix() gquery {
	g.unsharded = true
	defer func() { g.unsharded = false }()
	shapes := []func(*ggen) gquery{(*ggen).plain, (*ggen).aggregate, (*ggen).semi, (*ggen).semiWide,
		(*ggen).cte, (*ggen).setop, (*ggen).scalarSub, (*ggen).derived, (*ggen).noFrom}
	return shapes[g.n(len(shapes))](g)
}
