package codec

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestBudgetSustainedRate(t *testing.T) {
	// Offer far more than 256 kbit/s for 60 simulated seconds in 1 ms
	// steps: what gets through is the burst plus 60 s of refill.
	b := NewBudget(GroundReplicationMaxBps, 0)
	const msg = 100 // bytes
	sent := 0
	var now int64 = 1_000_000 // arbitrary monotonic origin
	end := now + int64(60*time.Second)
	for ; now < end; now += int64(time.Millisecond) {
		for b.Allow(now, msg) {
			sent += msg
		}
	}
	want := GroundReplicationMaxBps/8*61 - msg // burst (1 s) + 60 s, minus one partial message
	if sent < want || sent > GroundReplicationMaxBps/8*61 {
		t.Fatalf("sent %d bytes in 60 s, want ~%d", sent, want)
	}
}

func TestBudgetBurstAndRefill(t *testing.T) {
	const sec = int64(time.Second)
	tests := []struct {
		name  string
		steps []struct {
			at    int64
			bytes int
			ok    bool
		}
	}{
		{"burst of one second then empty", []struct {
			at    int64
			bytes int
			ok    bool
		}{
			{0, 32_000, true}, // the whole 256 kbit burst
			{0, 1, false},
			{sec / 2, 16_001, false}, // half a second refills 16000 bytes
			{sec / 2, 16_000, true},
			{sec / 2, 1, false},
		}},
		{"refill caps at the burst", []struct {
			at    int64
			bytes int
			ok    bool
		}{
			{0, 1, true},
			{100 * sec, 32_000, true},
			{100 * sec, 1, false},
		}},
		{"time going backwards refills nothing", []struct {
			at    int64
			bytes int
			ok    bool
		}{
			{10 * sec, 32_000, true},
			{5 * sec, 1, false},
			{10 * sec, 1, false},
			{10*sec + int64(time.Millisecond)/4, 8, true}, // 64 bits in 250 µs
		}},
		{"zero bytes always allowed", []struct {
			at    int64
			bytes int
			ok    bool
		}{
			{0, 32_000, true},
			{0, 0, true},
			{0, -5, true},
		}},
		{"larger than the burst never", []struct {
			at    int64
			bytes int
			ok    bool
		}{
			{0, 32_001, false},
			{1000 * sec, 32_001, false},
			{1000 * sec, math.MaxInt, false},
			{1000 * sec, 32_000, true},
		}},
		{"huge first timestamp", []struct {
			at    int64
			bytes int
			ok    bool
		}{
			{math.MaxInt64 - sec, 32_000, true},
			{math.MaxInt64, 32_000, true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(GroundReplicationMaxBps, 0)
			for i, s := range tc.steps {
				if got := b.Allow(s.at, s.bytes); got != s.ok {
					t.Fatalf("step %d: Allow(%d, %d) = %v, want %v", i, s.at, s.bytes, got, s.ok)
				}
			}
		})
	}
}

func TestBudgetConfig(t *testing.T) {
	b := NewBudget(8000, 800) // 1000 B/s, 100 B burst
	if got := b.AvailableBytes(0); got != 100 {
		t.Fatalf("AvailableBytes = %d", got)
	}
	if !b.Allow(0, 100) || b.Allow(0, 1) {
		t.Fatal("burst")
	}
	if got := b.AvailableBytes(int64(50 * time.Millisecond)); got != 50 {
		t.Fatalf("after 50 ms AvailableBytes = %d, want 50", got)
	}
	var zero Budget
	if zero.Allow(0, 1) || zero.Allow(int64(time.Hour), 1) {
		t.Fatal("zero Budget allowed")
	}
	noRefill := NewBudget(0, 80)
	if !noRefill.Allow(0, 10) || noRefill.Allow(int64(time.Hour), 1) {
		t.Fatal("rate 0 refilled")
	}
}

func TestBudgetAllocs(t *testing.T) {
	b := NewBudget(GroundReplicationMaxBps, 0)
	var now int64
	if n := testing.AllocsPerRun(100, func() {
		now += int64(time.Millisecond)
		b.Allow(now, 100)
	}); n != 0 {
		t.Fatalf("Allow allocs = %v", n)
	}
}

func TestValidateReplicationBandwidth(t *testing.T) {
	tests := []struct {
		name  string
		bytes int
		hz    int
		err   error
	}{
		{"zero payload", 0, 20, nil},
		{"typical delta", 400, 20, nil},
		{"exactly at ceiling", GroundReplicationMaxBytesPerTick, GroundReplicationHz, nil},
		{"one byte over", GroundReplicationMaxBytesPerTick + 1, GroundReplicationHz, ErrOverBudget},
		{"one hertz full second", 32_000, 1, nil},
		{"one hertz over", 32_001, 1, ErrOverBudget},
		{"fast small", 1, 32_000, nil},
		{"fast over", 1, 32_001, ErrOverBudget},
		{"huge bytes", math.MaxInt, 20, ErrOverBudget},
		{"huge hz", 1, math.MaxInt, ErrOverBudget},
		{"zero hz", 100, 0, ErrBadRate},
		{"negative hz", 100, -20, ErrBadRate},
		{"negative bytes", -1, 20, ErrBadRate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateReplicationBandwidth(tc.bytes, tc.hz)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("ValidateReplicationBandwidth(%d, %d) = %v, want %v", tc.bytes, tc.hz, err, tc.err)
			}
		})
	}
	if GroundReplicationMaxBytesPerTick != 1600 {
		t.Fatalf("GroundReplicationMaxBytesPerTick = %d", GroundReplicationMaxBytesPerTick)
	}
}
