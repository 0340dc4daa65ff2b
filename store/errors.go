package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrConflict is matched (errors.Is) by every *ConflictError.
var ErrConflict = errors.New("commit conflict")

// ErrNotFound means the execution does not exist.
var ErrNotFound = errors.New("execution not found")

// ErrOutcomeUnknown is matched (errors.Is) by a commit error after which the
// commit may or may not have been applied: the transaction had been sent
// when the connection failed, the context ended or the server reported a
// fatal error. Whether it committed can only be learned by reading the
// execution again. Any other commit error means nothing was applied.
var ErrOutcomeUnknown = errors.New("commit outcome unknown")

// ConflictError is a lost compare-and-swap: the execution's stored version
// was not the one the commit expected. Nothing of the commit was applied.
type ConflictError struct {
	// ID is the execution id.
	ID string
	// Expected is the version the commit started from.
	Expected int
	// Found is the version stored when the commit lost, read after the
	// CAS failed (so it is the winner's), 0 if the execution does not
	// exist.
	Found int
}

// Error says which execution lost and the versions.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("commit conflict on execution %s: expected version %d, found %d", e.ID, e.Expected, e.Found)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// unknownOutcomeError wraps the error of a commit that may have been applied.
type unknownOutcomeError struct{ err error }

func (e *unknownOutcomeError) Error() string {
	return "commit outcome unknown (it may have been applied): " + e.err.Error()
}
func (e *unknownOutcomeError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.err} }

// classifyCommitError decides what a commit's failure means once its
// transaction was handed to the connection. A statement's ERROR from the
// server rolled the implicit transaction back: nothing applied. Anything
// else may have come after the server committed: a broken connection, an
// ended context, a FATAL or PANIC, and errors of class 08 (connection
// exception) or 57P (operator intervention) even at severity ERROR —
// PgBouncer reports a server connection that died under a query as
// "ERROR: server conn crashed?" (08P01).
func classifyCommitError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Severity == "ERROR" &&
		!strings.HasPrefix(pe.Code, "08") && !strings.HasPrefix(pe.Code, "57P") {
		return err
	}
	return &unknownOutcomeError{err: err}
}
