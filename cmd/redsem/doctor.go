package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Statuses of a finding. A warning is a trade-off the operator should
// know about; an error breaks a promise of the limiter (more holders than
// the limit, or grants that cannot succeed).
const (
	statusOK    = "ok"
	statusWarn  = "warn"
	statusError = "error"
)

// finding is one check's verdict on one node: a line of doctor's output.
type finding struct {
	Node   string `json:"node"`
	Check  string `json:"check"`
	Status string `json:"status"` // ok, warn or error
	Found  string `json:"found"`
	Advice string `json:"advice"` // what to do; empty when nothing
}

// doctorOptions are the flags only doctor reads.
type doctorOptions struct {
	redlock      string        // -redlock: independent nodes, checked as a quorum
	waitReplicas int           // -wait-replicas: the WaitReplicas n of the Clients
	ttl          time.Duration // -ttl: the longest TTL, the restart quarantine
}

// check rejects doctor flags that contradict each other or the
// connection flags.
func (d doctorOptions) check(conn connOptions) error {
	switch {
	case d.waitReplicas < 0:
		return usagef("-wait-replicas must be >= 0")
	case d.ttl <= 0:
		return usagef("-ttl must be > 0")
	case d.redlock == "":
		return nil
	case conn.cluster != "" || conn.addrSet:
		return usagef("-redlock excludes -addr and -cluster")
	case d.waitReplicas > 0:
		return usagef("-redlock excludes -wait-replicas: Redlock nodes are independent, a Client rejects WaitReplicas")
	case len(splitAddrs(d.redlock)) == 0:
		return usagef("-redlock: no address in %q", d.redlock)
	}
	return nil
}

// errUnhealthy is doctor's exit status 1: it found an error, and printed it.
type errUnhealthy struct{ errors, warnings int }

func (e errUnhealthy) Error() string {
	return fmt.Sprintf("doctor: %d error(s), %d warning(s): Redis does not keep every promise of the limiter", e.errors, e.warnings)
}

// doctor connects to every node the flags name, runs each check on each,
// and prints the findings. It returns errUnhealthy when one is an error;
// warnings alone leave the exit status 0.
func doctor(ctx context.Context, w io.Writer, o options, getenv func(string) string) error {
	d, err := connectNodes(ctx, o, getenv)
	if err != nil {
		return err
	}
	defer d.close()
	fs := runChecks(ctx, d, o)
	if o.json {
		err = writeJSON(w, fs)
	} else {
		err = writeFindings(w, fs)
	}
	if err != nil {
		return err
	}
	return verdict(fs)
}

// verdict is nil unless a finding is an error.
func verdict(fs []finding) error {
	var e errUnhealthy
	for _, f := range fs {
		switch f.Status {
		case statusError:
			e.errors++
		case statusWarn:
			e.warnings++
		}
	}
	if e.errors > 0 {
		return e
	}
	return nil
}
