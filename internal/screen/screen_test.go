package screen

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
)

func TestLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text é", "plain text é"},
		{"a\x1b[31mb", `a\u001b[31mb`},
		{"new\nline", `new\u000aline`},
		{"tab\there", `tab\u0009here`},
		{"c1\u009bcontrol", `c1\u009bcontrol`},
		{"bidi\u202eflip\u2066", `bidi\u202eflip\u2066`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"bad\xffbyte", `bad\xffbyte`},
		{`back\slash`, `back\\slash`},
		{`"quotes" stay`, `"quotes" stay`},
		{"astral \U000e0001 tag", `astral \U000e0001 tag`},
	}
	for _, tt := range tests {
		if got := Line(tt.in); got != tt.want {
			t.Errorf("Line(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := Text("a\nb\tc\x1b"); got != "a\nb\tc\\u001b" {
		t.Errorf("Text = %q", got)
	}
}

func TestASCIIMarksLookAlikes(t *testing.T) {
	tests := []struct{ in, want string }{
		{"web", "web"},
		{"web\u0435", `web\u0435 [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE]`},
		{"\u0430\u0430pp", `\u0430\u0430pp [non-ASCII: U+0430 CYRILLIC SMALL LETTER A]`},
		{"caf\u00e9 \u202e", `caf\u00e9 \u202e [non-ASCII: U+00E9 LATIN SMALL LETTER E WITH ACUTE, U+202E RIGHT-TO-LEFT OVERRIDE]`},
		// An invalid byte is escaped, not named: it is no character.
		{"x\xff", `x\xff`},
		{"\x1b[2J", `\u001b[2J`},
	}
	for _, tt := range tests {
		if got := ASCII(tt.in); got != tt.want {
			t.Errorf("ASCII(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got, want := Quote("say \"w\u0435b\"\n"), `"say \"w\u0435b\"\u000a"`; got != want {
		t.Errorf("Quote = %s, want %s", got, want)
	}
	many := "\u0430\u0431\u0432\u0433\u0434\u0435\u0436\u0437\u0438\u0439\u043a"
	if got := Marker(many); !strings.HasSuffix(got, " and 3 more]") || strings.Count(got, "U+") != maxMarked {
		t.Errorf("Marker of 11 letters = %q", got)
	}
}

// TestEscapedOutputIsInert: whatever the input, Line, ASCII and Quote print no character a terminal acts on
// (and ASCII and Quote print only ASCII).
func TestEscapedOutputIsInert(t *testing.T) {
	var all strings.Builder
	for r := rune(0); r < 0x3000; r++ {
		all.WriteRune(r)
	}
	all.WriteString("\U000e0001\U0010ffff\xff\xc0")
	in := all.String()
	for name, out := range map[string]string{"Line": Line(in), "ASCII": ASCII(in), "Quote": Quote(in)} {
		for _, r := range out {
			if !unicode.IsPrint(r) || (name != "Line" && r > 0x7e) {
				t.Fatalf("%s printed %U", name, r)
			}
		}
	}
}

func TestPager(t *testing.T) {
	lines := func(n int) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "line %d\n", i)
		}
		return b.String()
	}
	tests := []struct {
		name        string
		text        string
		rows, width int
		above       string
		wantPrompts []string
	}{
		{name: "fits", text: lines(39), wantPrompts: nil},
		{name: "default 40 rows", text: lines(100), wantPrompts: []string{"line 39 of 100", "line 78 of 100"}},
		{name: "terminal height", text: lines(10), rows: 5, wantPrompts: []string{"line 4 of 10", "line 8 of 10"}},
		{name: "header counted", text: lines(10), rows: 5, above: "h1\nh2\n", wantPrompts: []string{"line 4 of 12", "line 8 of 12"}},
		{name: "header fills the page", text: lines(3), rows: 5, above: lines(6), wantPrompts: []string{"line 6 of 9"}},
		{name: "a wrapped header line fills two rows", text: lines(4), rows: 5, width: 10, above: strings.Repeat("h", 15) + "\n", wantPrompts: []string{"line 3 of 5"}},
		{name: "long lines fill rows", text: strings.Repeat(strings.Repeat("x", 25)+"\n", 4), rows: 5, width: 10, wantPrompts: []string{"line 1 of 4", "line 2 of 4", "line 3 of 4"}},
		{name: "a line longer than a page", text: strings.Repeat("x", 100) + "\nend\n", rows: 3, width: 10, wantPrompts: []string{"line 1 of 2"}},
		{name: "no trailing newline", text: "a\nb\nc", rows: 3, wantPrompts: []string{"line 2 of 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			var prompts []string
			p := &Pager{Out: &out, Rows: tt.rows, Width: tt.width, Next: func() error {
				s := out.String()
				prompts = append(prompts, s[strings.LastIndex(s, "-- more: ")+len("-- more: "):strings.LastIndex(s, ", Enter")])
				out.WriteString("\n") // the terminal echoes Enter
				return nil
			}}
			if err := p.Page(tt.above, tt.text); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(prompts) != fmt.Sprint(tt.wantPrompts) {
				t.Errorf("prompts %q, want %q", prompts, tt.wantPrompts)
			}
			// Nothing is left out: the output is the text with the prompts (and the echoed Enters) in it.
			got := out.String()
			for range prompts {
				i := strings.Index(got, "-- more: ")
				j := strings.Index(got[i:], "--\n")
				got = got[:i] + got[i+j+3:]
			}
			if got != tt.text {
				t.Errorf("paged text differs from the text:\n%s", out.String())
			}
		})
	}
}

func TestPagerStopsWhenTheReaderDoes(t *testing.T) {
	var out bytes.Buffer
	stop := errors.New("interrupted")
	p := &Pager{Out: &out, Rows: 3, Next: func() error { return stop }}
	if err := p.Page("", "1\n2\n3\n4\n"); !errors.Is(err, stop) {
		t.Fatalf("Page = %v, want the reader's error", err)
	}
	if out.String() != "1\n2\n-- more: line 2 of 4, Enter for the next page --" {
		t.Errorf("output %q", out.String())
	}
}
