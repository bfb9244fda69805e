package main

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/redsem/redsem/limiter"
)

// semState is one semaphore as Redis sees it; ls and show print it, in
// JSON with these field names.
type semState struct {
	Name string `json:"name"`
	// FleetLimit is the limit stored by set-limit; nil (null, "-") when
	// none is set: each process then uses its constructor's limit, which
	// Redis does not know.
	FleetLimit *int64       `json:"fleet_limit"`
	InUse      int64        `json:"in_use"` // permits: the holders' weights summed
	Holders    []holderInfo `json:"holders"`
}

type holderInfo struct {
	ID     string `json:"id"`
	Weight int64  `json:"weight"`
	Token  int64  `json:"token"`
	TTLms  int64  `json:"ttl_ms"` // until it expires unless refreshed
}

// inspect reads a semaphore's fleet limit and holders, oldest grant
// (lowest fencing token) first.
func inspect(ctx context.Context, c *limiter.Client, name string) (semState, error) {
	// The constructor's limit does not matter for reading: EffectiveLimit
	// says whether a fleet limit overrides it.
	sem, err := c.Semaphore(name, 1)
	if err != nil {
		return semState{}, err
	}
	st := semState{Name: name, Holders: []holderInfo{}}
	limit, fleet, err := sem.EffectiveLimit(ctx)
	if err != nil {
		return st, err
	}
	if fleet {
		st.FleetLimit = &limit
	}
	hs, err := sem.Holders(ctx)
	if err != nil {
		return st, err
	}
	for _, h := range hs {
		st.InUse += h.Weight
		st.Holders = append(st.Holders, holderInfo{ID: h.ID, Weight: h.Weight, Token: h.Token, TTLms: h.TTL.Milliseconds()})
	}
	slices.SortFunc(st.Holders, func(a, b holderInfo) int { return cmp.Compare(a.Token, b.Token) })
	return st, nil
}

// limitText is a fleet limit for a table: "-" when none is set.
func limitText(l *int64) string {
	if l == nil {
		return "-"
	}
	return strconv.FormatInt(*l, 10)
}

func ttlText(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}
