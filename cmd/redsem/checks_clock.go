package main

import (
	"context"
	"fmt"
	"time"
)

// Clock skew thresholds. Leases expire on each server's clock, and a
// holder's deadline allows for drift: a Redlock quorum's validity shrinks
// by the nodes' disagreement, and above a second a node's leases end well
// before or after what its holders were told.
const (
	skewWarn  = 100 * time.Millisecond
	skewError = time.Second
)

// offset is how far a node's clock is ahead of this host's, within err
// (half the round trip).
type offset struct {
	ahead, err time.Duration
}

// readOffset reads TIME and compares it with the middle of the round trip.
func readOffset(ctx context.Context, n *node) (offset, error) {
	sent := time.Now()
	t, err := n.rdb.Time(ctx).Result()
	if err != nil {
		return offset{}, err
	}
	rtt := time.Since(sent)
	return offset{ahead: t.Sub(sent.Add(rtt / 2)), err: rtt / 2}, nil
}

// skewStatus grades a skew.
func skewStatus(d time.Duration) string {
	switch d = d.Abs(); {
	case d > skewError:
		return statusError
	case d > skewWarn:
		return statusWarn
	}
	return statusOK
}

// checkClock compares the node's clock with this host's. Fencing tokens
// and expiries follow the server's clock, so the host's is only a
// reference: a large gap means one of the two is off.
func checkClock(ctx context.Context, n *node, _ checkEnv) finding {
	f := finding{Node: n.addr, Check: "clock"}
	o, err := readOffset(ctx, n)
	n.offset, n.offsetErr = o, err
	if err != nil {
		f.Status, f.Found = statusWarn, fmt.Sprintf("cannot read TIME: %v", err)
		f.Advice = "grant +time to redsem's user: the scripts read it"
		return f
	}
	f.Status = skewStatus(o.ahead)
	f.Found = fmt.Sprintf("%v ahead of this host (±%v)", o.ahead.Round(time.Millisecond), o.err.Round(time.Microsecond))
	if f.Status != statusOK {
		f.Advice = "synchronise the clocks (NTP) of the Redis hosts and this one"
	}
	return f
}

// checkSkewBetween compares the Redlock nodes' clocks with one another
// (through this host's, read by checkClock): a quorum's validity is cut by
// their disagreement.
func checkSkewBetween(nodes []*node) finding {
	f := finding{Node: "all", Check: "clock-skew", Status: statusOK}
	var lo, hi *node
	for _, n := range nodes {
		if n.offsetErr != nil {
			continue
		}
		if lo == nil || n.offset.ahead < lo.offset.ahead {
			lo = n
		}
		if hi == nil || n.offset.ahead > hi.offset.ahead {
			hi = n
		}
	}
	if lo == nil || lo == hi {
		f.Status, f.Found = statusWarn, "fewer than two nodes' clocks read: nothing to compare"
		return f
	}
	skew := hi.offset.ahead - lo.offset.ahead
	f.Status = skewStatus(skew)
	f.Found = fmt.Sprintf("%v between the nodes (%s ahead of %s)", skew.Round(time.Millisecond), hi.addr, lo.addr)
	if f.Status != statusOK {
		f.Advice = "synchronise the nodes' clocks (NTP): every lease's validity shrinks by their skew"
	}
	return f
}
