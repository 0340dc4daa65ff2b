package mutant

import (
	"fmt"
	"slices"
	"strings"
)

// Kind names one deliberately broken variant. The empty Kind is no bug:
// the control.
type Kind string

// The mutants. Each is described by its Mutant in All.
const (
	OutboxOutsideTx           Kind = "outbox-outside-tx"
	CASWithoutVersion         Kind = "cas-without-version"
	DedupeOutsideTx           Kind = "dedupe-outside-tx"
	TimerDeleteWithoutFireAt  Kind = "timer-delete-without-fire-at"
	CancelDoesNotDelete       Kind = "cancel-does-not-delete"
	RelayAcksBeforeDelivering Kind = "relay-acks-before-delivering"
	RetryUnknownWithNewEvent  Kind = "retry-unknown-with-new-event"
	TraceTrimOffByOne         Kind = "trace-trim-off-by-one"
	WrongShard                Kind = "placement-wrong-shard"
	SynchronousCommitOff      Kind = "synchronous-commit-off"

	// The resharding mutants: each needs the move faults.
	MoveWithoutFinalCatchUp Kind = "move-without-final-catch-up"
	FlipWithoutFreeze       Kind = "flip-without-freeze"
	ShardNotFencing         Kind = "shard-not-fencing"
	DeleteSourceBeforeFlip  Kind = "delete-source-before-flip"
	ProxyIgnoresFence       Kind = "proxy-ignores-fence"

	// The lease mutants: need the catalog-cut faults.
	ProxyIgnoresLease  Kind = "proxy-ignores-lease"
	RouterIgnoresLease Kind = "router-ignores-lease"
)

// ReshardGroup is the name `pgshard chaos mutants --only` takes for every
// resharding mutant (those whose NeedsFaults include "move").
const ReshardGroup = "reshard"

// Level says where a mutant is plugged in, and so which function applies
// it.
type Level string

const (
	// LevelStore mutants are built into the reference store: OpenStore.
	LevelStore Level = "store"
	// LevelClient mutants wrap the production loadgen.Target: Wrap.
	LevelClient Level = "client"
	// LevelConfig mutants change the shards' server configuration:
	// Configure.
	LevelConfig Level = "config"
	// LevelMover mutants change the steps of the mover's freeze (the
	// move faults' reshard.Options.Around): Mover.
	LevelMover Level = "mover"
	// LevelProxy mutants change the chaos-owned proxy's configuration
	// (the production proxy, configured to lie): ProxyConfig.
	LevelProxy Level = "proxy"
	// LevelRouter mutants change the lease of the router under test's
	// catalog follower (the production router, configured to lie):
	// RouterLeaseTTL.
	LevelRouter Level = "router"
)

// Mutant describes one broken variant.
type Mutant struct {
	Kind  Kind
	Level Level
	// Description says what is broken, in one sentence.
	Description string
	// Exposes says what in a run exposes it (conflicts, stale sweeps,
	// lost acks, crashes, ...) and which invariant then fails.
	Exposes string
	// NeedsFaults lists the fault kinds (as the history's fault lines name
	// them) the scenario must include for the bug to manifest; none means
	// the plain workload exposes it.
	NeedsFaults []string
	// Needs lists what else the run must have for the bug to manifest
	// (store options, shard count); OpenStore refuses to open a store
	// mutant without it.
	Needs []string
}

