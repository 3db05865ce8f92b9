package tfcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Case is one workspace of the corpus that proves the checker: a malicious workspace it must
// refuse, or a good one it must accept.
type Case struct {
	// Name is the folder's path under the corpus root: "malicious/provider-exec", "good/k8s-demo".
	Name string
	// Malicious is true for a workspace under malicious/.
	Malicious bool
	// Files are the workspace's files, name -> content (WHY excluded).
	Files map[string][]byte
	// Why is the first line of WHY: what the attack is (or what the good workspace shows).
	Why string
	// Reason is the text after "REASON: " in WHY: a substring the refusal must contain.
	Reason string
}

// Corpus reads the corpus under dir (normally internal/tfcheck/testdata): every folder of
// dir/malicious and dir/good is a workspace, with a WHY file whose first line says what it is and,
// for malicious ones, a line "REASON: <substring of the expected refusal>"; a line "FROM: <folder>" takes the
// workspace's files from that folder, relative to the case's (readFrom). Integration tests and
// `make verify` reuse the same folders through it.
func Corpus(dir string) ([]Case, error) {
	var cases []Case
	for _, kind := range []string{"malicious", "good"} {
		entries, err := os.ReadDir(filepath.Join(dir, kind))
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			c, err := readCase(filepath.Join(dir, kind, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("corpus %s/%s: %w", kind, e.Name(), err)
			}
			c.Name = kind + "/" + e.Name()
			c.Malicious = kind == "malicious"
			if c.Malicious && c.Reason == "" {
				return nil, fmt.Errorf("corpus %s: WHY has no REASON: line", c.Name)
			}
			cases = append(cases, c)
		}
	}
	slices.SortFunc(cases, func(a, b Case) int { return strings.Compare(a.Name, b.Name) })
	return cases, nil
}

func readCase(dir string) (Case, error) {
	c := Case{Files: map[string][]byte{}}
	var from string
	entries, err := os.ReadDir(dir)
	if err != nil {
		return c, err
	}
	for _, e := range entries {
		if e.IsDir() {
			return c, fmt.Errorf("unexpected folder %s", e.Name())
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return c, err
		}
		if e.Name() == "WHY" {
			for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				line = strings.TrimSpace(line)
				switch {
				case i == 0:
					c.Why = line
				case strings.HasPrefix(line, "REASON:"):
					c.Reason = strings.TrimSpace(strings.TrimPrefix(line, "REASON:"))
				case strings.HasPrefix(line, "FROM:"):
					from = strings.TrimSpace(strings.TrimPrefix(line, "FROM:"))
				}
			}
			continue
		}
		c.Files[e.Name()] = b
	}
	if c.Why == "" {
		return c, fmt.Errorf("no WHY file")
	}
	if from != "" {
		if len(c.Files) > 0 {
			return c, fmt.Errorf("WHY says FROM: %s, and the folder has files of its own", from)
		}
		return c, readFrom(&c, filepath.Join(dir, from))
	}
	return c, nil
}

// readFrom reads a workspace kept elsewhere in the repository (a case whose WHY says "FROM: <folder,
// relative to the case's>"), its Terraform files: the corpus checks the module itself, not a copy that would age.
func readFrom(c *Case, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("FROM: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			return fmt.Errorf("FROM %s: unexpected folder %s", dir, e.Name())
		}
		if !IsWorkspaceFile(e.Name()) {
			continue // the module's README: a workspace holds its Terraform files only
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		c.Files[e.Name()] = b
	}
	return nil
}
