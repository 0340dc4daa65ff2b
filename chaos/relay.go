package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The relay: a TCP relay between clients and one upstream (a Postgres, a
// PgBouncer or the proxy) on which the network faults are switched at
// runtime.
//
//	client > [relay: frame > mode] > upstream
//	client < [relay: frame < mode] < upstream
//
//	accept ──▶ relayConn ──▶ dial upstream
//	             ├─ up pump:   read client ─▶ frame (count requests, spot commits) ─▶ gate ─▶ write upstream
//	             └─ down pump: read upstream ─▶ frame (count ReadyForQuery, hold a dropped reply) ─▶ gate ─▶ write client
//
//	gate: partition (drop the chunk) │ stall (hold it until unstalled) │ latency (sleep, then pass)
//
// Hand-written, not Toxiproxy: Toxiproxy's toxics draw from the global
// math/rand, so a run cannot be reproduced from its seed, and it does not
// frame the Postgres protocol, which the lost-ack fault needs (drop exactly
// the reply to a commit after the server sent all of it).
//
// The modes (latency, stall, partition, lost-ack arming) are the relay's
// configuration, switched under its mutex; what each connection is doing
// (framers, counters, a reply being held) lives in its relayConn, outside
// the configuration (Toxiproxy's good habit). Every goroutine — the accept
// loop, one per connection for the downstream direction, one for the
// upstream direction — is owned by the relay, and Close waits for them.

// RelayOptions configure NewRelay. The zero value is usable.
type RelayOptions struct {
	// Name labels the relay in errors and logs (e.g. "shard0").
	Name string
	// DialTimeout bounds each upstream connection (default 5 s).
	DialTimeout time.Duration
	// Logf receives debug lines (connection resets, dropped replies);
	// nil is silent.
	Logf func(format string, args ...any)
}

// RelayStats are a relay's counters since it started.
type RelayStats struct {
	// Accepted counts client connections accepted, Active those open now,
	// Closed those that ended (any way).
	Accepted, Active, Closed int64
	// BytesUp were forwarded client → upstream, BytesDown upstream →
	// client.
	BytesUp, BytesDown int64
	// Delayed counts chunks delayed by latency, Held chunks held by a
	// stall, Blackholed chunks dropped by a partition.
	Delayed, Held, Blackholed int64
	// Resets counts connections reset (RST to both sides): by Reset, by
	// healing a partition, after a dropped reply.
	Resets int64
	// DroppedReplies counts commit replies dropped (the lost-ack fault);
	// PassedReplies counts held commit replies passed on because they
	// were not a committed commit's (an error, a lost compare-and-swap, a
	// transaction still open).
	DroppedReplies, PassedReplies int64
	// DialErrors counts upstream connections that failed.
	DialErrors int64
	// Unframed counts connections on which the protocol framer gave up
	// (the relay then copies them plainly; lost-ack cannot act on them).
	Unframed int64
}

// DroppedReply is one commit reply the relay dropped. Only the reply of a
// commit that committed is dropped: no ErrorResponse, the commit
// function's first column true (committed, not a lost compare-and-swap)
// and the ReadyForQuery idle (the transaction ended). Any other reply is
// passed on and the arm kept for the next commit.
type DroppedReply struct {
	// Conn is the relay connection's id (1, 2, ... in accept order): the
	// backend connection whose reply was dropped.
	Conn uint64 `json:"conn"`
	// Sent is when the commit request was forwarded upstream, At when its
	// reply was complete (and dropped): the op lies around [Sent, At].
	// Both are read on the monotonic clock (Relay.now): the wall time of
	// the relay's start plus the monotonic time since, so that a step of
	// the wall clock during a run does not move them against the ops'
	// times, which the history measures on the monotonic clock.
	Sent time.Time `json:"sent"`
	At   time.Time `json:"at"`
	// Bytes is the size of the dropped reply.
	Bytes int `json:"bytes"`
	// Error: the reply carried an ErrorResponse; SQLState is its code.
	// Always false for a dropped reply (such replies are passed on).
	Error    bool   `json:"error"`
	SQLState string `json:"sqlstate,omitempty"`
	// Committed is the commit function's first result column; always
	// true for a dropped reply.
	Committed *bool `json:"committed,omitempty"`
	// Status is the ReadyForQuery's transaction status ("I").
	Status string `json:"status"`
}

// maxHeldReply bounds the bytes of a reply held while the relay waits to
// see whether it is a committed commit's; a longer reply is passed on.
const maxHeldReply = 1 << 20

// maxDropLog bounds the dropped replies a relay remembers.
const maxDropLog = 10000

// relayMode is the relay's fault configuration.
type relayMode struct {
	delay, jitter time.Duration
	rng           *rand.Rand // jitter source; used under Relay.mu
	stalled       bool
	partitioned   bool
}

// Relay is a TCP relay with switchable network faults; see the diagram
// above. It is safe for concurrent use. Create it with NewRelay, stop it
// with Close.
type Relay struct {
	name, upstream string
	dialTimeout    time.Duration
	logf           func(format string, args ...any)
	ln             net.Listener
	epoch          time.Time       // the relay's start (with its monotonic reading): see now
	ctx            context.Context // ends when the relay closes (cancels dials)
	cancel         context.CancelFunc

	mu      sync.Mutex
	conns   map[*relayConn]struct{}
	mode    relayMode
	changed chan struct{} // closed and replaced on every mode change
	closed  bool
	nextID  uint64
	// Lost-ack arming: armed replies are still to drop; armGen tells
	// arms apart from ones taken before a Disarm.
	armed  int
	armGen uint64
	drops  []DroppedReply
	dropCh chan struct{} // closed and replaced on every dropped reply
	// Stall and partition accounting.
	stallEpoch            uint64
	stallHeld             int
	stallInFlight         int
	partHeld, partRefused int
	// partInFlight: connections with a request in flight when the
	// partition began; partReqs: client chunks it swallowed since.
	partInFlight, partReqs int

	armedHint   atomic.Bool  // armed > 0, read without the lock on the hot path
	lastDialLog atomic.Int64 // unix nanos of the last dial error logged
	st          struct {
		accepted, active, closed, bytesUp, bytesDown, delayed, held, blackholed,
		resets, dropped, passed, dialErrors, unframed atomic.Int64
	}
	wg sync.WaitGroup
}

// NewRelay listens on 127.0.0.1:0 and relays every connection to upstream
// (host:port).
func NewRelay(upstream string, opts RelayOptions) (*Relay, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("relay %s: upstream %q: %w", opts.Name, upstream, err)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("relay %s: listen: %w", opts.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{
		name: opts.Name, upstream: upstream, dialTimeout: opts.DialTimeout, logf: opts.Logf,
		ln: ln, ctx: ctx, cancel: cancel, epoch: time.Now(),
		conns: map[*relayConn]struct{}{}, changed: make(chan struct{}), dropCh: make(chan struct{}),
	}
	r.wg.Go(r.acceptLoop)
	return r, nil
}

// now is the time on the relay's clock: its start's wall time plus the
// monotonic time since. Its wall reading (what a history records of a
// dropped reply) follows the monotonic clock even if the wall clock is
// stepped: a dropped reply's times stay comparable with the ops' (verify
// matches them within 250 ms).
func (r *Relay) now() time.Time { return r.epoch.Add(time.Since(r.epoch)) }

// Addr is the relay's listening address (127.0.0.1:PORT).
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Upstream is the address the relay connects to.
func (r *Relay) Upstream() string { return r.upstream }

// Name is the relay's label (RelayOptions.Name).
func (r *Relay) Name() string { return r.name }

func (r *Relay) debugf(format string, args ...any) {
	if r.logf != nil {
		r.logf("relay %s: "+format, append([]any{r.name}, args...)...)
	}
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Accepted: r.st.accepted.Load(), Active: r.st.active.Load(), Closed: r.st.closed.Load(),
		BytesUp: r.st.bytesUp.Load(), BytesDown: r.st.bytesDown.Load(),
		Delayed: r.st.delayed.Load(), Held: r.st.held.Load(), Blackholed: r.st.blackholed.Load(),
		Resets: r.st.resets.Load(), DroppedReplies: r.st.dropped.Load(), PassedReplies: r.st.passed.Load(),
		DialErrors: r.st.dialErrors.Load(), Unframed: r.st.unframed.Load(),
	}
}

// changeLocked wakes every connection waiting for a mode change. r.mu is
// held.
func (r *Relay) changeLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// SetLatency delays every chunk forwarded in either direction by delay
// plus a jitter drawn uniformly from [0, jitter) with rng (nil: no jitter),
// so a request-reply round trip takes at least 2×delay more. Zero delay and
// jitter turn latency off. The relay uses rng under its lock, so the jitter
// sequence is the rng's, in the order chunks pass.
func (r *Relay) SetLatency(delay, jitter time.Duration, rng *rand.Rand) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rng == nil {
		jitter = 0
	}
	r.mode.delay, r.mode.jitter, r.mode.rng = max(delay, 0), max(jitter, 0), rng
	r.changeLocked()
}

