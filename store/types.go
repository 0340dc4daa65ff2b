package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Execution is one execution of a statechart, as the engine persists it.
//
// The store keeps the whole Execution as JSON text in executions.data (see
// MarshalJSON for the exact document) and its version in executions.version,
// the CAS token. The two always agree for rows this store wrote: Commit sets
// Version to the new version before it serializes, so the committed JSON
// carries the version the row is committed at. On load the column wins: if a
// foreign writer left a JSON "version" that disagrees, Version is the
// column's value, and ID and DefinitionID likewise come from their columns.
type Execution struct {
	// ID is the execution id, lowercase uuid hex (32 chars) by convention;
	// the store only requires it to be non-empty and at most MaxIDLength
	// bytes. It is the routing key.
	ID string
	// DefinitionID names the statechart definition (column definition_id).
	DefinitionID string
	// Version is the number of commits of this execution: 0 before the
	// first save, n after the n-th. Commit advances it and restores it
	// on any failure.
	Version int
	// Status is the engine's lifecycle status ("running", "done", ...).
	Status string
	// Outcome is the result, any JSON value; nil is JSON null.
	Outcome json.RawMessage
	// ActivePath lists the active states.
	ActivePath []string
	// ParentID is the spawning execution's id, "" for a root execution
	// (JSON null).
	ParentID string
	// Context is the execution's data, a JSON value (normally an object);
	// nil is written as {}.
	Context json.RawMessage
	// Extra holds the document's other top-level fields, which the store
	// carries through unchanged (a newer engine's fields survive an older
	// store). Keys naming the fields above are ignored when marshaling.
	Extra map[string]json.RawMessage
}

// executionDoc is the fixed part of the JSON document, in its field order.
type executionDoc struct {
	ID           string          `json:"id"`
	DefinitionID string          `json:"definition_id"`
	Version      int             `json:"version"`
	Status       string          `json:"status"`
	Outcome      json.RawMessage `json:"outcome"`
	ActivePath   []string        `json:"active_path"`
	ParentID     *string         `json:"parent_id"`
	Context      json.RawMessage `json:"context"`
}

var knownFields = []string{"id", "definition_id", "version", "status", "outcome", "active_path", "parent_id", "context"}

