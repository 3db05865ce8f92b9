package sha256hex

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	// The SHA-256 of the empty string and of "abc" (FIPS 180-2).
	for in, want := range map[string]string{
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	} {
		if got := Of([]byte(in)); got != want {
			t.Errorf("Of(%q) = %s, want %s", in, got, want)
		}
		if !Valid(Of([]byte(in))) {
			t.Errorf("Valid(Of(%q)) = false", in)
		}
	}
}

func TestValid(t *testing.T) {
	ok := strings.Repeat("0123456789abcdef", 4)
	if !Valid(ok) {
		t.Errorf("Valid(%q) = false", ok)
	}
	// Too short, too long, upper case, and one byte just outside each range of hex digits.
	for _, s := range []string{"", ok[:63], ok + "0", strings.ToUpper(ok), ok[:63] + "g", ok[:63] + "/",
		ok[:63] + ":", ok[:63] + "`", ok[:63] + "\n", ok[:62] + "é"} {
		if Valid(s) {
			t.Errorf("Valid(%q) = true", s)
		}
	}
}