// Stall stops forwarding in both directions: chunks read are held (and
// the rest stays in the sockets) until Unstall, which delivers them. New
// connections are accepted and connected, and stall too. It returns the
// connections open now.
func (r *Relay) Stall() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mode.stalled {
		r.mode.stalled = true
		r.stallEpoch++
		r.stallHeld = 0
		r.stallInFlight = 0
		for c := range r.conns {
			if c.inFlight() {
				r.stallInFlight++
			}
		}
		r.changeLocked()
	}
	return len(r.conns)
}

// StallInFlight is how many connections had a request in flight when the
// last stall began (their replies were held by it).
func (r *Relay) StallInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stallInFlight
}

// Unstall resumes forwarding and delivers what was held. It returns how
// many connections had data held since Stall (0 if not stalled).
func (r *Relay) Unstall() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mode.stalled {
		return 0
	}
	r.mode.stalled = false
	r.changeLocked()
	return r.stallHeld
}

// Reset resets every connection now (RST to the client and to the
// upstream) and returns how many it reset. New connections are relayed as
// usual.
func (r *Relay) Reset() int {
	n, _ := r.ResetInFlight()
	return n
}

// InFlight counts the connections with a request in flight now.
func (r *Relay) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for c := range r.conns {
		if c.inFlight() {
			n++
		}
	}
	return n
}

