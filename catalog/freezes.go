package catalog

import (
	"encoding/json"
	"fmt"
	"time"
)

// Freeze outcomes, as a move's detail records them.
const (
	FreezeFlipped   = "flipped"   // the freeze reached the flip (the move's commit point)
	FreezeAbandoned = "abandoned" // undone: the source owned the range again
)

// Why a freeze was abandoned (FreezeRecord.Why).
const (
	WhyDeadline = "deadline" // the range lock, or the last catch-up, did not fit the budget
	WhyCatchUp  = "catch_up" // changes kept coming during the freeze: too many to catch up
	WhyError    = "error"    // a shard or the catalog failed during the freeze
	// WhyMapChanged: the catalog's map changed between the flip's
	// preparation and the flip (another move flipped, or a push).
	WhyMapChanged = "map_changed"
)

// FreezeRecord is one freeze of a move as the journal records it, in the
// move's detail under "freezes" (appended by MoveUpdate.Freezes, in the
// order tried): when the range lock was requested (UTC, to the
// microsecond), how long writes were held (ms, to the microsecond) and how
// it ended. Journal rows written before freezes were recorded have none.
type FreezeRecord struct {
	StartedAt time.Time `json:"started_at"`
	MS        float64   `json:"ms"`
	Outcome   string    `json:"outcome"`
	Why       string    `json:"why,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// NewFreezeRecord is a freeze that started at start and held writes for
// d, normalized as the journal stores it (UTC, microseconds; a negative
// d is 0).
func NewFreezeRecord(start time.Time, d time.Duration, outcome, why, errText string) FreezeRecord {
	return FreezeRecord{StartedAt: start.UTC().Truncate(time.Microsecond), MS: float64(max(d, 0).Microseconds()) / 1000,
		Outcome: outcome, Why: why, Error: errText}
}

// Abandoned reports whether the freeze was undone rather than flipped.
func (f FreezeRecord) Abandoned() bool { return f.Outcome == FreezeAbandoned }

// Duration is how long the freeze held writes.
func (f FreezeRecord) Duration() time.Duration {
	return time.Duration(f.MS * float64(time.Millisecond))
}

// Freezes decodes the freezes a move's detail records: nil for a detail
// without them (a row journaled before they were recorded, or a move
// that never froze); an error only for a detail whose "freezes" is not a
// list of freezes.
func (m MoveRecord) Freezes() ([]FreezeRecord, error) {
	return DecodeFreezes(m.Detail)
}

// DecodeFreezes is MoveRecord.Freezes on a detail document.
func DecodeFreezes(detail []byte) ([]FreezeRecord, error) {
	if len(detail) == 0 {
		return nil, nil
	}
	var d struct {
		Freezes json.RawMessage `json:"freezes"`
	}
	if err := json.Unmarshal(detail, &d); err != nil {
		return nil, fmt.Errorf("move detail: %w", err)
	}
	if len(d.Freezes) == 0 || string(d.Freezes) == "null" {
		return nil, nil
	}
	var out []FreezeRecord
	if err := json.Unmarshal(d.Freezes, &out); err != nil {
		return nil, fmt.Errorf("move detail: freezes: %w", err)
	}
	return out, nil
}

// FreezeSummary is what a move's recorded freezes add up to.
type FreezeSummary struct {
	Recorded  int           // freezes recorded
	Abandoned int           // of them, abandoned
	Longest   time.Duration // the longest hold
}

// SummarizeFreezes adds up fs.
func SummarizeFreezes(fs []FreezeRecord) FreezeSummary {
	var s FreezeSummary
	for _, f := range fs {
		s.Recorded++
		if f.Abandoned() {
			s.Abandoned++
		}
		s.Longest = max(s.Longest, f.Duration())
	}
	return s
}

// freezesParam is the JSON array MoveUpdate.Freezes appends ("[]" when none).
func freezesParam(fs []FreezeRecord) (string, error) {
	if len(fs) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(fs)
	return string(b), err
}
