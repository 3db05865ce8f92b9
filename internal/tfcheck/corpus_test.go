package tfcheck

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var testOpts = Options{ProviderVersion: "1.13.4"}

// TestCorpus runs every workspace of testdata: each malicious one is refused with its recorded
// reason, each good one is accepted.
func TestCorpus(t *testing.T) {
	cases, err := Corpus("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var bad, good int
	for _, c := range cases {
		if c.Malicious {
			bad++
		} else {
			good++
		}
		t.Run(c.Name, func(t *testing.T) {
			// The largest cases are a megabyte of hostile input; checking is linear in it, but HCL's
			// lexer takes seconds on a loaded machine under -race. A hang would take far longer.
			start := time.Now()
			err := Check(c.Files, testOpts)
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("check took %v", d)
			}
			if !c.Malicious {
				if err != nil {
					t.Fatalf("good workspace refused (%s):\n%v", c.Why, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("malicious workspace accepted: %s", c.Why)
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("error does not wrap ErrRefused: %v", err)
			}
			if !strings.Contains(err.Error(), c.Reason) {
				t.Fatalf("refused, but not for %q:\n%v", c.Reason, err)
			}
		})
	}
	if bad < 30 || good < 3 {
		t.Errorf("corpus has %d malicious and %d good workspaces; want at least 30 and 3", bad, good)
	}
}
