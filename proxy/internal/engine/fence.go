package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/shardmap"
)

// The shards' fence for proxy clients' plain SQL (migration 0008: every
// shard records the bucket ranges it owns; pgshard_fence_assert(key)
// raises PS001 when it does not own the key's bucket, and takes the lock
// the mover's freeze conflicts with, so the key's range cannot move under
// the transaction).
//
// A statement routed to one shard by a key (route.Dest with a bucket)
// that opens the backend transaction carries the assert of its key in the
// same transaction, in the same write (no extra round trip), as CALL of
// migration 0013's procedure (SELECT pgshard_fence_assert('k') on a
// shard migrated only through 0012: callForm):
//
//	implicit transaction of a pipeline up to Sync (no settings preamble):
//	    Parse "" "CALL pgshard_fence_enter('k')", Bind/Execute/Close of
//	        portal pgshard_fence (swallowed; its error is the client's) —
//	        the pipeline's own implicit transaction, no BEGIN/COMMIT
//	    the client's Parse..Execute..Sync (unchanged)
//	implicit transaction of a simple Query (no settings preamble, an
//	ASCII key):
//	    Query "CALL pgshard_fence_enter('k');\n<the client's string>"
//	        — the string's own implicit transaction, no BEGIN/COMMIT:
//	        the assert's answers swallowed (an itQueryHead item), its
//	        error the client's (Postgres skips the rest of the string);
//	        positions in the client's errors and notices moved back by
//	        the assert's length (appendClientQuery, shiftPosition)
//	implicit transaction with a settings preamble, or of a SQL EXECUTE:
//	    Query "BEGIN; [settings preamble;] CALL pgshard_fence_enter('k')"
//	        (swallowed; its error is the client's, and its 25P02 echo dropped)
//	    the client's Query / Parse..Execute (unchanged)
//	    Query "COMMIT" at the end (swallowed; carries the client's
//	        ReadyForQuery) — the wrap the settings preamble already uses
//	explicit transaction (BEGIN deferred until the first keyed statement):
//	    the replay "BEGIN ...; [SET LOCAL ...;] CALL pgshard_fence_enter('k')"
//
// The router's plan carries the key of the statement being targeted
// (routePlan.fence, router.go); backendExec.run keeps it only when the
// statement runs on its key's shard, and ensureBackend attaches the
// assert when it opens the transaction on a pool whose shard has the
// fence (Config.Fence: FenceAuto asks each pool once whether
// pgshard_fence_assert exists). A later keyed statement of the
// transaction whose bucket was not asserted yet (session.fenceBuckets)
// gets its assert from fenceHeld, on the held backend. Per bucket, not
// per range of the proxy's map: a stale map's range may be several of
// the shard's (a move of part of it), and an assert vouches only for
// the shard's range holding its key. Not fenced: a pinned
// session's backend (its own session), reads of every shard (each
// shard's reader), a query string managing its own transaction, a
// statement that cannot run in a transaction block, and statements
// routed without a key.

// The assert hashes its argument as text (pgshard_fence_bucket, the
// store's text keys). A key of another type (int8 columns) is hashed by
// the map as its type, to another bucket than its text: the proxy then
// asserts a stand-in text whose bucket is the key's (fenceKeyFor), which
// checks and locks exactly the bucket the statement was routed by — only
// the PS001 message names the stand-in rather than the client's key.

// FenceMode says whether the proxy asserts keys against the shards'
// fence (Config.Fence).
type FenceMode int

const (
	// FenceAuto asserts while the proxy follows a catalog (Config.Follow:
	// ranges can move under it) on shards whose database has the fence's
	// functions (migration 0008), asked once per pool; a proxy on a static
	// map does not assert. The default. Why not always: the assert is one
	// more statement per keyed transaction (no round trip, no BEGIN/COMMIT
	// wrap), a cost to pay where moves happen, not on every static
	// deployment (make bench-fence measures it: BenchmarkProxyFence).
	FenceAuto FenceMode = iota
	// FenceOn asserts on every shard and checks every shard's part of a
	// read of every shard (a shard migrated before 0015 fails them with
	// 42883).
	FenceOn
	// FenceOff never asserts (for comparisons; a stale map then routes
	// unchecked).
	FenceOff
)