// all is the catalogue, in the order of issue 9.
var all = []Mutant{
	{
		Kind: OutboxOutsideTx, Level: LevelStore,
		Description: "a commit's outbox rows are inserted and committed in their own transaction before the CAS transaction, so a commit that loses its CAS or fails still leaves its events",
		Exposes:     "conflicts (any lost CAS of a commit with emits): outbox rows, and their deliveries, whose origin op (the op id in the event) never committed — a retry that wins writes the same event ids again under its own op id (outbox: an event exists iff its commit committed)",
	},
	{
		Kind: CASWithoutVersion, Level: LevelStore,
		Description: "the CAS UPDATE has no version predicate (WHERE id = $1) and sets version = expected+1, so a stale writer overwrites the winner instead of conflicting",
		Exposes:     "concurrent commits of one execution: two ok commits expecting the same version, lost updates, versions repeated or going backwards (CAS: one committed writer per version; linearizability)",
	},
	{
		Kind: DedupeOutsideTx, Level: LevelStore,
		Description: "a commit's dedupe row is inserted and committed in its own transaction before the CAS transaction, so a commit that loses its CAS still marks its event processed",
		Exposes:     "conflicts: the retry then sees the event as processed and drops it; dedupe rows of events never applied (dedupe: each row has its applied event; a step's input lost)",
	},
	{
		Kind: TimerDeleteWithoutFireAt, Level: LevelStore,
		Description: "DeleteTimer deletes the timer of (execution_id, path) whatever its fire_at, so a sweep of a stale due timer removes a timer re-armed meanwhile",
		Exposes:     "stale sweeps (a timer re-armed between DueTimers and DeleteTimer, so timers on hot executions): the re-armed timer is gone from the table while the last committed state still arms it, and never fires (timers: armed set equals the last committed state; a stale sweep never removes a re-armed timer)",
	},
	{
		Kind: CancelDoesNotDelete, Level: LevelStore,
		Description: "timer cancels of a commit are skipped: the commit succeeds but the cancelled timer stays armed",
		Exposes:     "any commit that cancels an armed timer: a row the committed state does not arm, returned by due_timers and fired although cancelled; the sweeper then deletes it (its fire_at matches), so after quiesce only the history shows it unless a later schedule or the end of the run comes first (timers: armed set equals the last committed state; fires only of armings)",
	},
	{
		Kind: RelayAcksBeforeDelivering, Level: LevelClient,
		Description: "the relay's PendingOutbox acks (deletes) each row before returning it, so a delivery that then fails loses the event",
		Exposes:     "failed outbox deliveries (a fault during the delivery's load or commit): ack_outbox of a row before its delivering commit, events never delivered (outbox: each event delivered at least once)",
		NeedsFaults: []string{"shard-crash"},
	},
	{
		Kind: RetryUnknownWithNewEvent, Level: LevelClient,
		Description: "a Commit whose outcome is unknown is retried once, after a reload, at the reloaded version with a new event id (event + \"-retry\"), so a commit that did apply is applied twice",
		Exposes:     "unknown outcomes that committed (lost acknowledgements): one input applied twice to an execution, a dedupe row of an event id no step used, a redelivered event the store says is unprocessed",
		NeedsFaults: []string{"lost-ack"},
	},
	{
		Kind: TraceTrimOffByOne, Level: LevelStore,
		Description: "the trace ring is cut to trace_max+1 entries instead of trace_max",
		Exposes:     "any execution with more than trace_max traced commits: a ring of trace_max+1 entries (trace: at most trace_max entries)",
		Needs:       []string{"store.Options.TraceMax > 0"},
	},
	{
		Kind: WrongShard, Level: LevelStore,
		Description: "executions whose bucket is 3 mod 8 (about 1/8) live on the shard after their owner, consistently for every operation on them, so the application works",
		Exposes:     "the final state: rows of those executions (and their outbox, dedupe, timer, spawn and trace rows) on a shard that does not own their bucket (placement)",
		Needs:       []string{"a map with at least 2 shards"},
	},
	{
		Kind: SynchronousCommitOff, Level: LevelConfig,
		Description: "every shard runs with synchronous_commit = off (ALTER SYSTEM + pg_reload_conf), so a commit is acknowledged before its WAL is written",
		Exposes:     "shard crashes (immediate stop or kill -9): acknowledged commits missing after crash recovery (CAS: every acknowledged commit is present)",
		NeedsFaults: []string{"shard-crash"},
	},
	{
		Kind: MoveWithoutFinalCatchUp, Level: LevelMover,
		Description: "the mover freezes the range (writers drained and held back, source fence frozen) but flips without the last catch-up: the changes captured since the catch-up before the freeze never reach the destination",
		Exposes:     "moves of a range written to while it was caught up (hot keys): the destination serves versions older than acknowledged commits, and the clean-up deletes the source's newer rows (linearizability: a load returns a version older than one committed; CAS: acknowledged commits missing)",
		NeedsFaults: []string{"move"},
	},
	{
		Kind: FlipWithoutFreeze, Level: LevelMover,
		Description: "the mover flips without freezing the range: no range lock, the source's fence stays owned until the flip, so writes in flight (and new ones) land on the source after the last catch-up",
		Exposes:     "moves of a range written to during its cut-over (hot keys): commits acknowledged by the source after the last catch-up, missing on the destination and deleted with the source's rows (linearizability; CAS: acknowledged commits missing)",
		NeedsFaults: []string{"move"},
	},
	{
		Kind: ShardNotFencing, Level: LevelConfig,
		Description: "every shard's fence admits every key: pgshard_fence_assert (writes) and pgshard_fence_check (reads) replaced by functions that refuse nothing (the writers still take the range's lock, so a freeze still drains them)",
		Exposes:     "moves: a router whose map is a moment stale (and writers in flight at the cut-over) read and write the range on its old owner, whose rows the clean-up then deletes or leaves behind (linearizability: stale reads, lost acknowledged commits; placement: rows on a shard that does not own their bucket)",
		NeedsFaults: []string{"move"},
	},
	{
		Kind: DeleteSourceBeforeFlip, Level: LevelMover,
		Description: "the mover deletes the range's rows on the source right after the last catch-up, before the flip is recorded, instead of in the clean-up after it",
		Exposes:     "a freeze that does not reach its flip (the mover killed at step flip, the catalog down): resumed, the catch-up replays the deletions onto the destination; aborted, the source owns a range emptied (linearizability: loads of committed executions find nothing; CAS: acknowledged commits missing)",
		NeedsFaults: []string{"move", "mover-kill"},
	},
	{
		Kind: ProxyIgnoresFence, Level: LevelClient,
		Description: "a fence refusal (PS001) is taken for success, as by a proxy that drops the shard's ErrorResponse and answers from the rest of the exchange: a refused commit is acknowledged, a refused load answers that the execution does not exist",
		Exposes:     "refusals that reach the client (a range left frozen, or moved but not yet owned by its destination, by a mover killed at its cut-over; a router whose map is stale): acknowledged commits that never applied, loads that miss committed executions (linearizability; CAS: every acknowledged commit is present)",
		NeedsFaults: []string{"move", "mover-kill"},
	},
	{
		Kind: ProxyIgnoresLease, Level: LevelProxy,
		Description: "the chaos-owned proxy holds its catalog lease with a TTL of an hour while the run records the 2 s it gives the proxy: cut off from the catalog, it goes on routing keyed statements by a map it can no longer prove current, as a proxy that ignores its lapsed lease",
		Exposes:     "catalog cuts longer than the TTL: keyed operations through the proxy that succeed after the cut's start + the TTL, before the heal (lease)",
		NeedsFaults: []string{"catalog-cut"},
	},
	{
		Kind: RouterIgnoresLease, Level: LevelRouter,
		Description: "the router under test holds its catalog lease with a TTL of an hour while the run records the 2 s it gives the router: cut off from the catalog, it goes on serving keyed operations by a map it can no longer prove current, as a router that ignores its lapsed lease",
		Exposes:     "catalog cuts longer than the TTL: keyed operations through the router that succeed after the cut's start + the TTL, before the heal (lease)",
		NeedsFaults: []string{"catalog-cut"},
	},
}