// MarshalJSON writes the document stored in executions.data:
//
//	{"id":…,"definition_id":…,"version":N,"status":…,"outcome":…,
//	 "active_path":[…],"parent_id":…|null,"context":{…}, <Extra, sorted by key>}
//
// A nil Outcome is null, a nil ActivePath [], an empty ParentID null and a
// nil Context {}. It fails if Outcome, Context or an Extra value is not
// valid JSON.
func (e Execution) MarshalJSON() ([]byte, error) {
	d := executionDoc{
		ID: e.ID, DefinitionID: e.DefinitionID, Version: e.Version, Status: e.Status,
		Outcome: e.Outcome, ActivePath: e.ActivePath, Context: e.Context,
	}
	if d.Outcome == nil {
		d.Outcome = json.RawMessage("null")
	}
	if d.ActivePath == nil {
		d.ActivePath = []string{}
	}
	if e.ParentID != "" {
		d.ParentID = &e.ParentID
	}
	if d.Context == nil {
		d.Context = json.RawMessage("{}")
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("execution %s: %w", e.ID, err)
	}
	if len(e.Extra) == 0 {
		return b, nil
	}
	keys := make([]string, 0, len(e.Extra))
	for k := range e.Extra {
		if !slices.Contains(knownFields, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	buf := bytes.NewBuffer(b[:len(b)-1]) // drop the closing brace
	for _, k := range keys {
		kb, _ := json.Marshal(k) // a string always marshals
		buf.WriteByte(',')
		buf.Write(kb)
		buf.WriteByte(':')
		v := e.Extra[k]
		if v == nil {
			buf.WriteString("null")
			continue
		}
		if err := json.Compact(buf, v); err != nil {
			return nil, fmt.Errorf("execution %s: extra field %q: %w", e.ID, k, err)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads a document written by MarshalJSON (or by another
// engine version): the known fields into their fields, every other
// top-level field into Extra. A JSON null outcome becomes a nil Outcome,
// and a null or missing context a nil Context.
func (e *Execution) UnmarshalJSON(b []byte) error {
	if x, ok := decodeKnown(b); ok {
		*e = x
		return nil
	}
	return e.decodeGeneral(b)
}

// decodeGeneral is UnmarshalJSON for any document: the known fields, then
// every top-level field again into a map for Extra.
func (e *Execution) decodeGeneral(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("decode execution: %w", err)
	}
	if fields == nil {
		return fmt.Errorf("decode execution: the document is null, want an object")
	}
	var d executionDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("decode execution: %w", err)
	}
	e.setDoc(&d)
	for k, v := range fields {
		if slices.Contains(knownFields, k) {
			continue
		}
		if e.Extra == nil {
			e.Extra = make(map[string]json.RawMessage)
		}
		e.Extra[k] = v
	}
	return nil
}

func isNull(r json.RawMessage) bool {
	return len(r) == 0 || string(bytes.TrimSpace(r)) == "null"
}

// Clone returns a deep copy of e.
func (e *Execution) Clone() *Execution {
	c := *e
	c.Outcome = slices.Clone(e.Outcome)
	c.ActivePath = slices.Clone(e.ActivePath)
	c.Context = slices.Clone(e.Context)
	if e.Extra != nil {
		c.Extra = make(map[string]json.RawMessage, len(e.Extra))
		for k, v := range e.Extra {
			c.Extra[k] = slices.Clone(v)
		}
	}
	return &c
}

// MaxIDLength is the longest execution id Commit accepts, in bytes. Every
// id it accepts can be carried by a listing cursor.
const MaxIDLength = 1024

// Emit is an event a commit sends: a row of the outbox, on the emitting
// execution's shard.
type Emit struct {
	// TargetID is the receiving execution. "" stores NULL (no target
	// execution, e.g. an event for the outside world) unless HasTarget is
	// set.
	TargetID string
	// HasTarget stores TargetID even when it is "": the empty string, as
	// the seed stores target_id "" (a non-empty TargetID implies it). An
	// OutboxRow's TargetID and HasTarget passed back here store the same
	// target_id again.
	HasTarget bool
	// Event is the event as JSON text; it must not be empty.
	Event json.RawMessage
}

// TimerAction says what a TimerOp does.
type TimerAction int

const (
	// TimerSchedule arms (or re-arms) the timer of a path: an upsert on
	// (execution_id, path) that replaces fire_at.
	TimerSchedule TimerAction = iota + 1
	// TimerCancel disarms the timer of a path (a DELETE; no row is fine).
	TimerCancel
)

// String returns "schedule" or "cancel".
func (a TimerAction) String() string {
	switch a {
	case TimerSchedule:
		return "schedule"
	case TimerCancel:
		return "cancel"
	}
	return fmt.Sprintf("TimerAction(%d)", int(a))
}

// TimerOp changes one timer of the committing execution. Ops apply in
// order; for one path only the last op matters.
type TimerOp struct {
	Action TimerAction
	// Path is the state path that owns the timer.
	Path string
	// FireAt is when the timer fires, in seconds since the Unix epoch
	// (schedule only).
	FireAt float64
}

// Schedule returns the op that arms path's timer at fireAt.
func Schedule(path string, fireAt float64) TimerOp {
	return TimerOp{Action: TimerSchedule, Path: path, FireAt: fireAt}
}

// Cancel returns the op that disarms path's timer.
func Cancel(path string) TimerOp { return TimerOp{Action: TimerCancel, Path: path} }

// Spawn is the intent to start a child execution, recorded by the parent's
// commit (a row of spawns, on the parent's shard).
type Spawn struct {
	ChildID  string
	RootPath string
	// Context is the child's initial context as JSON; nil is {}.
	Context json.RawMessage
}

// OutboxRow is a pending outbox event.
type OutboxRow struct {
	// Seq is the row's global sequence value; it names the shard that
	// holds the row (see shardmap.OrdinalForSeq).
	Seq int64
	// TargetID is the receiving execution, "" for NULL or the empty
	// string; HasTarget tells them apart.
	TargetID string
	// HasTarget reports whether target_id is not NULL (false: the event
	// has no target execution).
	HasTarget bool
	Event     json.RawMessage
}

// SpawnRow is a pending spawn intent.
type SpawnRow struct {
	Seq      int64
	ParentID string
	ChildID  string
	RootPath string
	Context  json.RawMessage
}

// Timer is an armed timer.
type Timer struct {
	ExecutionID string
	Path        string
	// FireAt is seconds since the Unix epoch. Pass it back unchanged to
	// DeleteTimer: it matches only the exact value.
	FireAt float64
}

// TraceEntry is one entry of an execution's trace ring.
type TraceEntry struct {
	// Index is the entry's durable idx: 0, 1, 2, ... per execution, never
	// reused, also after older entries were dropped by the ring cap.
	Index int
	// Entry is the entry as JSON text.
	Entry json.RawMessage
}

// Summary is what ListExecutions returns per execution, projected from the
// stored JSON.
type Summary struct {
	ID           string
	DefinitionID string
	Version      int
	Status       string
	// ParentID is the parent's id, "" when parent_id is null or absent (a
	// root) — or, in a document another program wrote, the empty string,
	// which is not a root (RootsOnly follows the seed: parent_id IS NULL).
	ParentID string
	// ActivePath is the document's active_path, nil when absent or null.
	ActivePath []string
	Outcome    json.RawMessage // nil when absent or null
}

// Default and maximum page sizes of ListExecutions.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListOptions filter and page ListExecutions. The zero value lists every
// execution, DefaultListLimit at a time.
type ListOptions struct {
	// DefinitionID, when set, keeps executions of that definition.
	DefinitionID string
	// Statuses, when non-empty, keeps executions whose status is one of
	// them.
	Statuses []string
	// RootsOnly keeps executions without a parent: parent_id null or
	// absent in the document (the seed's IS NULL; an empty parent id is
	// not a root).
	RootsOnly bool
	// Limit is the page size: <= 0 means DefaultListLimit, larger than
	// MaxListLimit means MaxListLimit.
	Limit int
	// Cursor is the previous page's NextCursor; "" starts at the first
	// execution. Cursors are opaque; a malformed one is an error.
	Cursor string
}

// PageLimit returns the page size o asks for, after defaults and the cap.
func (o ListOptions) PageLimit() int {
	switch {
	case o.Limit <= 0:
		return DefaultListLimit
	case o.Limit > MaxListLimit:
		return MaxListLimit
	}
	return o.Limit
}

// Page is one page of ListExecutions, ordered by id (bytewise).
type Page struct {
	Items []Summary
	// NextCursor continues after the last item; "" when there is no
	// next page.
	NextCursor string
}