// String returns auto, on or off.
func (m FenceMode) String() string {
	switch m {
	case FenceOn:
		return "on"
	case FenceOff:
		return "off"
	}
	return "auto"
}

// ParseFenceMode parses auto, on or off ("" is auto).
func ParseFenceMode(s string) (FenceMode, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return FenceAuto, nil
	case "on":
		return FenceOn, nil
	case "off":
		return FenceOff, nil
	}
	return FenceAuto, fmt.Errorf("fence mode %q: want auto, on or off", s)
}

// fenceDetectSQL says whether the shard's database has the fence
// (migration 0008's function), the assert's procedure (0013) and the
// checked served set (0015).
const fenceDetectSQL = "SELECT to_regprocedure('pgshard_fence_assert(text)') IS NOT NULL, to_regprocedure('pgshard_fence_enter(text)') IS NOT NULL, to_regprocedure('pgshard_fence_served_by(bigint,int[],int[],text[])') IS NOT NULL"

// A pool's fence state (PoolFences): unknown until asked.
const (
	fenceUnknown int32 = iota
	fenceAbsent
	fencePresent // the function only (0008-0012): SELECT pgshard_fence_assert
	fenceCall    // the procedure too (0013): CALL pgshard_fence_enter
	fenceServed  // and the checked served set (0015): servedChecked
)

// fenceByConfig says whether the configuration alone decides the fence:
// on, off, or auto on a static map (off); auto while following a
// catalog is decided per pool.
func (g *GenerationEnv) fenceByConfig() (on, decided bool) {
	switch {
	case g.Config.Fence == FenceOff:
		return false, true
	case g.Config.Fence == FenceOn:
		return true, true
	case !g.Config.Follows:
		return false, true // FenceAuto on a static map
	}
	return false, false
}

// PoolFences holds each pool's fence state (*backend.Pool →
// *atomic.Int32: fenceUnknown until asked, then fenceAbsent or
// fencePresent). A server has one (proxy.Server.fences); its sessions
// reach it through HostEnv.Fences.
type PoolFences struct {
	m sync.Map
}

// state returns pool's fence state, made (unknown) if it has none yet.
func (f *PoolFences) state(pool *backend.Pool) *atomic.Int32 {
	v, _ := f.m.Load(pool)
	st, _ := v.(*atomic.Int32)
	if st == nil {
		n := new(atomic.Int32)
		v, _ = f.m.LoadOrStore(pool, n)
		st = v.(*atomic.Int32)
	}
	return st
}

// fenced reports whether transactions on pool assert their key under
// generation g. Under FenceAuto the first transaction on a pool asks its
// backend bc once (one round trip, then never again for the pool); a
// failed question leaves the state unknown (asked again next time) and
// does not fence. log is the server's (HostEnv.Log).
func (f *PoolFences) fenced(ctx context.Context, g *GenerationEnv, log *slog.Logger, pool *backend.Pool, bc *backend.Conn) bool {
	if on, known := f.decided(g, pool); known {
		return on
	}
	st := f.state(pool)
	res, err := bc.RunSimple(ctx, g.Config.PoolTimeout, fenceDetectSQL)
	if err != nil || len(res) != 1 || res[0].ErrRaw != nil || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 3 {
		return false
	}
	if string(res[0].Rows[0][0]) == "t" {
		if string(res[0].Rows[0][1]) == "t" && string(res[0].Rows[0][2]) == "t" {
			st.Store(fenceServed)
			log.Info("shard has the fence: keyed transactions assert their key, reads of every shard check its served set", "shard", pool.Shard.Name)
			return true
		}
		if string(res[0].Rows[0][1]) == "t" {
			st.Store(fenceCall)
			log.Info("shard has the fence without its checked served set (migration 0015): keyed transactions assert their key, reads of every shard are filtered unchecked", "shard", pool.Shard.Name)
			return true
		}
		st.Store(fencePresent)
		log.Info("shard has the fence without its procedure (migration 0013): keyed transactions assert their key by SELECT", "shard", pool.Shard.Name)
		return true
	}
	st.Store(fenceAbsent)
	log.Warn("shard has no fence (migration 0008): keyed transactions through the proxy run unchecked against a stale map", "shard", pool.Shard.Name)
	return false
}