// ResetInFlight is Reset, and also says how many of the connections it
// reset had a request in flight (sent, its ReadyForQuery not yet seen):
// those are the resets a client must notice as a failed request.
func (r *Relay) ResetInFlight() (reset, inFlight int) {
	// The busy connections go first: a request can complete between a
	// caller's InFlight and this reset, and the busy ones are the resets
	// that matter, so their window is kept to one close each.
	r.mu.Lock()
	busy := make([]*relayConn, 0, len(r.conns))
	var idle []*relayConn
	for c := range r.conns {
		if c.inFlight() {
			busy = append(busy, c)
		} else {
			idle = append(idle, c)
		}
	}
	r.mu.Unlock()
	for _, c := range busy {
		wasBusy := c.inFlight()
		if c.close(true) {
			reset++
			if wasBusy {
				inFlight++
			}
		}
	}
	for _, c := range idle {
		if c.close(true) {
			reset++
		}
	}
	r.st.resets.Add(int64(reset))
	if reset > 0 {
		r.debugf("reset %d connections (%d with a request in flight)", reset, inFlight)
	}
	return reset, inFlight
}

// Partition blackholes the upstream: the open connections forward nothing
// any more (what they read is dropped), and new connections are accepted
// but never connected upstream. Unpartition resets all of them. It returns
// the connections blackholed now.
func (r *Relay) Partition() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode.partitioned {
		return 0
	}
	r.mode.partitioned = true
	r.partHeld, r.partRefused, r.partInFlight, r.partReqs = 0, 0, 0, 0
	for c := range r.conns {
		c.partitioned = true
		r.partHeld++
		if c.inFlight() {
			r.partInFlight++
		}
	}
	r.changeLocked()
	return r.partHeld
}

// PartitionLoad says what the last partition held: connections with a
// request in flight when it began, and client chunks (requests, logins)
// it swallowed since. Valid after Unpartition too, until the next
// Partition.
func (r *Relay) PartitionLoad() (inFlight, requests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.partInFlight, r.partReqs
}

