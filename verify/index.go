package verify

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// status is what the checks decided about a commit: whether its effects
// belong in the final state.
type status uint8

const (
	// unresolved: an info commit no evidence decides.
	unresolved status = iota
	// present: acknowledged, or an info commit evidence says committed.
	present
	// absent: failed, or an info commit evidence says did not commit.
	absent
)

func (s status) String() string {
	switch s {
	case present:
		return "present"
	case absent:
		return "absent"
	}
	return "unresolved"
}

// cop is a commit op with what the resolution decided about it.
type cop struct {
	*Op
	st  status
	why string // the evidence for st
	// claims are the pieces of evidence naming this op id.
	claims []claim
}

// slot is the version the commit writes if it commits.
func (c *cop) slot() int { return c.Exp + 1 }

// claim is one piece of evidence that names a commit op id: the writer
// recorded in a row or read by a load.
type claim struct {
	// version is the version the evidence says the op wrote, 0 if the
	// evidence does not say.
	version int
	// what describes the evidence ("the final row", "load X", ...).
	what desc
	row  *RowRef
	op   *Op
}

// exe is everything known about one execution id.
type exe struct {
	id      string
	commits []*cop // file order
	loads   []*Op
	// other ops about this execution: delete_timer, ack_spawn (parent).
	deletes   []*Op
	spawnAcks []*Op

	// rows of the final state, whatever shard they are on.
	rows      []placed[ExecutionRow]
	processed []placed[ProcessedRow]
	timers    []placed[TimerRow]
	trace     []placed[TraceRow]
	spawnRows []placed[SpawnRow]
	outbox    []placed[OutboxRow] // rows this execution emitted (event.from)

	// the final row the chain is checked against (the row on its owning
	// shard if there are several), nil if there is none.
	row     *placed[ExecutionRow]
	doc     *execDoc // row's data, nil if it is not a valid document
	docErr  error
	n       int // final version, 0 without a row
	maxSlot int // the highest version any commit of this execution writes

	// versions are the distinct versions the commits write, sorted: the
	// only versions that can have a writer (a corrupt version or exp can
	// be huge, so nothing is indexed densely by version).
	versions []int
	// slots[v] are the present writers of version v, filled by resolve.
	slots map[int][]*cop
	// chain is the present writers in version order.
	chain []*cop
	// chainOK says the chain is usable for replays: versions 1..n each
	// have exactly one writer and nothing beyond n is present.
	chainOK bool
	// ambiguous: some version 1..n has no present writer and several
	// unresolved candidates (set by the CAS check): replays are undecided.
	ambiguous bool
}

// placed is a row with the shard it was found on.
type placed[T any] struct {
	shard string
	r     T
}

// execDoc is the part of executions.data the checks read.
type execDoc struct {
	ID           *string         `json:"id"`
	DefinitionID *string         `json:"definition_id"`
	Version      *int            `json:"version"`
	Status       *string         `json:"status"`
	Outcome      json.RawMessage `json:"outcome"`
	ActivePath   []string        `json:"active_path"`
	ParentID     json.RawMessage `json:"parent_id"`
	Context      json.RawMessage `json:"context"`
	ctx          ctxDoc
	ctxErr       error
}

// ctxDoc is the workload's context inside executions.data.
type ctxDoc struct {
	Step    *int               `json:"step"`
	Last    *string            `json:"last"`
	Op      *string            `json:"op"`
	Timers  map[string]float64 `json:"timers"`
	Payload *string            `json:"payload"`
}

// outboxDoc is outbox.event.
type outboxDoc struct {
	ID   string `json:"id"`
	From string `json:"from"`
	Op   string `json:"op"`
}

// traceDoc is trace.entry.
type traceDoc struct {
	Op    string `json:"op"`
	Step  *int   `json:"step"`
	Event string `json:"event"`
}

// spawnDoc is spawns.context.
type spawnDoc struct {
	Op string `json:"op"`
}

