package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// serve is the session's message loop: simple queries run one at a time;
// extended-protocol messages are buffered (without copying: the reader
// holds them) up to Sync or Flush, then planned and run as one exchange.
// It returns errIdle when it must wait for the client, and Run enters it
// again once it has (waited; waitErr: that read's error, which ends the
// loop as its own read's would).
func (s *Session) serve(ctx context.Context, waited bool, waitErr error) error {
	l := msgLoop{s: s, idleTxTimeout: s.gen.Config.IdleInTransactionTimeout, waitErr: waitErr}
	for {
		if waited {
			// Back from Run's wait: between ran just before it, and what
			// it does is done (as when the loop's own read returns).
			waited = false
		} else if done, err := l.between(ctx); done {
			return err
		} else if l.idle() {
			return errIdle // Run waits for the client
		}
		typ, msg, flushed, err := l.next(ctx)
		if err != nil {
			return err
		}
		if flushed {
			continue
		}
		if s.txn.skipUntilSync && typ != 'S' && typ != 'X' {
			continue
		}
		// A reload's new generation applies from the first message of the
		// next exchange on (reload.go).
		s.maybeSwitchGeneration()
		switch typ {
		case 'P', 'B', 'D', 'E', 'C':
			if len(s.grp) == 0 {
				s.cc.rd.Hold()
				s.grpBytes = 0
			}
			s.grpBytes += len(msg)
			if s.grpBytes > s.gen.Config.MaxPipelineBytes {
				return &pgwire.Error{Severity: "FATAL", Code: pgwire.CodeProgramLimitExceeded,
					Message: fmt.Sprintf("more than %d bytes of extended-protocol messages without Sync or Flush", s.gen.Config.MaxPipelineBytes),
					Hint:    "Send Sync more often, or raise proxy.max_pipeline_bytes."}
			}
			s.grp = append(s.grp, cmsg{typ: typ, raw: msg})
		case 'S', 'H':
			s.grp = append(s.grp, cmsg{typ: typ, raw: msg})
			err := s.fretry.run(func() error { return s.runPipeline(ctx) })
			s.grp = s.grp[:0]
			s.cc.rd.Release()
			if err != nil {
				return err
			}
			if typ == 'S' && s.txn.tx == txIdle {
				s.cursors.clear() // their (implicit) transaction ended
			}
		case 'Q', 'F':
			if ignore, err := s.runPipelineBefore(ctx); err != nil {
				return err
			} else if ignore {
				continue
			}
			if typ == 'F' {
				err := s.fastpath(ctx, msg)
				s.cc.rd.Release()
				if err != nil {
					return err
				}
				continue
			}
			err := s.fretry.run(func() error { return s.simpleQuery(ctx, msg) })
			s.cc.rd.Release()
			if err != nil {
				return err
			}
			if s.txn.tx == txIdle {
				s.cursors.clear() // a COMMIT or ROLLBACK, or a query outside a block
			}
		case 'X':
			return nil
		case 'd', 'c', 'f':
			// Outside COPY these are ignored, as Postgres does.
		default:
			return pgwire.ProtoErrorf("invalid frontend message type %d", typ)
		}
	}
}

// msgLoop is serve's own: the session, its idle-in-transaction bound,
// and the error of Run's wait for the client (its first read's).
type msgLoop struct {
	s             *Session
	idleTxTimeout time.Duration
	waitErr       error
}

// between runs what comes between two client messages: the answers so
// far go out, and a session that must end does (done, with the error the
// client gets, nil for none): it terminated itself, its pinned backend
// was lost, or the server stops.
func (l msgLoop) between(ctx context.Context) (done bool, err error) {
	s := l.s
	if s.terminateSelf && s.selfFatalSent {
		// The FATAL was the statement's answer and, as in Postgres, whose
		// backend exits there, nothing follows it (a pipeline's
		// ReadyForQuery after it would tell libpq the connection lives on).
		s.cc.out = cutAfterSelfFatal(s.cc.out)
		_ = s.cc.flush()
		return true, nil
	}
	if err := s.cc.flush(); err != nil {
		return true, err
	}
	if ctx.Err() != nil {
		return true, nil
	}
	if l.idleTxTimeout > 0 && len(s.grp) == 0 {
		if l.inTxn() {
			_ = s.cc.conn.SetReadDeadline(time.Now().Add(l.idleTxTimeout))
		} else {
			_ = s.cc.conn.SetReadDeadline(time.Time{})
		}
	}
	if s.terminateSelf {
		return true, errSelfTerminated()
	}
	if s.pinLost {
		if s.pinFatal {
			return true, nil // the backend's FATAL was forwarded: the session ends
		}
		return true, pgwire.NewFatal(pgwire.CodeConnectionFailure, "terminating the session: its server session (pinned backend) was lost")
	}
	return false, nil
}

