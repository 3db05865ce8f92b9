// Package screen prints text that nobody trusts for a person at a terminal who must decide on it: escaped so
// that it cannot repaint the screen (control characters, escape sequences, bidirectional overrides, invalid
// UTF-8), marked where a character only looks like ASCII (a Cyrillic "е" in a resource name), and paged,
// never cut. Every text the approver's tools print that came from the MCP server or from a plan goes
// through this package: there is one escaper.
package screen

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/runenames"
)

// Line makes s safe to print on one terminal line: control characters (escape sequences included), C1
// controls, invisible formatting characters such as bidirectional overrides, line breaks and invalid UTF-8
// are shown as escapes (\u001b, \u202e, \xff) instead of being interpreted by the terminal, and a backslash
// is doubled so that an escape cannot be faked. Printable non-ASCII characters are kept.
func Line(s string) string { return escape(s, opts{}) }

// Text is Line for multi-line text: newlines and tabs are kept.
func Text(s string) string { return escape(s, opts{multiline: true}) }

// ASCII is Line that also escapes every non-ASCII character (as \u0435), so that what is printed is plain
// ASCII, and appends Marker(s) when there was any: "web\u0435 [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE]".
// It is for names a person compares by eye: resource addresses, attribute names, values.
func ASCII(s string) string { return escape(s, opts{ascii: true}) + Marker(s) }

// Quote is s in double quotes, escaped as ASCII does (a double quote inside is \"), without the marker: the
// caller appends Marker where it fits the line.
func Quote(s string) string { return `"` + escape(s, opts{ascii: true, quote: true}) + `"` }

// maxMarked bounds how many distinct characters one marker names.
const maxMarked = 8

// Marker names the distinct non-ASCII characters of s, in the order they first appear, as
// " [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE, ...]"; it is empty when s is ASCII. Invalid bytes are
// not characters: they are escaped as \xff and not named.
func Marker(s string) string {
	var seen []rune
	more := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r < utf8.RuneSelf || (r == utf8.RuneError && size == 1) || containsRune(seen, r) {
			continue
		}
		if len(seen) == maxMarked {
			more++
			continue
		}
		seen = append(seen, r)
	}
	if len(seen) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" [non-ASCII: ")
	for i, r := range seen {
		if i > 0 {
			b.WriteString(", ")
		}
		name := runenames.Name(r)
		if name == "" || strings.HasPrefix(name, "<") {
			name = "UNNAMED"
		}
		fmt.Fprintf(&b, "U+%04X %s", r, name)
	}
	if more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	b.WriteString("]")
	return b.String()
}

// HasNonASCII reports whether s holds a byte outside ASCII (a character or an invalid byte).
func HasNonASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

func containsRune(rs []rune, r rune) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

type opts struct {
	multiline bool // keep \n and \t
	ascii     bool // escape every non-ASCII character too
	quote     bool // escape the double quote
}

func escape(s string, o opts) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case o.multiline && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\\':
			b.WriteString(`\\`)
		case o.quote && r == '"':
			b.WriteString(`\"`)
		case unicode.IsPrint(r) && (!o.ascii || r < utf8.RuneSelf):
			b.WriteRune(r)
		default:
			if r <= 0xffff {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		}
		i += size
	}
	return b.String()
}