// world indexes a history and a state for the checks: one pass over the
// ops, one over the rows.
type world struct {
	h  *History
	s  *State
	mp *mapIndex

	exes     map[string]*exe
	exeOrder []string // sorted ids
	// byID indexes every op by id, built on first use (opByID): only
	// explanations of violations need it.
	byID     map[string]*Op
	byIDOnce sync.Once
	commits  map[string]*cop // commit op id → cop
	// emitters: event id → the commits listing it in emits.
	emitters map[string][]*cop
	// spawners: parent \x00 child → the commits listing child in spawns.
	spawners map[string][]*cop

	// byEvent and byArming index each execution's commits by event id
	// and by timer arming (timerKey); built by resolve.
	byEvent  map[*exe]map[string][]*cop
	byArming map[*exe]map[string][]*cop

	deliveries []*cop // commits with cause outbox
	relayLoads []*Op  // loads with cause outbox
	outAcks    []*Op
	dueReads   []*Op
	traceMax   int
}

func (w *world) exe(id string) *exe {
	e := w.exes[id]
	if e == nil {
		e = &exe{id: id}
		w.exes[id] = e
	}
	return e
}

func newWorld(h *History, s *State) *world {
	commits := 0
	for _, o := range h.Ops {
		if o.Kind == KindCommit {
			commits++
		}
	}
	w := &world{
		h: h, s: s, mp: newMapIndex(finalMap(h, s)),
		exes: map[string]*exe{}, commits: make(map[string]*cop, commits),
		emitters: map[string][]*cop{}, spawners: map[string][]*cop{},
		traceMax: h.Header.Workload.TraceMax,
	}
	for _, o := range h.Ops {
		switch o.Kind {
		case KindCommit:
			c := &cop{Op: o}
			switch o.Outcome {
			case OutcomeOK:
				c.st, c.why = present, "acknowledged"
			case OutcomeFail:
				c.st, c.why = absent, "failed"
			}
			w.commits[o.ID] = c
			e := w.exe(o.Exe)
			e.commits = append(e.commits, c)
			e.maxSlot = max(e.maxSlot, c.slot())
			for _, em := range o.Emits {
				w.emitters[em.Event] = append(w.emitters[em.Event], c)
			}
			for _, ch := range o.Spawns {
				k := o.Exe + "\x00" + ch
				w.spawners[k] = append(w.spawners[k], c)
			}
			if o.Cause == CauseOutbox {
				w.deliveries = append(w.deliveries, c)
			}
		case KindLoad:
			e := w.exe(o.Exe)
			e.loads = append(e.loads, o)
			if o.Cause == CauseOutbox {
				w.relayLoads = append(w.relayLoads, o)
			}
		case KindDeleteTimer:
			e := w.exe(o.Exe)
			e.deletes = append(e.deletes, o)
		case KindAckSpawn:
			e := w.exe(o.Parent)
			e.spawnAcks = append(e.spawnAcks, o)
		case KindAckOutbox:
			w.outAcks = append(w.outAcks, o)
		case KindDueTimers:
			w.dueReads = append(w.dueReads, o)
		}
	}
	for _, sh := range s.Shards {
		for _, r := range sh.Executions {
			e := w.exe(r.ID)
			e.rows = append(e.rows, placed[ExecutionRow]{sh.Name, r})
		}
		for _, r := range sh.Processed {
			e := w.exe(r.ExecutionID)
			e.processed = append(e.processed, placed[ProcessedRow]{sh.Name, r})
		}
		for _, r := range sh.Timers {
			e := w.exe(r.ExecutionID)
			e.timers = append(e.timers, placed[TimerRow]{sh.Name, r})
		}
		for _, r := range sh.Trace {
			e := w.exe(r.ExecutionID)
			e.trace = append(e.trace, placed[TraceRow]{sh.Name, r})
		}
		for _, r := range sh.Spawns {
			e := w.exe(r.ParentID)
			e.spawnRows = append(e.spawnRows, placed[SpawnRow]{sh.Name, r})
		}
		for _, r := range sh.Outbox {
			if ev, ok := parseOutbox(r.Event); ok && ev.From != "" {
				e := w.exe(ev.From)
				e.outbox = append(e.outbox, placed[OutboxRow]{sh.Name, r})
			}
		}
	}
	for id, e := range w.exes {
		w.exeOrder = append(w.exeOrder, id)
		e.pickRow(w.mp)
		for _, c := range e.commits {
			e.versions = append(e.versions, c.slot())
		}
		slices.Sort(e.versions)
		e.versions = slices.Compact(e.versions)
		e.slots = map[int][]*cop{}
	}
	sort.Strings(w.exeOrder)
	return w
}

