package loadgen

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"math"
	"sync"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// HdrHistogram's V2 compressed encoding, written here rather than by
// hdr.Histogram.Encode, which costs milliseconds per histogram (one
// reflective binary.Write and allocation per count, and a new zlib writer
// at best compression, about 800 KB, every call): the collector encodes a
// window histogram every second and the result about twenty more, so on
// a run at a few hundred operations per second that was tens of µs of CPU
// per operation. The bytes differ from Encode's (another compression
// level) but hdr.Decode reads them to the same histogram:
//
//	base64( int32 BE compressed cookie | int32 BE length | zlib(
//	        int32 BE cookie | int32 BE payload length | int32 BE normalizing offset (0)
//	        | int32 BE significant digits | int64 BE lowest | int64 BE highest
//	        | float64 BE integer-to-double ratio
//	        | counts: ZigZag LEB128, a negative value -n standing for n zero counts ))

const (
	v2Cookie           = hdr.V2EncodingCookieBase | 0x10
	v2CompressedCookie = hdr.V2CompressedEncodingCookieBase | 0x10
)

// histEncoder is the reusable state of one encoding.
type histEncoder struct {
	raw, zbuf bytes.Buffer
	zw        *zlib.Writer
}

var histEncoders = sync.Pool{New: func() any {
	e := &histEncoder{}
	e.zw, _ = zlib.NewWriterLevel(&e.zbuf, zlib.BestSpeed) // a valid level: no error
	return e
}}

// encodeV2 returns h in V2 compressed form, base64; ok is false for
// counts beyond what the 8-byte varints here carry (2^55), which
// hdr.Histogram.Encode then writes.
func encodeV2(h *hdr.Histogram) (out string, ok bool) {
	s := h.Export()
	limit := len(s.Counts)
	for limit > 0 && s.Counts[limit-1] == 0 {
		limit--
	}
	e := histEncoders.Get().(*histEncoder)
	defer histEncoders.Put(e)
	e.raw.Reset()
	var hdrb [40]byte
	e.raw.Write(hdrb[:]) // the header, filled in below
	var v [binary.MaxVarintLen64]byte
	for i := 0; i < limit; {
		c := s.Counts[i]
		i++
		if c == 0 {
			n := int64(1)
			for i < limit && s.Counts[i] == 0 {
				n++
				i++
			}
			if n > 1 {
				c = -n
			}
		}
		if c >= 1<<55 {
			return "", false
		}
		e.raw.Write(v[:binary.PutVarint(v[:], c)]) // ZigZag LEB128
	}
	raw := e.raw.Bytes()
	ratio := s.IntegerToDoubleConversionRatio
	if ratio == 0 {
		ratio = 1
	}
	binary.BigEndian.PutUint32(raw[0:], uint32(v2Cookie))
	binary.BigEndian.PutUint32(raw[4:], uint32(len(raw)-40))
	binary.BigEndian.PutUint32(raw[8:], 0)
	binary.BigEndian.PutUint32(raw[12:], uint32(s.SignificantFigures))
	binary.BigEndian.PutUint64(raw[16:], uint64(s.LowestTrackableValue))
	binary.BigEndian.PutUint64(raw[24:], uint64(s.HighestTrackableValue))
	binary.BigEndian.PutUint64(raw[32:], math.Float64bits(ratio))
	e.zbuf.Reset()
	var pre [8]byte
	e.zbuf.Write(pre[:]) // cookie and length, filled in below
	e.zw.Reset(&e.zbuf)
	if _, err := e.zw.Write(raw); err != nil {
		return "", false
	}
	if err := e.zw.Close(); err != nil {
		return "", false
	}
	z := e.zbuf.Bytes()
	binary.BigEndian.PutUint32(z[0:], uint32(v2CompressedCookie))
	binary.BigEndian.PutUint32(z[4:], uint32(len(z)-8))
	return base64.StdEncoding.EncodeToString(z), true
}
