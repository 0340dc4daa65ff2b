package proxy

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// SQLSTATE codes the proxy itself reports. Errors that come from Postgres
// are forwarded unchanged and never pass through these.
const (
	codeFeatureNotSupported   = "0A000"
	codeProtocolViolation     = "08P01"
	codeConnectionFailure     = "08006"
	codeCannotConnect         = "08001"
	codeInvalidAuthorization  = "28000"
	codeInvalidPassword       = "28P01"
	codeTooManyConnections    = "53300"
	codeProgramLimitExceeded  = "54000"
	codeInFailedTransaction   = "25P02"
	codeNoActiveTransaction   = "25P01"
	codeActiveTransaction     = "25001"
	codeInvalidSavepoint      = "3B001"
	codeUndefinedPstatement   = "26000"
	codeDuplicatePstatement   = "42P05"
	codeUndefinedCursor       = "34000"
	codeInvalidCatalogName    = "3D000"
	codeAdminShutdown         = "57P01"
	codeIdleInTxnTimeout      = "25P03"
	codeInvalidParameterValue = "22023"
	codeSyntaxError           = "42601"
	codeInternalError         = "XX000"
	codeCannotConnectNow      = "57P03"
	codeInsufficientPrivilege = "42501"
	codeQueryCanceled         = "57014"
)

// Error is an error the proxy sends to a client as an ErrorResponse. Its
// fields are Postgres's: a client cannot tell it from a server's error except
// by the message, which always says what pgshard did and what to do.
type Error struct {
	Severity string // "ERROR" (default) or "FATAL"
	Code     string // SQLSTATE
	Message  string
	Detail   string
	Hint     string
	// raw, when set, is a backend's ErrorResponse sent unchanged.
	raw []byte
}

// Error formats the error like pgconn does: "SEVERITY: message (SQLSTATE code)".
func (e *Error) Error() string {
	sev := e.Severity
	if sev == "" {
		sev = "ERROR"
	}
	return sev + ": " + e.Message + " (SQLSTATE " + e.Code + ")"
}

// SQLState returns the error's SQLSTATE.
func (e *Error) SQLState() string { return e.Code }

func newError(code, msg string) *Error { return &Error{Code: code, Message: msg} }

func fatal(code, msg string) *Error { return &Error{Severity: "FATAL", Code: code, Message: msg} }

// appendError appends e as an ErrorResponse.
func appendError(dst []byte, e *Error) []byte {
	if len(e.raw) > 0 {
		return append(dst, e.raw...)
	}
	sev := e.Severity
	if sev == "" {
		sev = "ERROR"
	}
	msg := pgproto3.ErrorResponse{
		Severity:            sev,
		SeverityUnlocalized: sev,
		Code:                e.Code,
		Message:             e.Message,
		Detail:              e.Detail,
		Hint:                e.Hint,
	}
	out, err := msg.Encode(dst)
	if err != nil {
		return dst // cannot happen: the fields are plain strings
	}
	return out
}

// appendNotice appends a NoticeResponse (e.g. a WARNING Postgres would
// have sent for a transaction command that the proxy answers itself).
func appendNotice(dst []byte, severity, code, message string) []byte {
	msg := pgproto3.NoticeResponse{
		Severity:            severity,
		SeverityUnlocalized: severity,
		Code:                code,
		Message:             message,
	}
	out, err := msg.Encode(dst)
	if err != nil {
		return dst
	}
	return out
}

// appendPgError appends a *pgconn.PgError (an error a backend returned to
// pgconn, e.g. while connecting) as an ErrorResponse with every field.
func appendPgError(dst []byte, pe *pgconn.PgError, severity string) []byte {
	sev := pe.Severity
	if severity != "" {
		sev = severity
	}
	msg := pgproto3.ErrorResponse{
		Severity:            sev,
		SeverityUnlocalized: sev,
		Code:                pe.Code,
		Message:             pe.Message,
		Detail:              pe.Detail,
		Hint:                pe.Hint,
		Position:            pe.Position,
		InternalPosition:    pe.InternalPosition,
		InternalQuery:       pe.InternalQuery,
		Where:               pe.Where,
		SchemaName:          pe.SchemaName,
		TableName:           pe.TableName,
		ColumnName:          pe.ColumnName,
		DataTypeName:        pe.DataTypeName,
		ConstraintName:      pe.ConstraintName,
		File:                pe.File,
		Line:                pe.Line,
		Routine:             pe.Routine,
	}
	out, err := msg.Encode(dst)
	if err != nil {
		return dst
	}
	return out
}

// ---- ErrorResponse: the one codec ----
//
// Errors the proxy makes are Error values (appendError); errors from a
// shard travel as their raw bytes and are decoded only to be changed:
// decodeError reads the fields the engine looks at (errorField reads one
// without allocating), appendErrorDetail and appendErrorSeverity re-encode
// one with every field kept.

// decodeError decodes a raw ErrorResponse into an Error that is sent as
// the same bytes; nil if the message is malformed.
func decodeError(raw []byte) *Error {
	var e pgproto3.ErrorResponse
	if len(raw) < headerLen || e.Decode(body(raw)) != nil {
		return nil
	}
	return &Error{Severity: e.Severity, Code: e.Code, Message: e.Message, Detail: e.Detail, Hint: e.Hint, raw: raw}
}

// appendErrorDetail re-encodes a raw ErrorResponse with d added to its
// Detail (on its own line), every other field unchanged.
func appendErrorDetail(dst, raw []byte, d string) []byte {
	return reencodeError(dst, raw, func(e *pgproto3.ErrorResponse) {
		if e.Detail != "" {
			e.Detail += "\n" + d
		} else {
			e.Detail = d
		}
	})
}

// appendErrorSeverity re-encodes a raw ErrorResponse with another
// severity (a backend's FATAL the client gets as ERROR).
func appendErrorSeverity(dst, raw []byte, severity string) []byte {
	return reencodeError(dst, raw, func(e *pgproto3.ErrorResponse) {
		e.Severity, e.SeverityUnlocalized = severity, severity
	})
}

func reencodeError(dst, raw []byte, change func(*pgproto3.ErrorResponse)) []byte {
	var e pgproto3.ErrorResponse
	if len(raw) < headerLen || e.Decode(body(raw)) != nil {
		return appendError(dst, newError(codeInternalError, "undecodable error from a shard"))
	}
	change(&e)
	out, err := e.Encode(dst)
	if err != nil {
		return dst
	}
	return out
}

// asError converts err to a client-facing error: a *Error as is, a backend
// *pgconn.PgError with its fields, anything else as fallback.
func asError(err error, fallback *Error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return fallback
}