// InGroup reports whether m is one of group's mutants; the only group is
// ReshardGroup.
func (m Mutant) InGroup(group string) bool {
	return group == ReshardGroup && slices.Contains(m.NeedsFaults, "move")
}

// All returns every mutant, in a fixed order. The slice is a copy.
func All() []Mutant {
	out := make([]Mutant, len(all))
	for i, m := range all {
		m.NeedsFaults = append([]string(nil), m.NeedsFaults...)
		m.Needs = append([]string(nil), m.Needs...)
		out[i] = m
	}
	return out
}

// Lookup returns the mutant of kind k; an unknown kind is an error listing
// the known ones.
func Lookup(k Kind) (Mutant, error) {
	for _, m := range All() {
		if m.Kind == k {
			return m, nil
		}
	}
	return Mutant{}, fmt.Errorf("unknown mutant %q (known: %s)", k, strings.Join(kindNames(), ", "))
}

func kindNames() []string {
	out := make([]string, len(all))
	for i, m := range all {
		out[i] = string(m.Kind)
	}
	return out
}

// lookupLevel returns the mutant of kind k and checks that it is applied at
// level want (by the function named fn).
func lookupLevel(k Kind, want Level, fn string) (Mutant, error) {
	m, err := Lookup(k)
	if err != nil {
		return Mutant{}, fmt.Errorf("mutant %s: %w", fn, err)
	}
	if m.Level != want {
		return Mutant{}, fmt.Errorf("mutant %s: %q is a %s-level mutant, %s takes %s-level ones only", fn, k, m.Level, fn, want)
	}
	return m, nil
}