// Unpartition ends a partition: every connection blackholed by it (held)
// or accepted during it (refused) is reset; new connections are relayed
// as usual. It returns those two counts (0, 0 if not partitioned).
func (r *Relay) Unpartition() (held, refused int) {
	r.mu.Lock()
	if !r.mode.partitioned {
		r.mu.Unlock()
		return 0, 0
	}
	r.mode.partitioned = false
	held, refused = r.partHeld, r.partRefused
	var conns []*relayConn
	for c := range r.conns {
		if c.partitioned {
			conns = append(conns, c)
		}
	}
	r.changeLocked()
	r.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.close(true) {
			n++
		}
	}
	r.st.resets.Add(int64(n))
	return held, refused
}

// DropCommitReplies arms the relay to drop the server's reply to the next
// n commits (Parse or Query messages calling pgshard_commit_cas,
// pgshard_commit or harel_commit_cas; see isCommit), each on another
// connection: the request is forwarded, the whole reply up to its
// ReadyForQuery is read and dropped, and both sides are reset. So the
// commit ran to its end on the server while the client only sees its
// connection fail. Arms add up; Disarm cancels those left.
func (r *Relay) DropCommitReplies(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed += n
	r.armedHint.Store(true)
}

// Disarm cancels the arms of DropCommitReplies not yet used (a reply
// already being held is still dropped). It returns how many it cancelled.
func (r *Relay) Disarm() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.armed
	r.armed = 0
	r.armGen++
	r.armedHint.Store(false)
	return n
}

// DroppedReplies returns the replies dropped so far (the last 10,000).
func (r *Relay) DroppedReplies() []DroppedReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]DroppedReply(nil), r.drops...)
}

// waitDropped waits until the relay has dropped more than have replies in
// total (the length of DroppedReplies), or ctx ends.
func (r *Relay) waitDropped(ctx context.Context, have int64) error {
	for {
		r.mu.Lock()
		ch := r.dropCh
		r.mu.Unlock()
		if r.st.dropped.Load() > have {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// takeArm uses one arm for c, if any is left.
func (r *Relay) takeArm(c *relayConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed <= 0 {
		return false
	}
	r.armed--
	r.armedHint.Store(r.armed > 0)
	c.armGen = r.armGen
	return true
}

// recordDrop logs a dropped reply of c. It reports false if c was already
// closed (the reply is then not counted: the arm went back).
func (r *Relay) recordDrop(c *relayConn, d DroppedReply) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.isClosed() {
		return false
	}
	c.dropDone = true
	if len(r.drops) >= maxDropLog {
		r.drops = r.drops[1:]
	}
	r.drops = append(r.drops, d)
	r.st.dropped.Add(1)
	close(r.dropCh)
	r.dropCh = make(chan struct{})
	return true
}

// PassThrough heals every fault: no latency, not stalled (held data is
// delivered), not partitioned (blackholed connections are reset), no
// arms left. Idempotent.
func (r *Relay) PassThrough() {
	r.SetLatency(0, 0, nil)
	r.Unstall()
	r.Unpartition()
	r.Disarm()
}

// Close stops the relay: it stops accepting, closes every connection and
// waits for all of its goroutines.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.closed = true
	conns := make([]*relayConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.changeLocked()
	r.mu.Unlock()
	err := r.ln.Close()
	r.cancel()
	for _, c := range conns {
		c.close(false)
	}
	r.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("relay %s: close: %w", r.name, err)
	}
	return nil
}

func (r *Relay) acceptLoop() {
	for {
		conn, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || r.ctx.Err() != nil {
				return
			}
			// EMFILE and the like: back off a little.
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		r.st.accepted.Add(1)
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			_ = conn.Close()
			continue
		}
		r.nextID++
		c := &relayConn{r: r, id: r.nextID, client: conn, done: make(chan struct{}),
			fe: newFramer(frontendSide), be: newFramer(backendSide)}
		c.upFraming.Store(true)
		c.downFraming.Store(true)
		if r.mode.partitioned {
			c.partitioned, c.refused = true, true
			r.partRefused++
		}
		r.conns[c] = struct{}{}
		r.st.active.Add(1)
		r.mu.Unlock()
		r.wg.Go(c.run)
	}
}

