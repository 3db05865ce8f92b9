package screen

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// DefaultPageLines is how many rows a page holds when the terminal's height is unknown.
const DefaultPageLines = 40

// NextPagePrompt ends the line with which the Pager waits at the bottom of each page; what drives a
// terminal unattended (test/harness's Terminal) answers it with Enter.
const NextPagePrompt = "Enter for the next page --"

// Pager shows a long text a screenful at a time on a terminal, so that nothing scrolls past a person
// before they have read it: after each page but the last it prints
//
//	-- more: line X of Y, Enter for the next page --
//
// and waits for Enter. It never leaves a line out.
type Pager struct {
	Out io.Writer
	// Rows is how many rows of the terminal a page fills, the prompt line included (DefaultPageLines
	// when 0 or less; at least 2).
	Rows int
	// Width is the terminal's width in columns, 0 when unknown: a line longer than that fills more than
	// one row, and a page holds fewer lines.
	Width int
	// Next waits until the person asks for the next page (types Enter on the terminal).
	Next func() error
}

// Page writes text, page by page. above is what the caller printed just before (a header, already on the
// screen): it fills the first page and its lines count in the line numbers of the prompt.
func (p *Pager) Page(above, text string) error {
	rows := p.Rows
	if rows <= 0 {
		rows = DefaultPageLines
	}
	if rows < 2 {
		rows = 2
	}
	shownLines := splitLines(above)
	shown, shownRows := len(shownLines), 0
	for _, l := range shownLines {
		shownRows += p.rowsOf(l)
	}
	lines := splitLines(text)
	total := shown + len(lines)
	// One row of each page is the prompt's.
	budget, used := rows-1-shownRows, 0
	// fresh is true at the top of an empty page: a line too long for a whole page is printed there rather
	// than waited for forever.
	fresh := shown == 0
	for i, line := range lines {
		need := p.rowsOf(line)
		if !fresh && used+need > budget {
			if _, err := fmt.Fprintf(p.Out, "-- more: line %d of %d, "+NextPagePrompt, shown+i, total); err != nil {
				return err
			}
			if err := p.Next(); err != nil {
				return err
			}
			budget, used = rows-1, 0
		}
		if _, err := io.WriteString(p.Out, line); err != nil {
			return err
		}
		used += need
		fresh = false
	}
	return nil
}

// splitLines splits text after each newline; a last line without one counts.
func splitLines(text string) []string {
	lines := strings.SplitAfter(text, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// rowsOf is how many terminal rows line fills.
func (p *Pager) rowsOf(line string) int {
	if p.Width <= 0 {
		return 1
	}
	n := utf8.RuneCountInString(strings.TrimRight(line, "\r\n"))
	if n == 0 {
		return 1
	}
	return (n + p.Width - 1) / p.Width
}
