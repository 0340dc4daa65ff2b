package verify

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Format and Version name the history format this package reads
// (HISTORY.md). A header naming another format, or a version other than
// Version and MinVersion, is refused. Version 1 histories carry no content
// digests: their content is compared only where version 1 recorded it.
const (
	Format     = "pgshard-history"
	Version    = 2
	MinVersion = 1
)

// maxLine bounds one history line. A longer line is an error, not a reason
// to buffer an unbounded amount of input.
const maxLine = 16 << 20

// Outcome is an operation's outcome as the chaos workload classified it.
type Outcome string

// The outcomes of HISTORY.md.
const (
	// OutcomeOK: the operation took effect (for a commit: acknowledged).
	OutcomeOK Outcome = "ok"
	// OutcomeFail: the operation definitely had no effect (a conflict is a Fail).
	OutcomeFail Outcome = "fail"
	// OutcomeInfo: unknown, the request may have taken effect.
	OutcomeInfo Outcome = "info"
)

// Op kinds (HISTORY.md, "op").
const (
	KindLoad        = "load"
	KindCommit      = "commit"
	KindReadOutbox  = "read_outbox"
	KindReadSpawns  = "read_spawns"
	KindAckOutbox   = "ack_outbox"
	KindAckSpawn    = "ack_spawn"
	KindDueTimers   = "due_timers"
	KindDeleteTimer = "delete_timer"
)

// Commit causes.
const (
	CauseSetup     = "setup"
	CauseWorker    = "worker"
	CauseOutbox    = "outbox"
	CauseTimer     = "timer"
	CauseRedeliver = "redeliver"
)

// History is a decoded chaos history: its header, every op and fault line
// in file order, and its end line (nil when the run did not write one).
type History struct {
	Header Header
	// Ops are in file order, which is the order of completion.
	Ops []*Op
	// Faults are the fault lines (inject and heal) in file order.
	Faults []*FaultEvent
	// End is the end line, nil if the history is truncated.
	End *End
	// Lines is the number of lines read (a partial last line included).
	Lines int
	// PartialLine is set when the input ended inside a line that could
	// not be decoded (a writer killed mid-write): it is ignored and the
	// history counts as truncated.
	PartialLine bool
}

// Truncated reports whether the history lacks its end line: the run that
// wrote it did not finish.
func (h *History) Truncated() bool { return h.End == nil }

// Header is the first line of a history.
type Header struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	Run       string    `json:"run"`
	StartedAt time.Time `json:"started_at"`
	Seed      int64     `json:"seed"`
	Scenario  string    `json:"scenario,omitempty"`
	Target    string    `json:"target,omitempty"`
	Workload  Workload  `json:"workload"`
	// Map is the shard map the workload was routed by.
	Map MapInfo `json:"map"`
	// Schedule is the fault schedule drawn before the run.
	Schedule []ScheduledFault `json:"schedule"`
}

// Workload is the header's description of the chaos workload. Only
// TraceMax and DefinitionID are used by the checks; the rest is shown in
// the report.
type Workload struct {
	Executions   int     `json:"executions"`
	DefinitionID string  `json:"definition_id"`
	TraceMax     int     `json:"trace_max"`
	TimerDelayMS int     `json:"timer_delay_ms"`
	Fast         float64 `json:"fast"`
	MaxEmits     int     `json:"max_emits"`
	Timer        float64 `json:"timer"`
	Spawn        float64 `json:"spawn"`
	Redelivery   float64 `json:"redelivery"`
	RetryCap     int     `json:"retry_cap"`
	Concurrency  int     `json:"concurrency"`
	// PayloadBytes is the length of the "x" padding every state carries
	// (nil in histories of older writers: not checked).
	PayloadBytes *int `json:"payload_bytes,omitempty"`
}

// MapInfo is a shard map without DSNs, as the history header and a State
// carry it: bucket ranges are inclusive [lo, hi].
type MapInfo struct {
	Epoch   uint64     `json:"epoch"`
	Buckets int        `json:"buckets"`
	Shards  []MapShard `json:"shards"`
}

