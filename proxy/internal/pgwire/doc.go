// Package pgwire is the proxy's Postgres wire protocol, version 3: framing,
// views of the few message fields the proxy reads, builders of the
// messages it writes, the startup packet, the wire error type, and raw
// socket I/O. It holds no policy and imports nothing of pgshard's.
//
//	bytes ──▶ MsgReader (wire.go: framing, size limits, hold/release of a
//	          │          pipeline's messages without copying; a lending
//	          │          reader's buffer is back in a pool while it waits)
//	          ├─▶ ParseView, BindView, Decode* (wire.go: views into a message;
//	          │   CopyBinaryHeaderLen, IsCopyBinaryTrailer: a binary COPY
//	          │   file's header and trailer in CopyData)
//	          └─▶ StartupPacket (startup.go: startup, SSLRequest, CancelRequest,
//	                             GSSENCRequest, "options")
//	Append* ──▶ bytes (wire.go: message builders; errors.go: ErrorResponse,
//	                   NoticeResponse from an Error or a *pgconn.PgError)
//	RawIO (netio.go): reads and writes on a non-blocking socket with raw
//	                  system calls (no scheduler hand-off per call); a
//	                  request queued by WriteBeforeRead is written by the
//	                  next read, which then waits for its answer without
//	                  a read that finds nothing first (backends only)
//
// Error (errors.go) is an error the proxy sends as an ErrorResponse, with
// the SQLSTATE codes the proxy uses; ProtocolError is a malformed or
// oversized message (SQLSTATE 08P01). A message returned by
// MsgReader.Next is a slice of the reader's buffer: valid until the next
// call, or until Release while the reader holds. A client's reader
// (NewLendingMsgReader) lends its buffer to the pool shared by all of
// them whenever it waits with nothing buffered or held, so a message kept
// past the next call is another session's bytes, not merely stale ones.
package pgwire
