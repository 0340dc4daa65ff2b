package chaos

import "time"

// ackTolerance is how far a dropped reply's wall-clock times (sent, at)
// may lie outside an op's [t0, t1], which is measured on the monotonic
// clock from the history's start. It is the verifier's tolerance
// (verify/faults.go, dropTolerance): the writer matches the way the
// verifier counts, so that a run does not stop on landings the verdict
// will not count.
const ackTolerance = 250 * time.Millisecond

// Bounds of what the matcher remembers: the history holds nothing that
// grows with the run's length. An unknown-outcome commit waits for a
// dropped reply reported up to a lost-ack's hold later; a dropped reply
// waits for an op that may complete up to the workload's op timeout later.
// Both are seconds; these bounds are thousands of entries.
const (
	maxInfoCommits = 4096
	maxPendingAcks = 1024
)

// infoCommit is an unknown-outcome commit op not yet claimed by a dropped
// reply.
type infoCommit struct {
	shard  string
	t0, t1 int64 // ns since the history's start
}

// pendingAck is a committed dropped reply not yet matched to an op.
type pendingAck struct {
	fault    string
	shard    string // "": any shard (a lost-ack in front of the proxy)
	sent, at int64  // ns since the history's start (wall clock)
}

// matches reports whether op may be the commit whose reply d dropped: the
// same shard, and [t0, t1] overlapping [sent, at] within ackTolerance.
func (d pendingAck) matches(op infoCommit) bool {
	if d.shard != "" && op.shard != d.shard {
		return false
	}
	tol := int64(ackTolerance)
	return op.t0 <= d.sent+tol && op.t1 >= d.at-tol
}

// ackMatcher corroborates lost acknowledgements online, the way the
// verifier does after the run (verify/faults.go, landings): each
// committed dropped reply claims one unknown-outcome commit op of its
// shard whose window overlaps the drop's. The op and the heal that
// reports the drop come in either order: each waits (bounded) for the
// other. A lost-ack is corroborated once one of its drops is matched.
//
//	info commit op ─▶ claims the first pending drop it matches, else waits in infos
//	lost-ack heal ──▶ each committed drop claims the first waiting op it matches, else waits in drops
//
// The verifier also requires the claimed op's commit to be in the final
// state, which only the end can tell; the run's margin covers that.
// Guarded by History.mu.
type ackMatcher struct {
	infos     []infoCommit
	drops     []pendingAck
	confirmed map[string]bool // lost-ack fault ids with a matched drop
}

// observeInfo takes an unknown-outcome commit op.
func (m *ackMatcher) observeInfo(op infoCommit) {
	for i, d := range m.drops {
		if d.matches(op) {
			m.drops = append(m.drops[:i], m.drops[i+1:]...)
			m.confirm(d.fault)
			return
		}
	}
	if len(m.infos) >= maxInfoCommits {
		m.infos = m.infos[1:]
	}
	m.infos = append(m.infos, op)
}

// observeDrop takes one committed dropped reply of a lost-ack's heal.
func (m *ackMatcher) observeDrop(d pendingAck) {
	for i, op := range m.infos {
		if d.matches(op) {
			m.infos = append(m.infos[:i], m.infos[i+1:]...)
			m.confirm(d.fault)
			return
		}
	}
	if len(m.drops) >= maxPendingAcks {
		m.drops = m.drops[1:]
	}
	m.drops = append(m.drops, d)
}

func (m *ackMatcher) confirm(fault string) {
	if m.confirmed == nil {
		m.confirmed = map[string]bool{}
	}
	m.confirmed[fault] = true
}

// committedDrops are the dropped replies of a lost-ack's evidence the
// verifier counts: a committed commit's, whole (its times known).
func committedDrops(ev map[string]any) []DroppedReply {
	all, _ := ev["replies"].([]DroppedReply)
	var out []DroppedReply
	for _, d := range all {
		if !d.Error && d.Committed != nil && *d.Committed && d.Status == "I" && !d.Sent.IsZero() && !d.At.IsZero() {
			out = append(out, d)
		}
	}
	return out
}