// appendFenceSQL appends the assert of key as one SQL statement (no
// terminating semicolon): CALL pgshard_fence_enter('k') when call
// (migration 0013's procedure: no result row, CommandComplete "CALL"),
// else SELECT pgshard_fence_assert('k') (0008's function: one VOID row).
// The two decide and refuse alike; the CALL costs the backend less.
// The key is a string literal: quotes doubled, and an escape-string
// literal (E'...') when it holds a backslash (right whatever
// standard_conforming_strings says).
func appendFenceSQL(b []byte, key string, call bool) []byte {
	if call {
		b = append(b, "CALL pgshard_fence_enter("...)
	} else {
		b = append(b, "SELECT pgshard_fence_assert("...)
	}
	return append(appendLiteral(b, key), ')')
}

// appendLiteral appends s as an SQL string literal: quotes doubled, and
// an escape-string literal (E'...') when it holds a backslash (right
// whatever standard_conforming_strings says).
func appendLiteral(b []byte, s string) []byte {
	if strings.IndexByte(s, '\\') >= 0 {
		b = append(b, 'E')
	}
	b = append(b, '\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			b = append(b, '\'', '\'')
		case '\\':
			b = append(b, '\\', '\\')
		default:
			b = append(b, c)
		}
	}
	return append(b, '\'')
}

// StandInTexts are the fence's stand-in texts: for the cluster's bucket
// count, one short text per bucket that hashes to it, computed once. A
// server has one (proxy.Server.standIns); its sessions reach it through hostEnv.
type StandInTexts struct {
	once sync.Once
	st   []string
}

// fenceKeyFor returns the text to assert for a key routed to bucket: the
// key itself when its text hashes there, else the bucket's stand-in.
func (c *StandInTexts) fenceKeyFor(m *shardmap.Map, key string, bucket int) string {
	if shardmap.BucketText(key, m.Buckets) == bucket {
		return key
	}
	st := c.standIns(m.Buckets)
	if bucket < 0 || bucket >= len(st) {
		return key
	}
	return st[bucket]
}

// standIns are, for a bucket count, one short text per bucket that
// hashes to it ("pgshard-fence-<n>" for the least n), computed once
// (the bucket count is fixed for a cluster's life).
func (c *StandInTexts) standIns(buckets int) []string {
	c.once.Do(func() {
		st := make([]string, buckets)
		left := buckets
		var b []byte
		for n := 0; left > 0 && n < 1<<24; n++ {
			b = strconv.AppendInt(append(b[:0], "pgshard-fence-"...), int64(n), 10)
			if k := shardmap.BucketText(string(b), buckets); st[k] == "" {
				st[k] = string(b)
				left--
			}
		}
		c.st = st
	})
	return c.st
}

// known reports whether pool's shard is known to have the fence under
// generation g (never asks: the backend may have bytes queued).
func (f *PoolFences) known(g *GenerationEnv, pool *backend.Pool) bool {
	on, _ := f.decided(g, pool)
	return on
}

// decided is whether transactions on pool assert their key under
// generation g, when that is known without asking the backend (by the
// configuration, or by an earlier question of the pool: fenced asks). A
// nil f knows only what the configuration says.
func (f *PoolFences) decided(g *GenerationEnv, pool *backend.Pool) (on, known bool) {
	if on, decided := g.fenceByConfig(); decided {
		return on, true
	}
	if f == nil {
		return false, false
	}
	v, _ := f.m.Load(pool)
	switch st, _ := v.(*atomic.Int32); {
	case st == nil:
		return false, false
	case st.Load() >= fencePresent:
		return true, true
	case st.Load() == fenceAbsent:
		return false, true
	}
	return false, false
}

// callForm reports whether the assert on pool goes as CALL of 0013's
// procedure: under FenceOn always (the configuration says the shards
// have the fence's migrations, through 0015); under FenceAuto when the
// pool's question found the procedure (a shard migrated only through
// 0012 gets SELECT of the function).
func (f *PoolFences) callForm(g *GenerationEnv, pool *backend.Pool) bool {
	return f.atLeast(g, pool, fenceCall)
}

// servedChecked reports whether a read of every shard checks pool's
// served set against the map (route.Table.ServedSQL, servedretry.go):
// under FenceOn always; under FenceAuto when the pool's question found
// 0015's function.
func (f *PoolFences) servedChecked(g *GenerationEnv, pool *backend.Pool) bool {
	return f.atLeast(g, pool, fenceServed)
}

