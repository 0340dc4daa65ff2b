package route

import (
	"slices"
	"strings"
	"sync"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Learning which columns of a subquery are the statement's. A subquery
// that names a column of the statement's row without a qualifier
// (SELECT * FROM outbox WHERE NOT EXISTS (SELECT 1 FROM executions WHERE
// id = target_id)) looks, without the catalog, like one that names only
// its own columns: its spread plan runs it alone, and the shard answers
// 42703 for the column it does not have. That answer is a fact about
// the subquery's relation (the one the failed stage came from: other
// subqueries may have a column of that name), and Learn plans the
// statement again with it:
//
//	a subquery of one relation (one table in FROM, no join, no subquery
//	inside it, no GROUP BY, HAVING, ORDER BY, window, DISTINCT ON, WITH
//	or set operation) of a statement of one table in FROM
//	  a learned column its WHERE or select list names without a
//	  qualifier is qualified by the statement's table (the shard said
//	  the subquery's relation has none: Postgres resolves it to the
//	  statement's); the statement is then routed as it is when Route
//	  answers it so (a subquery tied to the row by the sharding key runs
//	  on every shard with its rows: direct, no stage 1; its other columns
//	  are left for Postgres to resolve)
//	  else every other unqualified column is qualified by the subquery's
//	  own relation too (Postgres looks there first; if it has none, stage
//	  1 fails again with 42703 and that column is learned next), the
//	  EXISTS tied by one equality is decorrelated (decorrelate.go), and
//	  the plan built as any — only if it is decorrelated: a subquery
//	  qualified so is never left in the statement, where no stage would
//	  check its columns
//
// Nothing is assumed: a learned plan is reached only through the shard's
// 42703 on this execution (the engine starts from the statement's own
// plan every time, so a column added to the subquery's table later is
// seen at once), and a subquery not of that form keeps its text.

// maxLearned bounds the columns learned for one statement.
const maxLearned = 4

// learnedCol is a column learned to be the statement's row's where
// subquery sub (its ordinal among topSublinks) names it.
type learnedCol struct {
	sub int
	col string
}

// stageLearn holds the plans learned from a plan.
type stageLearn struct {
	analyze func(sql string) (*Statement, error)
	sc      *compiled
	mu      sync.Mutex
	plans   map[learnedCol]*Stages
}

// Learn is the spread plan of the same statement knowing what msg, a
// shard's 42703 message for sg's inner statement inner ("column \"x\"
// does not exist"), says: that its column is not one of the subquery
// that inner statement came from; nil when there is none (msg names no
// column, not a spread plan, the column learned already, too many
// learned, or that subquery is not of the form above or does not name
// the column).
func (sg *Stages) Learn(inner int, msg string) *Stages {
	col := missingColumn(msg)
	if col == "" || sg == noStages || !sg.Spread || sg.learn == nil || inner < 0 || inner >= len(sg.innerSub) ||
		sg.innerSub[inner] < 0 || len(sg.learned) >= maxLearned {
		return nil
	}
	lc := learnedCol{sub: sg.innerSub[inner], col: col}
	if slices.Contains(sg.learned, lc) {
		return nil
	}
	l := sg.learn
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.plans[lc]; ok {
		return p
	}
	learned := append(slices.Clone(sg.learned), lc)
	b := stageBuilder{analyze: l.analyze, sc: l.sc, learned: learned}
	p := b.build(sg.sql, stageSpread)
	if p != noStages && len(p.Inner) == 0 {
		// The direct plan: Route may refuse the statement it routes for
		// the parameters it is given (a subquery tied to the row off the
		// keys); the plan built without it is its alternative then.
		b = stageBuilder{analyze: l.analyze, sc: l.sc, learned: learned, noDirect: true}
		if q := b.build(sg.sql, stageSpread); q != noStages {
			p.alt = q
		}
	}
	if p == noStages {
		p = nil
	}
	for x := p; x != nil; x = x.alt {
		x.stmt, x.merge.CopyOut = sg.stmt, sg.merge.CopyOut
		x.learned = learned
		x.learn = &stageLearn{analyze: l.analyze, sc: l.sc}
	}
	if l.plans == nil {
		l.plans = map[learnedCol]*Stages{}
	}
	l.plans[lc] = p
	return p
}

// qualify qualifies the unqualified columns of the subqueries of sel of
// one relation (see above) that learned names: a learned column by sel's
// table, with own any other by the subquery's own relation. It returns
// the subqueries it qualified a learned column of (nil for none).
func qualify(sel *pg.SelectStmt, learned []learnedCol, own bool) []*pg.SubLink {
	row := oneTable(sel.FromClause)
	if row == "" {
		return nil
	}
	var done []*pg.SubLink
	k := -1
	topSublinks(sel, func(_ *pg.Node, sl *pg.SubLink) {
		k++
		var cols []string
		for _, lc := range learned {
			if lc.sub == k {
				cols = append(cols, lc.col)
			}
		}
		q := sl.Subselect.GetSelectStmt()
		if len(cols) == 0 || q == nil || isSetOp(q) || q.WithClause != nil || len(q.GroupClause) > 0 || q.HavingClause != nil ||
			len(q.SortClause) > 0 || len(q.WindowClause) > 0 || len(q.DistinctClause) > 0 && q.DistinctClause[0].GetNode() != nil {
			return
		}
		rel := oneTable(q.FromClause)
		if rel == "" || rel == row || nested(q) {
			return
		}
		hit := false
		for _, n := range append([]*pg.Node{q.WhereClause}, q.TargetList...) {
			inspect(n, func(x *pg.Node) bool {
				cr := x.GetColumnRef()
				if cr == nil || len(cr.Fields) != 1 || cr.Fields[0].GetString_() == nil {
					return true
				}
				name := strName(cr.Fields[0])
				switch {
				case slices.Contains(cols, name):
					cr.Fields, hit = []*pg.Node{pg.MakeStrNode(row), pg.MakeStrNode(name)}, true
				case own:
					cr.Fields = []*pg.Node{pg.MakeStrNode(rel), pg.MakeStrNode(name)}
				}
				return true
			})
		}
		if hit {
			done = append(done, sl)
		}
	})
	return done
}

// direct is the plan of statement sql (root, parsed; left as it is) with
// its learned columns qualified, as it is: no stage 1, the statement
// routed as any read; nil when no learned column is qualified, the
// statement reads an unsharded table, or Route refuses it whatever its
// parameters.
func (b *stageBuilder) direct(root *pg.Node, sql string) *Stages {
	root = proto.Clone(root).(*pg.Node)
	if qualify(root.GetSelectStmt(), b.learned, false) == nil {
		return nil
	}
	text, err := deparse(root)
	if err != nil {
		return nil
	}
	st, err := b.analyze(text)
	if err != nil || st.ParseError != "" || !st.Select || !st.ReadOnly || len(st.Unsharded) > 0 ||
		st.plan != nil && st.plan.static != nil && st.plan.static.Kind == DestRefuse {
		return nil // an unsharded table is read on the default shard alone: stage it
	}
	sg := &Stages{Outer: text, Spread: true, outer: st, sql: sql}
	sg.merge = &Merge{Width: -1, Limit: -1, Offset: -1, Stages: sg}
	return sg
}

// oneTable is the name a FROM list of exactly one table gives it (its
// alias, else its name), "" for any other FROM.
func oneTable(from []*pg.Node) string {
	if len(from) != 1 {
		return ""
	}
	rv := from[0].GetRangeVar()
	switch {
	case rv == nil:
		return ""
	case rv.Alias != nil:
		return rv.Alias.Aliasname
	}
	return rv.Relname
}

// nested reports whether q has a subquery inside it (where a column
// could name another scope's relation).
func nested(q *pg.SelectStmt) bool {
	found := false
	inspectAll(append(append([]*pg.Node{q.WhereClause}, q.TargetList...), q.FromClause...), func(n *pg.Node) bool {
		if n.GetSubLink() != nil || n.GetRangeSubselect() != nil || n.GetSelectStmt() != nil {
			found = true
		}
		return !found
	})
	return found
}

// missingColumn is the column a shard's 42703 message names ("column
// \"x\" does not exist", "column e.x does not exist"), "" when msg is
// not one.
func missingColumn(msg string) string {
	s, ok := strings.CutPrefix(msg, "column ")
	if !ok {
		return ""
	}
	if s, ok = strings.CutSuffix(s, " does not exist"); !ok {
		return ""
	}
	if i := strings.LastIndexByte(s, '.'); i >= 0 && !strings.HasPrefix(s, `"`) {
		s = s[i+1:]
	}
	if len(s) >= 2 && strings.HasPrefix(s, `"`) && strings.HasSuffix(s, `"`) {
		s = s[1 : len(s)-1]
	}
	return s
}
