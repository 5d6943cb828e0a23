package agent

import "time"

// bucket is a token bucket: rate tokens a second, at most burst.
type bucket struct {
	rate, burst, tokens float64
	at                  time.Time
}

func newBucket(rate, burst float64, now time.Time) bucket {
	return bucket{rate: rate, burst: burst, tokens: burst, at: now}
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
		b.at = now
	}
}

// reserve takes n tokens, into debt if need be, and returns how long until
// the debt is paid.
func (b *bucket) reserve(n float64, now time.Time) time.Duration {
	b.refill(now)
	b.tokens -= n
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// admit takes one line of n bytes from lines and bytes when both hold
// enough tokens.
func admit(lines, bytes *bucket, n int, now time.Time) bool {
	lines.refill(now)
	bytes.refill(now)
	if lines.tokens < 1 || bytes.tokens < float64(n) {
		return false
	}
	lines.tokens--
	bytes.tokens -= float64(n)
	return true
}
