package reshard

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgshard/pgshard/catalog"
)

// MoveStatus is one journaled move as `pgshard reshard status` shows it:
// the journal's record and, for a move whose capture runs (copying,
// catching up, frozen), its lag — the change records on the source not
// replayed on the destination yet, i.e. what the next catch-up (or the
// freeze's last one) still has to copy.
type MoveStatus struct {
	catalog.MoveRecord
	// Lag is the count of change records waiting on the source; -1 when
	// the move has no capture running (planned, flipped or later).
	Lag int64
	// LagErr says why Lag could not be read (the source is down); Lag is
	// then -1.
	LagErr error
}

// capturing reports whether a move in phase has its change capture running.
func capturing(phase string) bool {
	switch phase {
	case catalog.PhaseCopying, catalog.PhaseCatchingUp, catalog.PhaseFrozen:
		return true
	}
	return false
}

// Status reads the journal (unfinished moves only, or all) and, for each
// move whose capture runs, its lag from the source shard. A source that
// cannot be reached does not fail the status: its moves carry LagErr.
func Status(ctx context.Context, cat *catalog.Catalog, unfinishedOnly bool) ([]MoveStatus, error) {
	moves, err := cat.Moves(ctx, unfinishedOnly)
	if err != nil {
		return nil, err
	}
	out := make([]MoveStatus, len(moves))
	var need bool
	for i, m := range moves {
		out[i] = MoveStatus{MoveRecord: m, Lag: -1}
		need = need || capturing(m.Phase)
	}
	if !need {
		return out, nil
	}
	m, err := cat.Load(ctx)
	if err != nil {
		return nil, err
	}
	open := map[string]*shard{}
	defer func() {
		for _, s := range open {
			s.pool.Close()
		}
	}()
	for i := range out {
		ms := &out[i]
		if !capturing(ms.Phase) {
			continue
		}
		src, ok := open[ms.From]
		if !ok {
			def, err := m.ShardByName(ms.From)
			if err != nil {
				ms.LagErr = err
				continue
			}
			if src, err = openShard(ctx, *def); err != nil {
				ms.LagErr = err
				continue
			}
			open[ms.From] = src
		}
		n, err := pending(ctx, src, ms.ID)
		if err != nil {
			ms.LagErr = fmt.Errorf("shard %s: count the change records: %w", ms.From, err)
			continue
		}
		ms.Lag = n
	}
	return out, nil
}

// Statuses wraps journal records without lag (a plan just recorded).
func Statuses(moves []catalog.MoveRecord) []MoveStatus {
	out := make([]MoveStatus, len(moves))
	for i, m := range moves {
		out[i] = MoveStatus{MoveRecord: m, Lag: -1}
	}
	return out
}

// WriteStatus writes moves as a table; a lag that could not be read is
// shown as "?" and its reason listed under the table. FREEZES counts the
// freezes tried; LONGEST (ms) and ABANDONED are read from the freezes the
// journal records in the move's detail ("-" for a move without them: none
// yet, or journaled before they were recorded).
func WriteStatus(w io.Writer, moves []MoveStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBUCKETS\tFROM\tTO\tPHASE\tFREEZES\tLONGEST\tABANDONED\tROWS\tLAG\tEPOCH\tUPDATED\tERROR")
	var notes []string
	for _, m := range moves {
		epoch := strconv.FormatUint(m.FromEpoch, 10)
		if m.ToEpoch > 0 {
			epoch += "→" + strconv.FormatUint(m.ToEpoch, 10)
		}
		lag := "-"
		switch {
		case m.LagErr != nil:
			lag = "?"
			notes = append(notes, fmt.Sprintf("move %d: lag unknown: %s", m.ID, oneLine(m.LagErr.Error())))
		case m.Lag >= 0:
			lag = strconv.FormatInt(m.Lag, 10)
		}
		longest, abandoned := "-", "-"
		switch fs, err := m.Freezes(); {
		case err != nil:
			longest, abandoned = "?", "?"
			notes = append(notes, fmt.Sprintf("move %d: freezes unreadable: %s", m.ID, oneLine(err.Error())))
		case len(fs) > 0:
			sum := catalog.SummarizeFreezes(fs)
			longest = strconv.FormatFloat(float64(sum.Longest.Microseconds())/1000, 'f', 1, 64)
			abandoned = strconv.Itoa(sum.Abandoned)
		}
		fmt.Fprintf(tw, "%d\t%d-%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.ID, m.Lo, m.Hi, m.From, m.To, m.Phase,
			m.Attempts, longest, abandoned, m.RowsCopied, lag, epoch, m.UpdatedAt.UTC().Format(time.RFC3339), oneLine(m.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