// MapShard is one shard of a MapInfo.
type MapShard struct {
	Name    string   `json:"name"`
	Ordinal int      `json:"ordinal"`
	Ranges  [][2]int `json:"ranges"`
}

// ScheduledFault is one entry of the header's fault schedule.
type ScheduledFault struct {
	ID     string          `json:"id"`
	Kind   string          `json:"kind"`
	Shard  string          `json:"shard,omitempty"`
	AtMS   int64           `json:"at_ms"`
	HoldMS int64           `json:"hold_ms"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Emit is one outbox row a commit writes.
type Emit struct {
	Event  string `json:"event"`
	Target string `json:"target"`
	// Digest is the content digest of the event document written
	// (version 2; "" in older histories).
	Digest string `json:"digest,omitempty"`
}

// TimerOp is one timer operation of a commit (a schedule of Path at
// FireAt, or a cancel of Path), or, in a due_timers op, one timer
// returned (Exe, Path, FireAt).
type TimerOp struct {
	Exe    string  `json:"exe,omitempty"`
	Path   string  `json:"path"`
	FireAt float64 `json:"fire_at"`
	Cancel bool    `json:"cancel,omitempty"`
}

// Op is one operation of the history. Members that do not apply to an
// op's Kind are zero.
type Op struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Src   string `json:"src"`
	Exe   string `json:"exe"`
	Shard string `json:"shard"`
	// Via names the client the op went through ("proxy", "router"; ""
	// when the writer did not say): the lease check judges the ops of a
	// follower cut off from the catalog.
	Via      string  `json:"via,omitempty"`
	T0       int64   `json:"t0"`
	T1       int64   `json:"t1"`
	Outcome  Outcome `json:"outcome"`
	Err      string  `json:"err,omitempty"`
	SQLState string  `json:"sqlstate,omitempty"`

	// Event is the event id of a load (asked about) or of a commit
	// (recorded in the dedupe ledger), or of an ack_outbox (the row's).
	Event string `json:"event,omitempty"`
	Cause string `json:"cause,omitempty"`

	// load, on ok.
	Exists    bool   `json:"exists,omitempty"`
	Version   int    `json:"version,omitempty"`
	Writer    string `json:"writer,omitempty"`
	Processed bool   `json:"processed,omitempty"`

	// commit.
	Exp      int       `json:"exp"`
	New      int       `json:"new,omitempty"`
	Found    *int      `json:"found,omitempty"`
	Conflict bool      `json:"conflict,omitempty"`
	Input    string    `json:"input,omitempty"`
	Fast     bool      `json:"fast,omitempty"`
	Emits    []Emit    `json:"emits,omitempty"`
	Timers   []TimerOp `json:"timers,omitempty"`
	Spawns   []string  `json:"spawns,omitempty"`
	Trace    bool      `json:"trace,omitempty"`
	// What the commit wrote into the execution's state (absent in
	// histories of older writers): step, active state, armed timers.
	Step   *int               `json:"step,omitempty"`
	Active string             `json:"active,omitempty"`
	Armed  map[string]float64 `json:"armed,omitempty"`
	Seq    int64              `json:"seq,omitempty"`
	Origin string             `json:"origin,omitempty"`
	Path   string             `json:"path,omitempty"`
	FireAt float64            `json:"fire_at,omitempty"`

	// Content digests (version 2, HISTORY.md "Content digests"; "" or
	// nil in older histories). DataDigest: for a commit the state it
	// writes, for a load the state it read. TraceDigest: the trace entry
	// a commit appends. SpawnDigests: one per Spawns element. BodyDigest:
	// the event document an outbox delivery read from its row.
	DataDigest   string   `json:"data_digest,omitempty"`
	TraceDigest  string   `json:"trace_digest,omitempty"`
	SpawnDigests []string `json:"spawn_digests,omitempty"`
	BodyDigest   string   `json:"body_digest,omitempty"`

	// read_outbox, read_spawns: rows returned.
	N int `json:"n,omitempty"`
	// ack_outbox: the row's target; ack_spawn: parent (= Exe) and child.
	Target string `json:"target,omitempty"`
	Parent string `json:"parent,omitempty"`
	Child  string `json:"child,omitempty"`
	// due_timers: the time asked about (the returned timers are in
	// Timers) and the row limit asked for (version 2; 0 if unknown).
	Now   float64 `json:"now,omitempty"`
	Limit int     `json:"limit,omitempty"`
	// delete_timer, on ok.
	Deleted bool `json:"deleted,omitempty"`

	// Line is the op's line number in the history file (1-based).
	Line int `json:"-"`
}

// Unknown reports whether the op's outcome is unknown.
func (o *Op) Unknown() bool { return o.Outcome == OutcomeInfo }

// FaultEvent is a fault line: one injection or one heal.
type FaultEvent struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Phase string `json:"phase"` // "inject" or "heal"
	T     int64  `json:"t"`
	Shard string `json:"shard,omitempty"`
	// Landed is the writer's own reading of its evidence; verify
	// recomputes it.
	Landed   bool                       `json:"landed"`
	Evidence map[string]json.RawMessage `json:"evidence,omitempty"`
	Err      string                     `json:"err,omitempty"`
	Line     int                        `json:"-"`
}

// End is the last line of a finished run.
type End struct {
	T           int64     `json:"t"`
	EndedAt     time.Time `json:"ended_at"`
	Ops         int       `json:"ops"`
	Interrupted bool      `json:"interrupted"`
	Quiesce     *Quiesce  `json:"quiesce,omitempty"`
	// ScheduleCutMS, when set, is where the writer stopped the fault
	// schedule (at_ms's clock): planned faults at or after it were never
	// due (a run extended until its goal plans up to its ceiling).
	ScheduleCutMS int64 `json:"schedule_cut_ms,omitempty"`
	// Map, when set, is the shard map in force at the end of the run —
	// the run's catalog after its last move (a run with move faults) —
	// by which placement is checked; nil: the header's map held all along.
	Map *MapInfo `json:"map,omitempty"`
}

// RangeMove is a bucket range a fault of the run moved (or began to move):
// the evidence of a move or mover-kill fault (HISTORY.md).
type RangeMove struct {
	FaultID  string
	Lo, Hi   int
	From, To string
}

// Moves returns the range moves of the history's move and mover-kill
// faults (their inject lines' evidence), in file order.
func (h *History) Moves() []RangeMove {
	var out []RangeMove
	for _, f := range h.Faults {
		if (f.Kind != FaultMove && f.Kind != FaultMoverKill) || f.Phase != "inject" {
			continue
		}
		var mv RangeMove
		ok := json.Unmarshal(f.Evidence["lo"], &mv.Lo) == nil && json.Unmarshal(f.Evidence["hi"], &mv.Hi) == nil &&
			json.Unmarshal(f.Evidence["from"], &mv.From) == nil && json.Unmarshal(f.Evidence["to"], &mv.To) == nil
		if ok && mv.From != "" && mv.To != "" && mv.Lo <= mv.Hi {
			mv.FaultID = f.ID
			out = append(out, mv)
		}
	}
	return out
}

// Due reports whether a planned fault was due before the schedule was
// cut (every fault is, when the writer cut nothing).
func (h *History) Due(s ScheduledFault) bool {
	return h.End == nil || h.End.ScheduleCutMS <= 0 || s.AtMS < h.End.ScheduleCutMS
}

// Quiesce is the outcome of the run's heal-and-quiesce phase.
type Quiesce struct {
	OK         bool  `json:"ok"`
	MS         int64 `json:"ms"`
	OutboxLeft int   `json:"outbox_left"`
	SpawnsLeft int   `json:"spawns_left"`
	TimersLeft int   `json:"timers_left"`
}

// line is the union of every line type's members, so each line is
// decoded once. Pointers mark members whose presence is checked.
type line struct {
	Type string `json:"type"`
	// fast: decoded by fastLine, which interns what op interns.
	fast bool

	// header
	Format    *string          `json:"format"`
	HVersion  *int             `json:"version"`
	Run       string           `json:"run"`
	StartedAt string           `json:"started_at"`
	Seed      int64            `json:"seed"`
	Scenario  string           `json:"scenario"`
	Workload  *Workload        `json:"workload"`
	Map       *MapInfo         `json:"map"`
	Schedule  []ScheduledFault `json:"schedule"`

	// op (version is shared with the header: a load's version)
	ID        string             `json:"id"`
	Kind      string             `json:"kind"`
	Src       string             `json:"src"`
	Exe       *string            `json:"exe"`
	Shard     string             `json:"shard"`
	Via       string             `json:"via"`
	T0        *int64             `json:"t0"`
	T1        *int64             `json:"t1"`
	Outcome   string             `json:"outcome"`
	Err       string             `json:"err"`
	SQLState  string             `json:"sqlstate"`
	Event     string             `json:"event"`
	Cause     string             `json:"cause"`
	Exists    bool               `json:"exists"`
	Writer    string             `json:"writer"`
	Processed bool               `json:"processed"`
	Exp       *int               `json:"exp"`
	New       *int               `json:"new"`
	Found     *int               `json:"found"`
	Conflict  bool               `json:"conflict"`
	Input     string             `json:"input"`
	Fast      bool               `json:"fast"`
	Emits     []Emit             `json:"emits"`
	Timers    []rawTime          `json:"timers"`
	Spawns    []string           `json:"spawns"`
	Trace     bool               `json:"trace"`
	Step      *int               `json:"step"`
	Active    string             `json:"active"`
	Armed     map[string]float64 `json:"armed"`
	Seq       *int64             `json:"seq"`
	Origin    string             `json:"origin"`
	Path      string             `json:"path"`
	FireAt    *float64           `json:"fire_at"`
	N         int                `json:"n"`
	Target    string             `json:"target"`
	Parent    string             `json:"parent"`
	Child     string             `json:"child"`
	Now       *float64           `json:"now"`
	Deleted   bool               `json:"deleted"`
	DataDig   string             `json:"data_digest"`
	TraceDig  string             `json:"trace_digest"`
	SpawnDigs []string           `json:"spawn_digests"`
	BodyDig   string             `json:"body_digest"`
	Limit     int                `json:"limit"`

	// fault
	Phase    string                     `json:"phase"`
	T        *int64                     `json:"t"`
	Landed   bool                       `json:"landed"`
	Evidence map[string]json.RawMessage `json:"evidence"`

	// end
	EndedAt     string   `json:"ended_at"`
	Ops         int      `json:"ops"`
	Interrupted bool     `json:"interrupted"`
	Quiesce     *Quiesce `json:"quiesce"`
	// ScheduleCutMS is the end line's schedule_cut_ms.
	ScheduleCutMS int64 `json:"schedule_cut_ms"`
}

type rawTime struct {
	Exe    string   `json:"exe"`
	Path   string   `json:"path"`
	FireAt *float64 `json:"fire_at"`
	Cancel bool     `json:"cancel"`
}

// LineError is a problem with one line of a history.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("history line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// ErrNoHeader is returned for an input without a header line (an empty
// file, or another file altogether).
var ErrNoHeader = errors.New("history has no header line")

// OpenHistory reads the history file at path: plain JSON lines, gzip or
// zstd (recognized by their magic bytes, whatever the file is called).
func OpenHistory(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open history: %w", err)
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		return nil, fmt.Errorf("read history %s: %w", path, err)
	}
	return h, nil
}

// ReadHistory decodes a history from r, decompressing gzip or zstd input
// (recognized by magic bytes). It streams: memory grows with the decoded
// history, never with a line longer than 16 MiB (an error).
//
// It is strict about what a version-1 reader could misread — a missing or
// foreign header, another version, a line type or op kind it does not
// know, a malformed member, an op id used twice, a line after the end — and
// tolerant of members it does not know. A history without an end line is
// returned with End nil (see Truncated); a last line cut short by the
// writer's death is skipped and flagged in PartialLine.
func ReadHistory(r io.Reader) (*History, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	var src io.Reader = br
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		src = zr
	case len(magic) == 4 && bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		src = zr
	}
	d := newDecoder()
	lr := bufio.NewReaderSize(src, 256<<10)
	for {
		b, err := readLine(lr)
		if len(b) > 0 || (err == nil) {
			d.h.Lines++
			complete := err == nil
			if perr := d.decode(b, d.h.Lines); perr != nil {
				if !complete && !errors.Is(perr, errAfterEnd) {
					// The writer died in the middle of this line.
					d.h.PartialLine = true
					break
				}
				return nil, &LineError{Line: d.h.Lines, Err: perr}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("history line %d: %w", d.h.Lines+1, err)
		}
	}
	if !d.seenHeader {
		return nil, ErrNoHeader
	}
	return d.h, nil
}

var errLineTooLong = fmt.Errorf("line longer than %d bytes", maxLine)

// readLine returns the next line without its '\n'; err is io.EOF for a
// last line without one (or no line at all).
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > maxLine {
			return nil, errLineTooLong
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			buf = append(buf, chunk...)
			continue
		}
		if err != nil {
			return append(buf, chunk...), err
		}
		if buf == nil {
			return chunk[:len(chunk)-1], nil
		}
		buf = append(buf, chunk...)
		return buf[:len(buf)-1], nil
	}
}

type decoder struct {
	h          *History
	seenHeader bool
	ids        map[string]*Op // op id → op
	strs       map[string]string

	// fastLine's state (fastline.go): the line decoded into, scratch
	// space for what op copies out of it, and what op keeps.
	l            line
	scratch      fastScratch
	rawTimers    []rawTime
	strScratch   []string
	emitScratch  []Emit
	timerScratch []TimerOp
	arena        []byte
	strSlab      slab[string]
	emitSlab     slab[Emit]
	timerSlab    slab[TimerOp]
	ints         slab[int]
	floats       slab[float64]
	ops          slab[Op]
}

func newDecoder() *decoder {
	return &decoder{h: &History{}, ids: map[string]*Op{}, strs: map[string]string{}}
}

// intern shares the storage of repeated strings (execution ids, shard
// names, kinds): a 300k-op history repeats a few thousand of them.
func (d *decoder) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := d.strs[s]; ok {
		return v
	}
	s = strings.Clone(s)
	d.strs[s] = s
	return s
}

var errAfterEnd = errors.New("line after the end line")

func (d *decoder) decode(b []byte, n int) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return errors.New("empty line")
	}
	if d.h.End != nil {
		return errAfterEnd
	}
	l := &d.l
	if !d.fastLine(b, l) {
		*l = line{}
		// Unmarshal also refuses anything after the object.
		if err := json.Unmarshal(b, l); err != nil {
			return fmt.Errorf("not a JSON object: %w", err)
		}
	}
	if !d.seenHeader && l.Type != "header" {
		return fmt.Errorf("the first line must be the header, this one has type %q", l.Type)
	}
	switch l.Type {
	case "header":
		if d.seenHeader {
			return errors.New("a second header line")
		}
		return d.header(l)
	case "op":
		return d.op(l, n)
	case "fault":
		return d.fault(l, n)
	case "end":
		return d.end(l)
	case "":
		return errors.New(`the line has no "type"`)
	default:
		return fmt.Errorf("unknown line type %q (this reader knows history format versions %d..%d)", l.Type, MinVersion, Version)
	}
}

func (d *decoder) header(l *line) error {
	if l.Format == nil || *l.Format != Format {
		got := "<missing>"
		if l.Format != nil {
			got = fmt.Sprintf("%q", *l.Format)
		}
		return fmt.Errorf("format is %s, want %q", got, Format)
	}
	if l.HVersion == nil || *l.HVersion < MinVersion || *l.HVersion > Version {
		got := "<missing>"
		if l.HVersion != nil {
			got = fmt.Sprint(*l.HVersion)
		}
		return fmt.Errorf("history format version %s, this reader knows versions %d..%d", got, MinVersion, Version)
	}
	if l.Run == "" {
		return errors.New("header has no run id")
	}
	h := &d.h.Header
	h.Format, h.Version, h.Run, h.Seed, h.Scenario, h.Target = *l.Format, *l.HVersion, l.Run, l.Seed, l.Scenario, l.Target
	if l.StartedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, l.StartedAt)
		if err != nil {
			return fmt.Errorf("started_at: %w", err)
		}
		h.StartedAt = t
	}
	if l.Workload != nil {
		h.Workload = *l.Workload
		if h.Workload.TraceMax < 0 {
			return fmt.Errorf("workload.trace_max %d is negative", h.Workload.TraceMax)
		}
	}
	if l.Map != nil {
		h.Map = *l.Map
		if err := h.Map.check(); err != nil {
			return fmt.Errorf("map: %w", err)
		}
	}
	h.Schedule = l.Schedule
	for i, f := range h.Schedule {
		if f.Kind == "" {
			return fmt.Errorf("schedule[%d]: no kind", i)
		}
	}
	d.seenHeader = true
	return nil
}

// check validates what the checks rely on: shard names and ordinals
// unique, ranges within the bucket count, not overlapping.
func (m *MapInfo) check() error {
	if m.Buckets <= 0 {
		return fmt.Errorf("buckets %d is not positive", m.Buckets)
	}
	names := map[string]bool{}
	ords := map[int]bool{}
	for _, s := range m.Shards {
		if s.Name == "" || names[s.Name] {
			return fmt.Errorf("shard name %q empty or repeated", s.Name)
		}
		if ords[s.Ordinal] || s.Ordinal < 0 || s.Ordinal > 1023 {
			return fmt.Errorf("shard %s: ordinal %d repeated or outside 0..1023", s.Name, s.Ordinal)
		}
		names[s.Name], ords[s.Ordinal] = true, true
		for _, r := range s.Ranges {
			if r[0] < 0 || r[1] >= m.Buckets || r[0] > r[1] {
				return fmt.Errorf("shard %s: range [%d,%d] is not within 0..%d", s.Name, r[0], r[1], m.Buckets-1)
			}
		}
	}
	// Overlaps are found by sorting the ranges, not by marking buckets
	// (the bucket count is untrusted input).
	type rg struct {
		lo, hi int
		name   string
	}
	var all []rg
	for _, s := range m.Shards {
		for _, r := range s.Ranges {
			all = append(all, rg{r[0], r[1], s.Name})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].lo < all[j].lo })
	for i := 1; i < len(all); i++ {
		if a, b := all[i-1], all[i]; b.lo <= a.hi {
			return fmt.Errorf("ranges [%d,%d] (%s) and [%d,%d] (%s) overlap", a.lo, a.hi, a.name, b.lo, b.hi, b.name)
		}
	}
	return nil
}

var knownKinds = map[string]bool{
	KindLoad: true, KindCommit: true, KindReadOutbox: true, KindReadSpawns: true,
	KindAckOutbox: true, KindAckSpawn: true, KindDueTimers: true, KindDeleteTimer: true,
}

func (d *decoder) op(l *line, n int) error {
	if l.ID == "" {
		return errors.New("op has no id")
	}
	if first, dup := d.ids[l.ID]; dup {
		return fmt.Errorf("op id %q used twice (first on line %d)", l.ID, first.Line)
	}
	if !knownKinds[l.Kind] {
		return fmt.Errorf("op %s: unknown kind %q", l.ID, l.Kind)
	}
	intern, id := d.intern, strings.Clone(l.ID)
	if l.fast {
		// fastLine interned these and keeps its strings already.
		intern, id = func(s string) string { return s }, l.ID
	}
	o := d.ops.ptr(Op{
		ID: id, Kind: intern(l.Kind), Src: intern(l.Src), Shard: intern(l.Shard), Via: intern(l.Via),
		Outcome: Outcome(intern(l.Outcome)), Err: l.Err, SQLState: intern(l.SQLState),
		Event: l.Event, Cause: intern(l.Cause), Exists: l.Exists, Writer: intern(l.Writer),
		Processed: l.Processed, Found: l.Found, Conflict: l.Conflict, Input: l.Input, Fast: l.Fast,
		Emits: l.Emits, Spawns: l.Spawns, Trace: l.Trace, Origin: l.Origin, Path: l.Path,
		N: l.N, Target: intern(l.Target), Parent: intern(l.Parent), Child: l.Child, Deleted: l.Deleted,
		Step: l.Step, Active: intern(l.Active), Armed: l.Armed,
		Limit: l.Limit, DataDigest: l.DataDig, TraceDigest: l.TraceDig, SpawnDigests: l.SpawnDigs, BodyDigest: l.BodyDig,
		Line: n,
	})
	if d.h.Header.Version < 2 && (o.DataDigest != "" || o.TraceDigest != "" || o.SpawnDigests != nil || o.BodyDigest != "") {
		return fmt.Errorf("op %s: content digests in a version-%d history (they are version 2)", l.ID, d.h.Header.Version)
	}
	if o.SpawnDigests != nil && len(o.SpawnDigests) != len(o.Spawns) {
		return fmt.Errorf("op %s: %d spawn_digests for %d spawns", l.ID, len(o.SpawnDigests), len(o.Spawns))
	}
	if l.Exe != nil {
		o.Exe = intern(*l.Exe)
	}
	switch o.Outcome {
	case OutcomeOK, OutcomeFail, OutcomeInfo:
	default:
		return fmt.Errorf("op %s: outcome %q is not ok, fail or info", o.ID, l.Outcome)
	}
	if l.T0 == nil || l.T1 == nil {
		return fmt.Errorf("op %s: t0 and t1 are required", o.ID)
	}
	o.T0, o.T1 = *l.T0, *l.T1
	if o.T0 < 0 || o.T1 < o.T0 {
		return fmt.Errorf("op %s: t0 %d, t1 %d: want 0 <= t0 <= t1", o.ID, o.T0, o.T1)
	}
	if l.HVersion != nil {
		o.Version = *l.HVersion
	}
	if l.Seq != nil {
		o.Seq = *l.Seq
	}
	if l.FireAt != nil {
		o.FireAt = *l.FireAt
	}
	if l.Now != nil {
		o.Now = *l.Now
	}
	ts := d.timerScratch[:0]
	for i, t := range l.Timers {
		tm := TimerOp{Exe: intern(t.Exe), Path: t.Path, Cancel: t.Cancel}
		switch {
		case t.FireAt != nil:
			tm.FireAt = *t.FireAt
		case !t.Cancel:
			return fmt.Errorf("op %s: timers[%d] has neither fire_at nor cancel", o.ID, i)
		}
		if math.IsNaN(tm.FireAt) || math.IsInf(tm.FireAt, 0) {
			return fmt.Errorf("op %s: timers[%d]: fire_at is not finite", o.ID, i)
		}
		ts = append(ts, tm)
	}
	if len(ts) > 0 {
		o.Timers = d.timerSlab.clone(ts)
	}
	d.timerScratch = ts[:0]
	for i := range o.Emits {
		o.Emits[i].Target = intern(o.Emits[i].Target)
	}
	needExe := func() error {
		if o.Exe == "" {
			return fmt.Errorf("op %s (%s): exe is required", o.ID, o.Kind)
		}
		return nil
	}
	switch o.Kind {
	case KindLoad:
		if err := needExe(); err != nil {
			return err
		}
		if o.Outcome == OutcomeOK && o.Exists && o.Version < 1 {
			return fmt.Errorf("op %s: a load of an existing execution read version %d", o.ID, o.Version)
		}
	case KindCommit:
		if err := needExe(); err != nil {
			return err
		}
		if l.Exp == nil || *l.Exp < 0 {
			return fmt.Errorf("op %s: commit without a valid exp", o.ID)
		}
		o.Exp = *l.Exp
		if l.New != nil {
			o.New = *l.New
		}
		if o.Outcome == OutcomeOK && o.New != o.Exp+1 {
			return fmt.Errorf("op %s: ok commit with exp %d has new %d, want %d", o.ID, o.Exp, o.New, o.Exp+1)
		}
		if o.Conflict && o.Outcome != OutcomeFail {
			return fmt.Errorf("op %s: a conflict must have outcome fail, not %s", o.ID, o.Outcome)
		}
		for i, t := range o.Timers {
			if t.Exe != "" {
				return fmt.Errorf("op %s: timers[%d] of a commit names an execution", o.ID, i)
			}
		}
		switch o.Cause {
		case CauseOutbox:
			if l.Seq == nil || o.Origin == "" {
				return fmt.Errorf("op %s: an outbox delivery needs seq and origin", o.ID)
			}
		case CauseTimer:
			if o.Path == "" || l.FireAt == nil {
				return fmt.Errorf("op %s: a timer fire needs path and fire_at", o.ID)
			}
		}
	case KindAckOutbox:
		if l.Seq == nil {
			return fmt.Errorf("op %s: ack_outbox without seq", o.ID)
		}
	case KindAckSpawn:
		if l.Seq == nil {
			return fmt.Errorf("op %s: ack_spawn without seq", o.ID)
		}
		if o.Parent == "" {
			o.Parent = o.Exe
		}
	case KindDueTimers:
		for i, t := range o.Timers {
			if t.Exe == "" || t.Cancel {
				return fmt.Errorf("op %s: timers[%d] of due_timers needs exe, path and fire_at", o.ID, i)
			}
		}
	case KindDeleteTimer:
		if err := needExe(); err != nil {
			return err
		}
	}
	d.ids[o.ID] = o
	d.h.Ops = append(d.h.Ops, o)
	return nil
}

func (d *decoder) fault(l *line, n int) error {
	if l.Kind == "" {
		return errors.New("fault line without kind")
	}
	if l.Phase != "inject" && l.Phase != "heal" {
		return fmt.Errorf("fault %s: phase %q is not inject or heal", l.ID, l.Phase)
	}
	if l.T == nil {
		return fmt.Errorf("fault %s: no t", l.ID)
	}
	d.h.Faults = append(d.h.Faults, &FaultEvent{
		ID: l.ID, Kind: d.intern(l.Kind), Phase: l.Phase, T: *l.T, Shard: d.intern(l.Shard),
		Landed: l.Landed, Evidence: l.Evidence, Err: l.Err, Line: n,
	})
	return nil
}

func (d *decoder) end(l *line) error {
	if l.ScheduleCutMS < 0 {
		return fmt.Errorf("schedule_cut_ms: %d is negative", l.ScheduleCutMS)
	}
	e := &End{Ops: l.Ops, Interrupted: l.Interrupted, Quiesce: l.Quiesce, ScheduleCutMS: l.ScheduleCutMS}
	if l.Map != nil {
		if err := l.Map.check(); err != nil {
			return fmt.Errorf("end map: %w", err)
		}
		if hm := d.h.Header.Map; len(hm.Shards) > 0 && (hm.Buckets != l.Map.Buckets || l.Map.Epoch < hm.Epoch) {
			return fmt.Errorf("end map: %d buckets at epoch %d, but the header's map has %d buckets at epoch %d (a run's map keeps its bucket count and its epoch only grows)",
				l.Map.Buckets, l.Map.Epoch, hm.Buckets, hm.Epoch)
		}
		e.Map = l.Map
	}
	if l.T != nil {
		e.T = *l.T
	}
	if l.EndedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, l.EndedAt)
		if err != nil {
			return fmt.Errorf("ended_at: %w", err)
		}
		e.EndedAt = t
	}
	d.h.End = e
	return nil
}