// atLeast reports whether pool's shard has the fence's migrations up to
// the state want (fenceCall, fenceServed): under FenceOn always (the
// configuration says the shards have them all, through 0015), under
// FenceAuto as the pool's question found.
func (f *PoolFences) atLeast(g *GenerationEnv, pool *backend.Pool, want int32) bool {
	if g.Config.Fence == FenceOn {
		return true
	}
	if f == nil || pool == nil {
		return false
	}
	v, _ := f.m.Load(pool)
	st, _ := v.(*atomic.Int32)
	return st != nil && st.Load() >= want
}

// fenceCall reports whether the plan's assert goes as CALL (callForm)
// on the transaction's backend, or else the plan's shard.
func (pl *planner) fenceCall() bool {
	s := pl.s
	var f *PoolFences
	if s.host != nil {
		f = s.host.Fences
	}
	switch {
	case s.bc != nil:
		return f.callForm(s.gen, s.bc.Pool)
	case pl.shard >= 0 && pl.shard < len(s.gen.Pools):
		return f.callForm(s.gen, s.gen.Pools[pl.shard])
	}
	return f.callForm(s.gen, nil)
}

// fencePortalName is the assert's portal inside a pipeline: named, so
// the client's unnamed portal is left alone; closed after it ran (an
// error ends the transaction, and the portal with it).
const fencePortalName = "pgshard_fence"

// fenceHeld asserts the key of the statement being planned on the
// transaction's backend when its bucket was not asserted yet in this
// transaction (a later keyed statement: another bucket, or a transaction
// whose first statements ran without a key). In a simple query the
// assert goes first in the client's query string (appendClientQuery; a
// Query of its own for a SQL EXECUTE or a non-ASCII key); in a pipeline
// an unnamed Parse (the
// next Bind of the client's unnamed statement parses it again:
// backendUnnamed), a Bind to a named portal, its Execute and Close. Its answers are swallowed; its
// error is the client's, and the client's statement's 25P02 dropped.
func (p backendExec) fenceHeld() {
	s := p.planner.s
	defer p.planner.fence.clear() // used once
	if !p.planner.fence.set() || p.planner.noFence || s.own != nil || s.bc == nil || s.txn.bstatus == 'E' || !s.host.Fences.known(s.gen, s.bc.Pool) {
		return
	}
	m := s.gen.Config.Map
	if slices.Contains(s.fenceBuckets, p.planner.fence.bucket) {
		return
	}
	key := s.host.StandIns.fenceKeyFor(m, p.planner.fence.text(), p.planner.fence.bucket)
	// A soft transaction's first keyed statement may be retried.
	fl := fSwallow | fReplay | p.fenceRetryFlag(true)
	switch {
	case p.planner.simple && p.planner.inlineOK && inlinable(key):
		p.planner.inlineFence, p.planner.inlineFlags = key, fl
	case p.planner.simple:
		bw, sp := pgwire.BeginMsg(p.planner.plan.bw, 'Q')
		p.planner.plan.bw = pgwire.FinishMsg(append(appendFenceSQL(bw, key, p.planner.fenceCall()), 0), sp)
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itQuery, flags: fl})
	default:
		p.appendFenceExtended(key, fl&fFence)
	}
	s.fenceBuckets = append(s.fenceBuckets, p.planner.fence.bucket)
}

// appendFenceExtended appends the assert of key as pipeline messages:
// an unnamed Parse (the next Bind of the client's unnamed statement
// parses it again: backendUnnamed), a Bind to a named portal (the
// client's unnamed portal is left alone), its Execute and Close; every
// answer swallowed, its error the client's. flag is fFence or 0.
func (p backendExec) appendFenceExtended(key string, flag itemFlags) {
	fl := fSwallow | fReplay | flag
	p.planner.plan.bw = pgwire.AppendParseMsg(p.planner.plan.bw, "", fenceSQL(key, p.planner.fenceCall()), nil)
	p.planner.plan.bw = pgwire.AppendBindText(p.planner.plan.bw, fencePortalName, "", nil)
	p.planner.plan.bw = pgwire.AppendExecute(p.planner.plan.bw, fencePortalName, 0)
	p.planner.plan.bw = pgwire.AppendClose(p.planner.plan.bw, 'P', fencePortalName)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itParse, flags: fl}, item{kind: itBind, flags: fl},
		item{kind: itExecute, flags: fl}, item{kind: itClose, flags: fl})
	p.planner.backendUnnamed = nil
}

