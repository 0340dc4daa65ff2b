package pgwire

import (
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// SQLSTATE codes the proxy itself reports. Errors that come from Postgres
// are forwarded unchanged and never pass through these.
const (
	CodeFeatureNotSupported   = "0A000"
	CodeProtocolViolation     = "08P01"
	CodeConnectionFailure     = "08006"
	CodeCannotConnect         = "08001"
	CodeInvalidAuthorization  = "28000"
	CodeInvalidPassword       = "28P01"
	CodeTooManyConnections    = "53300"
	CodeProgramLimitExceeded  = "54000"
	CodeInFailedTransaction   = "25P02"
	CodeNoActiveTransaction   = "25P01"
	CodeActiveTransaction     = "25001"
	CodeInvalidSavepoint      = "3B001"
	CodeUndefinedPstatement   = "26000"
	CodeDuplicatePstatement   = "42P05"
	CodeUndefinedCursor       = "34000"
	CodeInvalidCatalogName    = "3D000"
	codeAdminShutdown         = "57P01"
	CodeIdleInTxnTimeout      = "25P03"
	CodeInvalidParameterValue = "22023"
	CodeSyntaxError           = "42601"
	CodeDatatypeMismatch      = "42804"
	CodeUndefinedColumn       = "42703"
	CodeInternalError         = "XX000"
	CodeCannotConnectNow      = "57P03"
	CodeInsufficientPrivilege = "42501"
	CodeQueryCanceled         = "57014"
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
	// File and Routine, when set, name where in Postgres's source the
	// error comes from, as Postgres reports them (F, R): for an error the
	// proxy gives in Postgres's place, which drivers recognise by them.
	File, Routine string
	// raw, when set, is a backend's ErrorResponse sent unchanged.
	Raw []byte
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

// ResultTypeChanged is Postgres's error for a prepared statement whose
// result columns a schema change altered (0A000, from
// RevalidateCachedQuery in plancache.c: asyncpg recognises it by that
// routine and prepares the statement again).
func ResultTypeChanged() *Error {
	return &Error{Code: CodeFeatureNotSupported, Message: "cached plan must not change result type",
		File: "plancache.c", Routine: "RevalidateCachedQuery"}
}

// NewError returns an ERROR with code and msg.
func NewError(code, msg string) *Error { return &Error{Code: code, Message: msg} }

// NewFatal returns a FATAL error with code and msg (the session ends after sending it).
func NewFatal(code, msg string) *Error { return &Error{Severity: "FATAL", Code: code, Message: msg} }

// AppendError appends e as an ErrorResponse.
func AppendError(dst []byte, e *Error) []byte {
	if len(e.Raw) > 0 {
		return append(dst, e.Raw...)
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
		File:                e.File,
		Routine:             e.Routine,
	}
	out, err := msg.Encode(dst)
	if err != nil {
		return dst // cannot happen: the fields are plain strings
	}
	return out
}

// AppendNotice appends a NoticeResponse (e.g. a WARNING Postgres would
// have sent for a transaction command that the proxy answers itself).
func AppendNotice(dst []byte, severity, code, message string) []byte {
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

// AppendPgError appends a *pgconn.PgError (an error a backend returned to
// pgconn, e.g. while connecting) as an ErrorResponse with every field.
func AppendPgError(dst []byte, pe *pgconn.PgError, severity string) []byte {
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
// Errors the proxy makes are Error values (AppendError); errors from a
// shard travel as their raw bytes and are decoded only to be changed:
// DecodeError reads the fields the engine looks at (ErrorField reads one
// without allocating), AppendErrorDetail and AppendShardFatal re-encode
// one with every field kept.

// DecodeError decodes a raw ErrorResponse into an Error that is sent as
// the same bytes; nil if the message is malformed.
func DecodeError(raw []byte) *Error {
	var e pgproto3.ErrorResponse
	if len(raw) < HeaderLen || e.Decode(Body(raw)) != nil {
		return nil
	}
	return &Error{Severity: e.Severity, Code: e.Code, Message: e.Message, Detail: e.Detail, Hint: e.Hint, Raw: raw}
}

// AppendErrorDetail re-encodes a raw ErrorResponse with d added to its
// Detail (on its own line), every other field unchanged.
func AppendErrorDetail(dst, raw []byte, d string) []byte {
	return reencodeError(dst, raw, func(e *pgproto3.ErrorResponse) {
		if e.Detail != "" {
			e.Detail += "\n" + d
		} else {
			e.Detail = d
		}
	})
}

// AppendErrorCode re-encodes a raw ErrorResponse with another SQLSTATE,
// every other field unchanged.
func AppendErrorCode(dst, raw []byte, code string) []byte {
	return reencodeError(dst, raw, func(e *pgproto3.ErrorResponse) { e.Code = code })
}

// AppendShardFatal re-encodes a shard's FATAL ErrorResponse as the
// ERROR its client gets: the connection to the shard ends, the client's
// session does not. The message names the shard (a 57P01 of a shard
// shutting down reads like the client's own connection ending
// otherwise); every other field is kept.
func AppendShardFatal(dst, raw []byte, shard string) []byte {
	return reencodeError(dst, raw, func(e *pgproto3.ErrorResponse) {
		e.Severity, e.SeverityUnlocalized = "ERROR", "ERROR"
		e.Message = "shard " + strconv.Quote(shard) + " ended the connection: " + e.Message
	})
}

func reencodeError(dst, raw []byte, change func(*pgproto3.ErrorResponse)) []byte {
	var e pgproto3.ErrorResponse
	if len(raw) < HeaderLen || e.Decode(Body(raw)) != nil {
		return AppendError(dst, NewError(CodeInternalError, "undecodable error from a shard"))
	}
	change(&e)
	out, err := e.Encode(dst)
	if err != nil {
		return dst
	}
	return out
}

// AsError converts err to a client-facing error: a *Error as is, a backend
// *pgconn.PgError with its fields, anything else as fallback.
func AsError(err error, fallback *Error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return fallback
}
