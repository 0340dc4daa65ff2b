package shardmap

import "math/bits"

// HashPartitionSeed is Postgres's HASH_PARTITION_SEED (src/include/catalog/partition.h):
// the seed every hash-partitioned table passes to the extended hash functions.
const HashPartitionSeed uint64 = 0x7A5B22367996DCFD

// HashCombineConst is the additive constant of Postgres's hash_combine64:
// a key's partition hash is hash_combine64(0, h) = h + HashCombineConst.
const HashCombineConst uint64 = 0x49a0f4dd15e5a8e3

// HashText returns hashtextextended(key, seed) for a text value under a
// deterministic collation: Bob Jenkins' lookup3 over the raw UTF-8 bytes, as
// hash_bytes_extended in src/common/hashfn.c computes it on a little-endian
// machine. The result is the uint64 bit pattern of Postgres's int8 result.
func HashText(key string, seed uint64) uint64 {
	n := len(key)
	a := 0x9e3779b9 + uint32(n) + 3923095
	b, c := a, a
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		a, b, c = mix(a, b, c)
	}
	k := key
	for len(k) >= 12 {
		a += le32(k[0:4])
		b += le32(k[4:8])
		c += le32(k[8:12])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	// The last 0..11 bytes; the lowest byte of c is reserved for the length
	// in lookup3's layout, so c takes bytes 8..10 shifted up by one.
	switch len(k) {
	case 11:
		c += uint32(k[10]) << 24
		fallthrough
	case 10:
		c += uint32(k[9]) << 16
		fallthrough
	case 9:
		c += uint32(k[8]) << 8
		fallthrough
	case 8:
		b += uint32(k[7]) << 24
		fallthrough
	case 7:
		b += uint32(k[6]) << 16
		fallthrough
	case 6:
		b += uint32(k[5]) << 8
		fallthrough
	case 5:
		b += uint32(k[4])
		fallthrough
	case 4:
		a += uint32(k[3]) << 24
		fallthrough
	case 3:
		a += uint32(k[2]) << 16
		fallthrough
	case 2:
		a += uint32(k[1]) << 8
		fallthrough
	case 1:
		a += uint32(k[0])
	}
	_, b, c = final(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

// HashInt8 returns hashint8extended(v, seed): the high word is folded into the
// low one (complemented for negative values) so that int8 values equal to an
// int4 hash alike, then hash_bytes_uint32_extended hashes that one word.
func HashInt8(v int64, seed uint64) uint64 {
	lo := uint32(v)
	hi := uint32(uint64(v) >> 32)
	if v >= 0 {
		lo ^= hi
	} else {
		lo ^= ^hi
	}
	a := uint32(0x9e3779b9 + 4 + 3923095)
	b, c := a, a
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		a, b, c = mix(a, b, c)
	}
	a += lo
	_, b, c = final(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

// PartitionHashText is the row hash Postgres's PARTITION BY HASH computes for
// a single text partition key: hash_combine64(0, hashtextextended(key, seed)).
func PartitionHashText(key string) uint64 {
	return HashText(key, HashPartitionSeed) + HashCombineConst
}

// PartitionHashInt8 is PartitionHashText for a single int8 partition key.
func PartitionHashInt8(v int64) uint64 {
	return HashInt8(v, HashPartitionSeed) + HashCombineConst
}

// le32 reads a little-endian uint32 from the first four bytes of s (the
// byte order hashfn.c's unaligned path uses on little-endian machines).
func le32(s string) uint32 {
	_ = s[3] // one bounds check
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}
