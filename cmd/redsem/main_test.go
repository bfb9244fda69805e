package main

import (
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	// Flags go before or after the command; -- ends them.
	o, act, err := parse([]string{"ls", "-json", "job*", "-prefix", "p:", "-timeout", "2s", "-addr", "h:1"})
	if err != nil || act.run == nil || act.live {
		t.Fatalf("parse: %v, %+v", err, act)
	}
	if !o.json || o.prefix != "p:" || o.timeout != 2*time.Second || o.conn.addr != "h:1" || !o.conn.addrSet {
		t.Errorf("flags after the command were not read: %+v", o)
	}
	o, _, err = parse([]string{"-password", "", "show", "x"})
	if err != nil || !o.conn.passwordSet || o.conn.addrSet || o.conn.addr != "localhost:6379" || o.prefix != "redsem:" {
		t.Errorf("defaults and explicit empty password: %+v, %v", o, err)
	}

	o, act, err = parse([]string{"watch", "jobs", "-interval", "20ms"})
	if err != nil || act.run == nil || !act.live || o.interval != 20*time.Millisecond {
		t.Errorf("watch: %+v, %+v, %v", o, act, err)
	}
	if o, act, err = parse([]string{"limit", "jobs"}); err != nil || act.run == nil || act.live || o.interval != 500*time.Millisecond {
		t.Errorf("limit NAME: %+v, %+v, %v", o, act, err)
	}
	if _, act, err = parse([]string{"limit", "jobs", "0"}); err != nil || act.run == nil {
		t.Errorf("limit NAME 0: %v", err)
	}

	for _, args := range [][]string{
		{"rate", "x"}, {"rate", "x", "5/s"}, {"rate", "x", "100/1m", "20"}, {"rate", "x", "off"},
		{"pause", "x", "30s"}, {"unpause", "x"},
	} {
		if _, act, err := parse(args); err != nil || act.run == nil || act.live {
			t.Errorf("parse %q: %v, %+v", args, err, act)
		}
	}

	pos, err := parseInterspersed(flag.NewFlagSet("t", flag.ContinueOnError), []string{"release", "--", "-odd", "-id"})
	if err != nil || !reflect.DeepEqual(pos, []string{"release", "-odd", "-id"}) {
		t.Errorf("after --: %q, %v", pos, err)
	}

	for _, args := range [][]string{
		{}, {"nope"}, {"ls", "a", "b"}, {"show"}, {"show", ""}, {"limit"}, {"limit", "x", "1", "2"},
		{"limit", "x", "1.5"}, {"limit", "x", "--", "-1"}, {"limit", ""}, {"set-limit", "x", "1"},
		{"watch"}, {"watch", "a", "b"}, {"-interval", "0s", "watch", "x"}, {"release", "x"},
		{"-bogus", "ls"}, {"-timeout", "0s", "ls"},
		{"rate", "x", "5/s", "1", "2"}, {"rate", ""}, {"pause", "x", "30s", "y"}, {"unpause", "x", "y"},
	} {
		// run exits 2 on any error of parse but help.
		if _, _, err := parse(args); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("parse %q: %v, want a usage error", args, err)
		}
	}
	// The new commands' usage errors name the argument at fault.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rate"}, "NAME is missing"},
		{[]string{"rate", "x", "fast"}, "RATE must be N/PERIOD"},
		{[]string{"rate", "x", "5/s", "0"}, "BURST must be a whole number >= 1"},
		{[]string{"pause"}, "NAME is missing"},
		{[]string{"pause", "x"}, "DURATION is missing"},
		{[]string{"pause", "x", "0s"}, "DURATION must be a duration above 0"},
		{[]string{"pause", "x", "--", "-5s"}, "DURATION must be a duration above 0"},
		{[]string{"pause", "x", "soon"}, "DURATION must be a duration above 0"},
		{[]string{"unpause"}, "NAME is missing"},
		{[]string{"show"}, "usage: redsem show NAME: NAME is missing"},
	} {
		_, _, err := parse(c.args)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parse %q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}

	for _, args := range [][]string{{"-h"}, {"help"}, {"ls", "-help"}} {
		if _, _, err := parse(args); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("parse %q: %v, want help", args, err)
		}
	}
}