// opByID returns the op with id, nil if there is none. Safe for
// concurrent use.
func (w *world) opByID(id string) *Op {
	w.byIDOnce.Do(func() {
		w.byID = make(map[string]*Op, len(w.h.Ops))
		for _, o := range w.h.Ops {
			w.byID[o.ID] = o
		}
	})
	return w.byID[id]
}

// pickRow chooses the execution row the chain is checked against: the one
// on the shard owning its bucket, else the first.
func (e *exe) pickRow(mp *mapIndex) {
	if len(e.rows) == 0 {
		return
	}
	e.row = &e.rows[0]
	for i := range e.rows {
		if mp.owner(e.rows[i].r.Bucket) == e.rows[i].shard {
			e.row = &e.rows[i]
			break
		}
	}
	e.n = e.row.r.Version
	var d execDoc
	if err := json.Unmarshal([]byte(e.row.r.Data), &d); err != nil {
		e.docErr = err
		return
	}
	if len(d.Context) > 0 && string(d.Context) != "null" {
		d.ctxErr = json.Unmarshal(d.Context, &d.ctx)
	}
	e.doc = &d
}

// decodeDoc decodes a JSON document column into v.
func decodeDoc(d Doc, v any) error { return json.Unmarshal([]byte(d), v) }

func parseOutbox(d Doc) (outboxDoc, bool) {
	var ev outboxDoc
	if json.Unmarshal([]byte(d), &ev) != nil {
		return ev, false
	}
	return ev, true
}

// mapIndex answers "which shard owns bucket b" for a MapInfo.
type mapIndex struct {
	m       MapInfo
	ranges  []ownerRange // sorted by lo
	ordinal map[string]int
}

type ownerRange struct {
	lo, hi int
	shard  string
}

func newMapIndex(m MapInfo) *mapIndex {
	mi := &mapIndex{m: m, ordinal: map[string]int{}}
	for _, s := range m.Shards {
		mi.ordinal[s.Name] = s.Ordinal
		for _, r := range s.Ranges {
			mi.ranges = append(mi.ranges, ownerRange{r[0], r[1], s.Name})
		}
	}
	sort.Slice(mi.ranges, func(i, j int) bool { return mi.ranges[i].lo < mi.ranges[j].lo })
	return mi
}

// owner is the shard owning bucket b, "" if no range covers it.
func (mi *mapIndex) owner(b int) string {
	i := sort.Search(len(mi.ranges), func(i int) bool { return mi.ranges[i].hi >= b })
	if i < len(mi.ranges) && mi.ranges[i].lo <= b {
		return mi.ranges[i].shard
	}
	return ""
}

// ref describes an op for a violation.
func ref(o *Op, note string) OpRef {
	return OpRef{ID: o.ID, Kind: o.Kind, Outcome: string(o.Outcome), Exe: o.Exe, T0: o.T0, T1: o.T1, Line: o.Line, Note: note}
}

// describe is a one-line description of a commit for explanations.
func (c *cop) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (commit %s, exp %d", c.ID, c.Outcome, c.Exp)
	if c.Cause != "" {
		fmt.Fprintf(&b, ", %s", c.Cause)
	}
	if c.Outcome == OutcomeInfo {
		fmt.Fprintf(&b, ", resolved %s: %s", c.st, c.why)
	}
	b.WriteString(")")
	return b.String()
}

// wholly explains, for an unknown-outcome commit, why its effects must be
// all present or all absent ("" for other commits).
func (c *cop) wholly() string {
	switch {
	case c.Outcome != OutcomeInfo:
		return ""
	case c.st == present:
		return fmt.Sprintf(" (%s had an unknown outcome and was resolved present — %s — so all its effects must be present)", c.ID, c.why)
	case c.st == absent:
		return fmt.Sprintf(" (%s had an unknown outcome and was resolved absent — %s — so none of its effects may be present)", c.ID, c.why)
	}
	return ""
}

func (c *cop) ref(note string) OpRef {
	r := ref(c.Op, note)
	if c.Outcome == OutcomeInfo {
		r.Resolved = c.st.String()
		r.Evidence = c.why
	}
	return r
}

func execRow(shard, id string) *RowRef {
	return &RowRef{Shard: shard, Table: "executions", Key: "id=" + id}
}

// finalMap is the map rows are placed by at the end: the end line's map
// when the run moved ranges (HISTORY.md), else the dumped state's.
func finalMap(h *History, s *State) MapInfo {
	if h.End != nil && h.End.Map != nil {
		return *h.End.Map
	}
	return s.Map
}