// relayConn is one relayed connection and its protocol state.
type relayConn struct {
	r      *Relay
	id     uint64
	client net.Conn
	done   chan struct{} // closed by close
	once   sync.Once

	// Guarded by r.mu.
	up          net.Conn // nil until dialed
	partitioned bool     // blackholed by a partition (or accepted during one)
	refused     bool     // accepted during a partition: never connected
	stallEpoch  uint64   // the last stall that held data of this connection
	armGen      uint64   // generation of the arm dropAt took
	dropDone    bool     // the reply at dropAt was dropped

	fe, be      *framer // the up pump's and the down pump's
	upFraming   atomic.Bool
	downFraming atomic.Bool
	reqs        atomic.Int64    // StartupMessage, Sync, Query and FunctionCall messages sent: each earns a ReadyForQuery
	rfqs        atomic.Int64    // ReadyForQuery messages forwarded to the client (the down pump's rfq once written, for other goroutines)
	sentNS      atomic.Int64    // ns since the relay's epoch when the commit whose reply is to drop was forwarded
	oneByte     atomic.Int32    // one-byte answers (to SSLRequest, GSSENCRequest) the server owes
	dropAt      atomic.Int64    // number of the ReadyForQuery whose reply is dropped; 0: none
	commitStmts map[string]bool // prepared statements that are commits (the up pump's own)

	// The down pump's own.
	rfq     int64 // ReadyForQuery messages seen
	holding bool  // the reply being read is held until its ReadyForQuery says whether to drop it
	drop    DroppedReply
	held    []byte // the held reply's bytes read in earlier chunks
	release []byte // a held reply to pass on before the current chunk's bytes
}

// inFlight reports whether the connection has a request (or a login) in
// flight: sent, its ReadyForQuery not yet written to the client. A reset
// while the ReadyForQuery is framed but not yet written still fails the
// request, so it counts.
func (c *relayConn) inFlight() bool { return c.reqs.Load() > c.rfqs.Load() }

func (c *relayConn) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// close tears the connection down once (reset: RST both sides instead of
// a FIN); it reports whether this call did it.
func (c *relayConn) close(reset bool) bool {
	did := false
	c.once.Do(func() {
		did = true
		r := c.r
		r.mu.Lock()
		up := c.up
		delete(r.conns, c)
		close(c.done)
		if c.dropAt.Load() > 0 && !c.dropDone && c.armGen == r.armGen {
			r.armed++ // the reply never came: give the arm back
			r.armedHint.Store(true)
		}
		r.mu.Unlock()
		if reset {
			setLinger0(c.client)
			setLinger0(up)
		}
		_ = c.client.Close()
		if up != nil {
			_ = up.Close()
		}
		r.st.active.Add(-1)
		r.st.closed.Add(1)
	})
	return did
}

func setLinger0(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// run serves the connection: it connects upstream (unless partitioned),
// pumps upstream → client itself and client → upstream on a second
// goroutine.
func (c *relayConn) run() {
	r := c.r
	defer c.close(false)
	r.mu.Lock()
	refused := c.refused
	r.mu.Unlock()
	if refused {
		c.blackhole()
		return
	}
	d := net.Dialer{Timeout: r.dialTimeout}
	up, err := d.DialContext(r.ctx, "tcp", r.upstream)
	if err != nil {
		r.st.dialErrors.Add(1)
		if now := time.Now().UnixNano(); now-r.lastDialLog.Load() > int64(time.Second) {
			r.lastDialLog.Store(now)
			r.debugf("conn %d: dial %s: %v (dial errors so far: %d; logged at most once a second)", c.id, r.upstream, err, r.st.dialErrors.Load())
		}
		return
	}
	r.mu.Lock()
	if c.isClosed() {
		r.mu.Unlock()
		_ = up.Close()
		return
	}
	c.up = up
	r.mu.Unlock()
	r.wg.Go(func() {
		defer c.close(false)
		c.pump(c.client, up, true)
	})
	c.pump(up, c.client, false)
}

// blackhole reads and drops what a connection accepted during a partition
// sends, until it is closed (the partition's heal resets it).
func (c *relayConn) blackhole() {
	buf := make([]byte, 4096)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			c.r.st.blackholed.Add(1)
			c.r.mu.Lock()
			c.r.partReqs++
			c.r.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// pumpBuf is the read size of a pump.
const pumpBuf = 32 << 10

// pump copies src to dst through the framer and the gate until either
// fails or the connection closes. upward: client → upstream.
func (c *relayConn) pump(src, dst net.Conn, upward bool) {
	r := c.r
	buf := make([]byte, pumpBuf)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			fwd, act := n, actForward
			if upward {
				if c.upFraming.Load() {
					c.scanUp(chunk)
				}
			} else if c.downFraming.Load() {
				fwd, act = c.scanDown(chunk)
			}
			out := chunk[:fwd]
			if c.release != nil { // a held reply passed on goes first
				out = append(c.release, out...)
				c.release = nil
			}
			if len(out) > 0 {
				pass, err := c.gate(upward)
				if err != nil {
					return
				}
				if pass {
					if _, err := dst.Write(out); err != nil {
						return
					}
					if upward {
						r.st.bytesUp.Add(int64(len(out)))
					} else {
						r.st.bytesDown.Add(int64(len(out)))
						c.rfqs.Store(c.rfq)
					}
				}
			}
			switch act {
			case actDrop:
				c.drop.Conn, c.drop.At = c.id, r.now()
				if r.recordDrop(c, c.drop) {
					r.debugf("conn %d: dropped a committed commit's reply (%d bytes)", c.id, c.drop.Bytes)
					r.st.resets.Add(1)
				}
				c.close(true)
				return
			case actAbort:
				c.close(true)
				return
			}
		}
		if rerr != nil {
			return
		}
	}
}

