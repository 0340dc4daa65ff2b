package route

import (
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// shardColumns are the per-shard select-list entries a merge plan adds:
// the hidden ones (Rows: ORDER BY expressions, parameters kept typed), or
// every per-shard entry (Groups: partial aggregates, group keys). names
// are their aliases ("" = none); internal says which of them the client
// never sees (named by internalName); taken is the client's statement
// (stmt), lowercased, whose names the internal names avoid.
type shardColumns struct {
	stmt     *pg.SelectStmt
	hidden   []*pg.Node
	names    []string
	internal []bool
	taken    string
}

// add appends a per-shard select-list entry and returns its column.
func (c *shardColumns) add(e *pg.Node) int {
	i := c.addAs(e, "")
	c.internal[i] = true
	return i
}

// addAs is add with an alias: the shards then name the column as the
// client's statement names it ("" = as Postgres names the expression).
func (c *shardColumns) addAs(e *pg.Node, alias string) int {
	c.hidden = append(c.hidden, e)
	c.names = append(c.names, alias)
	c.internal = append(c.internal, false)
	return len(c.hidden) - 1
}

// put is addAs for a column the client sees, add for one it does not.
func (c *shardColumns) put(e *pg.Node, alias string, visible bool) int {
	if !visible {
		return c.add(e)
	}
	return c.addAs(e, alias)
}

// targetList renders the per-shard select-list entries. A column the client
// never sees gets a name of the proxy's that no name of the statement
// uses: the name Postgres would give it (id for id::uuid) could make the
// client's ORDER BY id ambiguous on the shards (42702).
func (c *shardColumns) targetList() []*pg.Node {
	var out []*pg.Node
	for i, e := range c.hidden {
		name := c.names[i]
		if c.internal[i] {
			name = c.internalName(i)
		}
		out = append(out, &pg.Node{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: e, Name: name, Location: -1}}})
	}
	return out
}

// internalName names hidden column i: pgshard_N, with as many leading
// underscores as it takes for no identifier of the statement to contain
// it.
func (c *shardColumns) internalName(i int) string {
	if c.taken == "" {
		c.taken = strings.ToLower(c.stmt.String())
	}
	prefix := "pgshard_"
	for strings.Contains(c.taken, prefix) {
		prefix = "_" + prefix
	}
	return prefix + strconv.Itoa(i+1)
}