// idle reports whether the next message must be read from the client's
// socket with nothing else to do meanwhile: no message buffered, no
// pipeline waiting for its end, no pinned backend to watch.
func (l msgLoop) idle() bool {
	s := l.s
	return len(s.grp) == 0 && s.cc.rd.Buffered() == 0 && pinning(s).watched() == nil
}

// inTxn reports whether the session holds a transaction (or a
// pipeline's backend) while it waits for its client.
func (l msgLoop) inTxn() bool {
	s := l.s
	return s.txn.tx == txBound || s.txn.pipelineHeld || s.readers.any()
}

// next reads the client's next message. A client that stops in the
// middle of a pipeline (no Sync or Flush yet, nothing more buffered) is
// waited for stallFlush; then its pipeline runs as if flushed
// (flushStalled) and flushed is true, with no message.
func (l msgLoop) next(ctx context.Context) (typ byte, msg []byte, flushed bool, err error) {
	s := l.s
	stalled := len(s.grp) > 0 && s.cc.rd.Buffered() == 0
	if stalled {
		_ = s.cc.conn.SetReadDeadline(time.Now().Add(stallFlush))
	}
	if err = l.waitErr; err == nil { // a failed wait ends the loop
		typ, msg, err = s.cc.readWatching(pinning(s).watched())
	}
	if stalled {
		_ = s.cc.conn.SetReadDeadline(time.Time{}) // between sets the idle one again
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil, true, l.flushStalled(ctx)
		}
	}
	if err != nil && l.idleTxTimeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) && l.inTxn() {
		return 0, nil, false, pgwire.NewFatal(pgwire.CodeIdleInTxnTimeout, "terminating connection due to idle-in-transaction timeout")
	}
	return typ, msg, false, err
}

// selfFatal is the FATAL that answers a session's termination of itself.
var selfFatal = pgwire.AppendError(nil, errSelfTerminated())

// cutAfterSelfFatal returns out (a session's answers not yet sent, whole
// messages) up to the self-termination's FATAL; empty when the FATAL is
// not in it (sent already: whatever follows it goes nowhere).
func cutAfterSelfFatal(out []byte) []byte {
	for pos := 0; pos+pgwire.HeaderLen <= len(out); {
		end := pos + 1 + int(binary.BigEndian.Uint32(out[pos+1:]))
		if end > len(out) {
			break
		}
		if bytes.Equal(out[pos:end], selfFatal) {
			return out[:end]
		}
		pos = end
	}
	return out[:0]
}

// stallFlush is how long a client may pause in the middle of a pipeline
// (extended-protocol messages without Sync or Flush) before the proxy runs
// what it has as if flushed (flushStalled).
const stallFlush = 50 * time.Millisecond

// flushStalled runs the messages of a pipeline whose client stopped
// sending before its Sync or Flush as if a Flush followed them. Postgres
// runs each message as it arrives and sends the answers at an error
// without waiting for Sync or Flush (libpq's pipeline mode relies on it:
// a client that sends statements and no Sync reads the error of the
// first failing one, psycopg's test_pipeline_communicate_uniqviol); the
// proxy plans a pipeline whole, up to its Sync or Flush, and would wait
// for one that never comes while the client waits for an answer. Answers
// sent early are read as they come: a client cannot tell them from a
// server's that flushed.
func (l msgLoop) flushStalled(ctx context.Context) error {
	s := l.s
	s.grp = append(s.grp, cmsg{typ: 'H'})
	err := s.fretry.run(func() error { return s.runPipeline(ctx) })
	s.grp = s.grp[:0]
	s.cc.rd.Release()
	return err
}

// runPipelineBefore runs the extended-protocol messages buffered before a
// Query or FunctionCall as if flushed (Postgres processes messages in
// order; either implies a Sync). ignore reports that they failed: then
// Postgres ignores the Query or FunctionCall, as it does every message up
// to Sync (sent to a backend, a query would get no answer, and the proxy
// would wait for one forever).
func (s *Session) runPipelineBefore(ctx context.Context) (ignore bool, err error) {
	if len(s.grp) == 0 {
		return false, nil
	}
	s.grp = append(s.grp, cmsg{typ: 'H'})
	err = s.runPipeline(ctx)
	s.grp = s.grp[:0]
	if err != nil {
		return false, err
	}
	if s.txn.skipUntilSync {
		s.cc.rd.Release()
		return true, nil
	}
	return false, nil
}