// scanUp frames client bytes: it counts the requests that earn a
// ReadyForQuery and, when the relay is armed, marks the reply to a commit
// for dropping — before the commit is forwarded, so the down pump knows
// before the reply can come.
func (c *relayConn) scanUp(b []byte) {
	for len(b) > 0 {
		n, fr, ok, err := c.fe.next(b)
		if err != nil {
			c.upFraming.Store(false)
			c.r.st.unframed.Add(1)
			c.r.debugf("conn %d: client stream: %v (copying plainly)", c.id, err)
			return
		}
		b = b[n:]
		if !ok {
			continue
		}
		switch fr.Type {
		case 0:
			switch fr.Code {
			case codeSSLRequest, codeGSSENCReqest:
				c.oneByte.Add(1)
			case codeCancel:
			default: // a StartupMessage: the login ends with a ReadyForQuery
				c.reqs.Add(1)
			}
		case 'P':
			// A prepared commit is armed on its Bind: a client that caches
			// prepared statements parses a commit once per connection.
			if isCommit(fr) {
				if c.commitStmts == nil {
					c.commitStmts = map[string]bool{}
				}
				if len(c.commitStmts) < maxCommitStmts {
					c.commitStmts[parseName(fr.Head)] = true
				}
			} else {
				delete(c.commitStmts, parseName(fr.Head))
			}
		case 'B':
			if name, ok := bindStatement(fr.Head); ok && c.commitStmts[name] {
				c.arm()
			}
		case 'Q':
			if isCommit(fr) {
				c.arm()
			}
		}
		if fr.Type == 'S' || fr.Type == 'Q' || fr.Type == 'F' {
			c.reqs.Add(1)
		}
	}
}

// maxCommitStmts bounds the commit statements a connection remembers.
const maxCommitStmts = 1024

// arm marks the reply to the request being sent — a commit — for the
// down pump to hold, if the relay has an arm left and the connection holds
// no other reply. The up pump's own.
func (c *relayConn) arm() {
	if c.r.armedHint.Load() && c.dropAt.Load() == 0 && c.r.takeArm(c) {
		c.sentNS.Store(int64(time.Since(c.r.epoch)))
		c.dropAt.Store(c.reqs.Load() + 1)
	}
}

// Actions of the down pump after a chunk.
type downAction uint8

const (
	actForward downAction = iota // forward what scanDown allowed, go on
	actDrop                      // the reply to drop is complete: drop it, reset
	actAbort                     // a reply being held cannot be followed: reset
)

