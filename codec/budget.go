package codec

import (
	"fmt"
	"math"
)

// Budget is a token bucket over bits: it refills at a fixed rate
// (GroundReplicationMaxBps for a client's replication) up to a burst, and
// Allow spends from it. The zero Budget allows nothing. It is not safe for
// concurrent use; one lives in each client's send path. Time is passed in
// (monotonic nanoseconds from the caller's clock), so tests drive it.
//
// Tokens are kept in nano-bits (bits × 1e9) so that refilling by
// elapsed-nanoseconds × bits-per-second is exact integer arithmetic: no
// drift over any number of small refills.
type Budget struct {
	rate    int64 // bits per second
	burstNb int64 // bucket size, nano-bits
	tokNb   int64 // current tokens, nano-bits
	last    int64 // time of the last refill, ns
	started bool  // last is valid
}

const nano = 1_000_000_000

// maxBurstBits keeps burstNb inside int64.
const maxBurstBits = math.MaxInt64 / nano

// NewBudget returns a full bucket refilling at bitsPerSecond with room for
// burstBits. burstBits <= 0 means one second's worth (bitsPerSecond); the
// edge uses NewBudget(GroundReplicationMaxBps, 0). bitsPerSecond <= 0 never
// refills. A message larger than the burst is never allowed, so the burst
// must exceed the largest message (a full window snapshot is ~1 KiB
// against the default 32000-byte burst).
func NewBudget(bitsPerSecond int, burstBits int) Budget {
	rate := max(int64(bitsPerSecond), 0)
	burst := int64(burstBits)
	if burst <= 0 {
		burst = rate
	}
	burst = min(burst, maxBurstBits)
	return Budget{rate: rate, burstNb: burst * nano, tokNb: burst * nano}
}

func (b *Budget) refill(now int64) {
	if !b.started {
		b.started, b.last = true, now
		return
	}
	if now <= b.last || b.rate == 0 {
		b.last = max(b.last, now)
		return
	}
	elapsed := now - b.last
	b.last = now
	need := b.burstNb - b.tokNb
	if need <= 0 {
		return
	}
	// elapsed*rate may overflow for long gaps; only compute it when it is
	// below what fills the bucket.
	if elapsed >= need/b.rate+1 {
		b.tokNb = b.burstNb
		return
	}
	b.tokNb = min(b.tokNb+elapsed*b.rate, b.burstNb)
}

// Allow reports whether nbytes may be sent at nowNanos and, if so, spends
// them. Time that goes backwards refills nothing. Allow(now, 0) is always
// true.
func (b *Budget) Allow(nowNanos int64, nbytes int) bool {
	b.refill(nowNanos)
	if nbytes <= 0 {
		return true
	}
	if int64(nbytes) > maxBurstBits/8 {
		return false
	}
	cost := int64(nbytes) * 8 * nano
	if cost > b.tokNb {
		return false
	}
	b.tokNb -= cost
	return true
}

// AvailableBytes is how many bytes Allow would accept at nowNanos (it
// refills but spends nothing).
func (b *Budget) AvailableBytes(nowNanos int64) int {
	b.refill(nowNanos)
	return int(b.tokNb / nano / 8)
}

// ValidateReplicationBandwidth checks that bytesPerTick sent hz times a
// second stays within GroundReplicationMaxBps (the reference's
// validateReplicationBandwidth). Exactly at the ceiling is allowed: at
// 20 Hz that is GroundReplicationMaxBytesPerTick (1600 bytes). Over it is
// ErrOverBudget; hz <= 0 or bytesPerTick < 0 is ErrBadRate.
func ValidateReplicationBandwidth(bytesPerTick int, hz int) error {
	if hz <= 0 || bytesPerTick < 0 {
		return fmt.Errorf("%w: %d bytes at %d Hz", ErrBadRate, bytesPerTick, hz)
	}
	if bytesPerTick == 0 {
		return nil
	}
	// Either factor alone over the ceiling puts the product over it (the
	// other is >= 1); below that the product fits easily in int64.
	if bytesPerTick > GroundReplicationMaxBps || hz > GroundReplicationMaxBps {
		return fmt.Errorf("%w: %d bytes at %d Hz exceeds %d bit/s", ErrOverBudget,
			bytesPerTick, hz, GroundReplicationMaxBps)
	}
	if bps := int64(bytesPerTick) * 8 * int64(hz); bps > GroundReplicationMaxBps {
		return fmt.Errorf("%w: %d bytes at %d Hz is %d bit/s > %d", ErrOverBudget,
			bytesPerTick, hz, bps, GroundReplicationMaxBps)
	}
	return nil
}
