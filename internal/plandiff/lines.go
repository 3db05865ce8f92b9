package plandiff

import (
	"fmt"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// lineContext is how many unchanged lines the screen keeps around a changed one; a longer unchanged run is
// folded into one line that counts it.
const lineContext = 3

// maxDiffLines bounds the lines of either side a line diff compares once their common first and last lines
// are set aside (its table is their product); past it the screen says that it shows no line diff, and why.
const maxDiffLines = 512

// multiLine returns the line-by-line diff of a string attribute the change sets that holds more than one
// line (a script, a configuration file), or nil: on the attribute's own line before and after stand whole,
// escaped, where one changed line of a script is easy to miss. Each line is escaped as values are; a
// sensitive, unknown or cut value gets none (the screen says why elsewhere).
func multiLine(b, a val) []string {
	as, ok := a.v.(string)
	if !ok || a.sensitive() || a.unknown() || len(as) > MaxStringBytes {
		return nil
	}
	bs := ""
	if b.hasValue() {
		if bs, ok = b.v.(string); !ok || b.sensitive() || len(bs) > MaxStringBytes {
			return nil
		}
	}
	if !strings.Contains(as, "\n") && !strings.Contains(bs, "\n") {
		return nil
	}
	var before []string
	if b.hasValue() {
		before = strings.Split(bs, "\n")
	}
	after := strings.Split(as, "\n")
	// Lines the two share at the start and at the end are in both: only the middle needs the table.
	head := 0
	for head < len(before) && head < len(after) && before[head] == after[head] {
		head++
	}
	tail := 0
	for tail < len(before)-head && tail < len(after)-head && before[len(before)-1-tail] == after[len(after)-1-tail] {
		tail++
	}
	midB, midA := before[head:len(before)-tail], after[head:len(after)-tail]
	if len(midB) > maxDiffLines || len(midA) > maxDiffLines {
		// Found in review (2026-12-07): a script padded past the bound lost its line diff silently.
		return []string{fmt.Sprintf("! (no line diff: %d lines before and %d after differ, more than %d; compare the whole values above)",
			len(midB), len(midA), maxDiffLines)}
	}
	var lines []string
	for _, l := range before[:head] {
		lines = append(lines, diffLine(" ", l))
	}
	lines = append(lines, diffLines(midB, midA)...)
	for _, l := range after[len(after)-tail:] {
		lines = append(lines, diffLine(" ", l))
	}
	return foldUnchanged(lines)
}

// diffLine is one line of a line diff: its sign ("  ", "- ", "+ ") and the line escaped as values are.
func diffLine(sign, s string) string { return sign + " " + screen.Quote(s) + screen.Marker(s) }

// diffLines is a longest-common-subsequence diff of two lists of lines (without their line ends): each
// line of the result starts with "  " (in both), "- " (before only) or "+ " (after only), then the line
// escaped; a removed line comes before the line added in its place.
func diffLines(before, after []string) []string {
	n, m := len(before), len(after)
	// lcs[i][j] is the length of the longest common subsequence of before[i:] and after[j:].
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if before[i] == after[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && before[i] == after[j]:
			out = append(out, diffLine(" ", before[i]))
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, diffLine("-", before[i]))
			i++
		default:
			out = append(out, diffLine("+", after[j]))
			j++
		}
	}
	return out
}

// foldUnchanged keeps lineContext unchanged lines on each side of a change and folds the rest of each
// unchanged run into "  (… N unchanged lines)".
func foldUnchanged(lines []string) []string {
	changed := func(l string) bool { return l[0] != ' ' }
	if len(lines) == 1 && lines[0][0] == '!' {
		return lines
	}
	var out []string
	for i := 0; i < len(lines); {
		if changed(lines[i]) {
			out = append(out, lines[i])
			i++
			continue
		}
		j := i
		for j < len(lines) && !changed(lines[j]) {
			j++
		}
		keepHead, keepTail := lineContext, lineContext
		if i == 0 {
			keepHead = 0
		}
		if j == len(lines) {
			keepTail = 0
		}
		if j-i <= keepHead+keepTail+1 {
			out = append(out, lines[i:j]...)
		} else {
			out = append(out, lines[i:i+keepHead]...)
			out = append(out, fmt.Sprintf("  (… %d unchanged lines)", j-i-keepHead-keepTail))
			out = append(out, lines[j-keepTail:j]...)
		}
		i = j
	}
	return out
}
