package corpus

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@`)

// applyPatch applies a unified diff (diff -u) to old, strictly: each hunk must stand at the line its header
// names, and its context and removed lines must match old to the byte. There is no fuzz: a demo workspace
// that has moved on under a harmful case makes the case fail to load, rather than quietly attack something
// else.
func applyPatch(old, patch string) (string, error) {
	src := strings.SplitAfter(old, "\n")
	if src[len(src)-1] == "" {
		src = src[:len(src)-1]
	}
	lines := strings.SplitAfter(patch, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "--- ") || !strings.HasPrefix(lines[1], "+++ ") {
		return "", fmt.Errorf("not a unified diff: it must begin with --- and +++ lines")
	}
	var out strings.Builder
	next := 0 // the first line of src not yet copied
	for i := 2; i < len(lines) && lines[i] != ""; {
		m := hunkHeader.FindStringSubmatch(lines[i])
		if m == nil {
			return "", fmt.Errorf("patch line %d: want a hunk header, found %q", i+1, strings.TrimRight(lines[i], "\n"))
		}
		start, oldN, newN := atoi(m[1]), count(m[2]), count(m[4])
		if oldN > 0 {
			start-- // 1-based; a hunk that removes nothing names the line it follows
		}
		if start < next || start > len(src) {
			return "", fmt.Errorf("patch line %d: hunk at line %d is out of order or past the end", i+1, start+1)
		}
		for _, l := range src[next:start] {
			out.WriteString(l)
		}
		next = start
		var gotOld, gotNew int
		for i++; i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@"); i++ {
			text := lines[i][1:]
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], `\`) {
				text = strings.TrimSuffix(text, "\n") // "\ No newline at end of file"
			}
			switch lines[i][0] {
			case ' ', '-':
				if next >= len(src) || src[next] != text {
					return "", fmt.Errorf("patch line %d: line %d of the file is not %q", i+1, next+1, strings.TrimRight(text, "\n"))
				}
				if lines[i][0] == ' ' {
					out.WriteString(text)
					gotNew++
				}
				next++
				gotOld++
			case '+':
				out.WriteString(text)
				gotNew++
			case '\\':
			default:
				return "", fmt.Errorf("patch line %d: %q is not a context, removed or added line", i+1, strings.TrimRight(lines[i], "\n"))
			}
		}
		if gotOld != oldN || gotNew != newN {
			return "", fmt.Errorf("hunk at line %d: its header says -%d +%d lines, it has -%d +%d", start+1, oldN, newN, gotOld, gotNew)
		}
	}
	for _, l := range src[next:] {
		out.WriteString(l)
	}
	return out.String(), nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// count is a hunk header's line count: absent means one.
func count(s string) int {
	if s == "" {
		return 1
	}
	return atoi(s)
}
