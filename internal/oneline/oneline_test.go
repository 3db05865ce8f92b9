package oneline

import "testing"

func TestFold(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "",
		"  a\n\tb  c\r\n":           "a b c",
		"ERROR: <input>:1:5: x\n |": "ERROR: <input>:1:5: x |",
		"one":                       "one",
	} {
		if got := Fold(in); got != want {
			t.Errorf("Fold(%q) = %q, want %q", in, got, want)
		}
	}
}
