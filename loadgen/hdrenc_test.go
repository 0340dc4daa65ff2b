package loadgen

import (
	"math/rand/v2"
	"testing"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// TestEncodeV2Decodes: what encodeHist writes, hdr.Decode reads back to
// the same histogram as the library's own encoding, for sparse, dense,
// extreme and large-count histograms.
func TestEncodeV2Decodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := map[string]func(h *hdr.Histogram){
		"one value":   func(h *hdr.Histogram) { _ = h.RecordValue(1) },
		"range edges": func(h *hdr.Histogram) { _ = h.RecordValue(histMin); _ = h.RecordValue(histMax) },
		"window-like": func(h *hdr.Histogram) {
			for range 600 {
				_ = h.RecordValue(200 + rng.Int64N(5000))
			}
			_ = h.RecordValue(250_000)
		},
		"dense": func(h *hdr.Histogram) {
			for v := int64(1); v < 30_000; v++ {
				_ = h.RecordValues(v, 1+v%7)
			}
		},
		"large counts": func(h *hdr.Histogram) {
			_ = h.RecordValues(10, 1<<40)
			_ = h.RecordValues(20_000, 1<<50)
		},
	}
	for name, fill := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHist()
			fill(h)
			s, ok := encodeV2(h)
			if !ok {
				t.Fatal("encodeV2 declined")
			}
			got, err := hdr.Decode([]byte(s))
			if err != nil {
				t.Fatalf("hdr.Decode: %v", err)
			}
			lib, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
			if err != nil {
				t.Fatal(err)
			}
			want, err := hdr.Decode(lib)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equals(want) || !got.Equals(h) {
				t.Errorf("decoded histogram differs: total %d (library %d, original %d), max %d (library %d)",
					got.TotalCount(), want.TotalCount(), h.TotalCount(), got.Max(), want.Max())
			}
			// And through the engine's own decoder (range checked).
			if d, err := decodeHist(s); err != nil || !d.Equals(h) {
				t.Errorf("decodeHist: %v", err)
			}
		})
	}
}

// TestEncodeV2Declines: counts too large for its varints go to the
// library's encoder, which still round-trips.
func TestEncodeV2Declines(t *testing.T) {
	h := newHist()
	_ = h.RecordValues(5, 1<<56)
	if _, ok := encodeV2(h); ok {
		t.Fatal("encodeV2 accepted a count of 2^56")
	}
	s, err := encodeHist(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := hdr.Decode([]byte(s))
	if err != nil || !got.Equals(h) {
		t.Fatalf("library fallback did not round-trip: %v", err)
	}
}

func BenchmarkEncodeHist(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := newHist()
	for range 600 {
		_ = h.RecordValue(200 + rng.Int64N(5000))
	}
	b.Run("encodeHist", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodeHist(h)
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = h.Encode(hdr.V2CompressedEncodingCookieBase)
		}
	})
}