// scanDown frames server bytes; it returns how many leading bytes of b to
// forward and what to do then. Once every reply before the marked commit's
// has passed, everything else is held back (not forwarded) until that
// commit's ReadyForQuery.
func (c *relayConn) scanDown(b []byte) (fwd int, act downAction) {
	off := 0
	holdFrom := -1 // where this chunk's held bytes begin
	if c.holding {
		holdFrom = 0
	}
	for off < len(b) {
		if k := c.oneByte.Swap(0); k > 0 {
			c.be.oneByte += int(k)
		}
		if !c.holding && c.be.atBoundary() {
			if d := c.dropAt.Load(); d > 0 && c.rfq == d-1 {
				c.holding = true
				c.drop = DroppedReply{}
				holdFrom = off
			}
		}
		n, fr, ok, err := c.be.next(b[off:])
		if err != nil {
			c.downFraming.Store(false)
			c.upFraming.Store(false)
			c.r.st.unframed.Add(1)
			c.r.debugf("conn %d: server stream: %v (copying plainly)", c.id, err)
			if c.holding {
				return fwd, actAbort
			}
			return len(b), actForward
		}
		off += n
		if c.holding {
			c.drop.Bytes += n
		} else {
			fwd = off
		}
		if !ok {
			continue
		}
		switch fr.Type {
		case 0: // the answer to an SSL or GSS request
			if fr.Code == 'S' || fr.Code == 'G' { // encryption follows: nothing to frame
				c.downFraming.Store(false)
				c.upFraming.Store(false)
				return len(b), actForward
			}
		case 'E':
			if c.holding && !c.drop.Error {
				c.drop.Error, c.drop.SQLState = true, errorCode(fr.Head)
			}
		case 'D':
			if c.holding && c.drop.Committed == nil {
				if v, ok := firstBool(fr.Head); ok {
					c.drop.Committed = &v
				}
			}
		case 'Z':
			c.rfq++ // rfqs follows once the chunk is written (pump)
			if c.holding && c.rfq == c.dropAt.Load() {
				status := byte(0)
				if len(fr.Head) > 0 {
					status = fr.Head[0]
				}
				if !c.drop.Error && c.drop.Committed != nil && *c.drop.Committed && status == 'I' {
					c.drop.Status = "I"
					c.drop.Sent = c.r.epoch.Add(time.Duration(c.sentNS.Load()))
					c.held = nil
					return fwd, actDrop
				}
				// Not a committed commit's reply (an error, a lost
				// compare-and-swap, a transaction still open): pass it
				// on and keep the arm for the next commit.
				c.passHeld()
				fwd, holdFrom = off, -1
			}
		}
	}
	if c.holding && holdFrom >= 0 {
		c.held = append(c.held, b[holdFrom:]...)
		if len(c.held) > maxHeldReply {
			c.passHeld()
			fwd = len(b)
		}
	}
	return fwd, actForward
}

// passHeld stops holding a reply: the bytes held in earlier chunks go out
// before the current chunk's (release), and the arm goes back to the
// relay. The down pump's own.
func (c *relayConn) passHeld() {
	c.release, c.held = c.held, nil
	c.holding = false
	c.dropAt.Store(0)
	r := c.r
	r.st.passed.Add(1)
	r.mu.Lock()
	if c.armGen == r.armGen {
		r.armed++
		r.armedHint.Store(true)
	}
	r.mu.Unlock()
}

// gate applies the relay's mode to a chunk about to be forwarded: it
// waits while stalled, says to drop the chunk when partitioned, sleeps the
// latency. It fails when the connection closes meanwhile.
func (c *relayConn) gate(upward bool) (pass bool, err error) {
	r := c.r
	counted := false
	for {
		r.mu.Lock()
		m := r.mode
		part := c.partitioned
		ch := r.changed
		var jitter time.Duration
		if !part && !m.stalled && m.jitter > 0 && m.rng != nil {
			jitter = time.Duration(m.rng.Int64N(int64(m.jitter)))
		}
		if m.stalled && !part && c.stallEpoch != r.stallEpoch {
			c.stallEpoch = r.stallEpoch
			r.stallHeld++
		}
		r.mu.Unlock()
		switch {
		case part:
			r.st.blackholed.Add(1)
			if upward {
				r.mu.Lock()
				r.partReqs++
				r.mu.Unlock()
			}
			return false, nil
		case m.stalled:
			if !counted {
				counted = true
				r.st.held.Add(1)
			}
			select {
			case <-ch:
				continue
			case <-c.done:
				return false, net.ErrClosed
			}
		}
		if d := m.delay + jitter; d > 0 {
			r.st.delayed.Add(1)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return false, net.ErrClosed
			}
		}
		return true, nil
	}
}