// inlinable reports whether key's assert may go inline in a client's
// query string: an ASCII key, so the assert's length in characters (the
// unit of an error's position) is its length in bytes whatever the
// client's encoding.
func inlinable(key string) bool {
	for i := 0; i < len(key); i++ {
		if key[i] >= 0x80 || key[i] == 0 {
			return false
		}
	}
	return true
}

// appendClientQuery appends the client's Query message msg as the
// client's item (flags queryFlags, effect eff). With an assert to
// inline (planner.inlineFence, set by ensureBackend or fenceHeld), the
// Query sent is the assert, then the client's query string:
//
//	Query "CALL pgshard_fence_enter('k');\n<the client's string>"
//
// one implicit transaction (or a part of the client's transaction
// block), answered by an itQueryHead item (the assert's row and
// CommandComplete swallowed; its error is the client's, and ends the
// string: Postgres skips the rest) and the client's itQuery (its
// statements' answers and the ReadyForQuery). Positions in errors and
// notices of either are moved back by the assert's length (posShift),
// so they point into the client's own string.
func (p queryPlanner) appendClientQuery(msg []byte, eff *effect) {
	key := p.planner.inlineFence
	if key == "" {
		p.planner.plan.bw = append(p.planner.plan.bw, msg...)
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itQuery, flags: p.planner.queryFlags(), eff: eff})
		return
	}
	p.planner.inlineFence = ""
	bw, sp := pgwire.BeginMsg(p.planner.plan.bw, 'Q')
	start := len(bw)
	bw = append(appendFenceSQL(bw, key, p.planner.fenceCall()), ";\n"...)
	shift := int32(len(bw) - start)
	bw = append(bw, pgwire.Body(msg)...) // the client's string and its NUL
	p.planner.plan.bw = pgwire.FinishMsg(bw, sp)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itQueryHead, flags: p.planner.inlineFlags, posShift: shift},
		item{kind: itQuery, flags: p.planner.queryFlags(), eff: eff, posShift: shift})
}

// shiftPosition returns the ErrorResponse or NoticeResponse msg with its
// position field ('P') moved back by shift characters (an inlined
// assert's length), appended to dst; msg as is when it has no position
// past the assert. A negative shift (noPosition) drops the field: the
// position is in a text the client did not send.
func shiftPosition(dst, msg []byte, shift int32) []byte {
	if shift == 0 {
		return append(dst, msg...)
	}
	b := pgwire.Body(msg)
	for i := 0; i < len(b) && b[i] != 0; {
		code := b[i]
		v, j, err := pgwire.CString(b, i+1)
		if err != nil {
			break
		}
		if code == 'P' && shift < 0 {
			out, sp := pgwire.BeginMsg(dst, msg[0])
			out = append(out, b[:i]...)
			out = append(out, b[j:]...) // the fields after it
			return pgwire.FinishMsg(out, sp)
		}
		if code == 'P' {
			n, err := strconv.Atoi(string(v))
			if err != nil || n <= int(shift) {
				break
			}
			out, sp := pgwire.BeginMsg(dst, msg[0])
			out = append(out, b[:i+1]...)
			out = strconv.AppendInt(out, int64(n)-int64(shift), 10)
			out = append(out, b[j-1:]...) // from the value's NUL on
			return pgwire.FinishMsg(out, sp)
		}
		i = j
	}
	return append(dst, msg...)
}

// noPosition is the posShift of the items of a statement the proxy runs
// for the client's EXECUTE (sqlExecute): an error's position is in the
// prepared statement's text, not the client's, and Postgres reports
// none there.
const noPosition = -1

// fenceSQL is appendFenceSQL as a string.
func fenceSQL(key string, call bool) string {
	return string(appendFenceSQL(make([]byte, 0, len(key)+40), key, call))
}

// CodeFenceRefused is the fence's SQLSTATE: the shard does not own the
// key's bucket (the proxy's map is stale, or the range is moving).
const CodeFenceRefused = "PS001"
