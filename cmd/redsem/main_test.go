package main

import (
	"errors"
	"flag"
	"reflect"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	// Flags go before or after the command; -- ends them.
	o, act, err := parse([]string{"ls", "-json", "job*", "-prefix", "p:", "-timeout", "2s", "-addr", "h:1"})
	if err != nil || act == nil {
		t.Fatalf("parse: %v", err)
	}
	if !o.json || o.prefix != "p:" || o.timeout != 2*time.Second || o.conn.addr != "h:1" || !o.conn.addrSet {
		t.Errorf("flags after the command were not read: %+v", o)
	}
	o, _, err = parse([]string{"-password", "", "show", "x"})
	if err != nil || !o.conn.passwordSet || o.conn.addrSet || o.conn.addr != "localhost:6379" || o.prefix != "redsem:" {
		t.Errorf("defaults and explicit empty password: %+v, %v", o, err)
	}

	pos, err := parseInterspersed(flag.NewFlagSet("t", flag.ContinueOnError), []string{"release", "--", "-odd", "-id"})
	if err != nil || !reflect.DeepEqual(pos, []string{"release", "-odd", "-id"}) {
		t.Errorf("after --: %q, %v", pos, err)
	}

	for _, args := range [][]string{
		{}, {"nope"}, {"ls", "a", "b"}, {"show"}, {"show", ""}, {"set-limit", "x"},
		{"set-limit", "x", "1.5"}, {"set-limit", "x", "--", "-1"}, {"release", "x"},
		{"-bogus", "ls"}, {"-timeout", "0s", "ls"},
	} {
		// run exits 2 on any error of parse but help.
		if _, _, err := parse(args); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("parse %q: %v, want a usage error", args, err)
		}
	}
	for _, args := range [][]string{{"-h"}, {"help"}, {"ls", "-help"}} {
		if _, _, err := parse(args); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("parse %q: %v, want help", args, err)
		}
	}
}
