package tfcheck

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	version "github.com/hashicorp/go-version"
	"github.com/hashicorp/hcl/v2"
)

// Limits on a workspace. They bound the work the checker does, and so the time hostile input costs.
const (
	// MaxFileSize bounds one file; a ConfigMap cannot hold more than 1 MiB anyway.
	MaxFileSize = 1 << 20
	// MaxTotalSize bounds all files of a workspace together.
	MaxTotalSize = 2 << 20
	// MaxFiles bounds the number of files of a workspace.
	MaxFiles = 64
	// MaxDepth bounds nesting: brackets, braces, parentheses, blocks, templates and JSON values.
	MaxDepth = 64
	// MaxItems bounds the blocks, arguments and JSON values of a workspace.
	MaxItems = 50000
	// maxChained bounds the conditional operators and full splats of one file: the parser nests
	// each one in the previous one without brackets.
	maxChained = 4096
	// maxTemplateParts bounds the parts of one string, heredoc or JSON template: literal pieces
	// (a heredoc has one a line) and ${ and %{ sequences. hclsyntax melds consecutive literal pieces in
	// time that grows with the square of the parts, and Terraform parses with the same code: a
	// 600 KB heredoc took 80 s to check, and as long again for each time Terraform parses it.
	maxTemplateParts = 20000
	// maxExprDepth bounds the depth of an expression tree. Binary operators and index chains make
	// deep trees without brackets; the checker's own walk stops here.
	maxExprDepth = 256
	// maxProblems bounds the problems reported; past it the checker stops looking.
	maxProblems = 200
)

// ErrRefused marks a workspace, or a saved plan, that the allowlist does not admit.
var ErrRefused = errors.New("workspace refused")

// Options configure the checks.
type Options struct {
	// ProviderVersion is the only kubernetes provider version available (the offline mirror):
	// "1.13.4". A required_providers version constraint must admit it.
	ProviderVersion string
	// Backend, for CheckPlan: the backend the plan must record. Type "local" with the single
	// setting path = Backend.Path (the runner plans with a local state file it manages itself; an
	// empty Path means path must be unset). Workspace is the Terraform workspace ("" means
	// "default"). Every other backend type, and any other non-null setting, is refused.
	Backend struct{ Type, Path, Workspace string }
	// RunnerFiles, for CheckPlan: files the runner itself adds to the working directory before it
	// plans (say, an override file that sets the backend). Terraform copies them into the plan's
	// configuration snapshot; CheckPlan admits a snapshot file of one of these names only if its
	// content is byte for byte the same, and does not hold it to the workspace rules.
	RunnerFiles map[string][]byte
}

// Problem is one reason a workspace is refused.
type Problem struct {
	// File is the workspace file name ("" for the workspace as a whole).
	File string
	// Line and Column locate the problem (1-based); zero when the problem has no position.
	Line, Column int
	// Reason says what was found and why it is refused.
	Reason string
}

// String formats p as "file:line,col: reason".
func (p Problem) String() string {
	switch {
	case p.File == "":
		return p.Reason
	case p.Line == 0:
		return p.File + ": " + p.Reason
	default:
		return fmt.Sprintf("%s:%d,%d: %s", p.File, p.Line, p.Column, p.Reason)
	}
}

// RefusedError lists every problem found. It matches ErrRefused with errors.Is.
type RefusedError struct {
	Problems []Problem
}

// Error lists the problems, one a line.
func (e *RefusedError) Error() string {
	var b strings.Builder
	b.WriteString(ErrRefused.Error())
	b.WriteString(":")
	for _, p := range e.Problems {
		b.WriteString("\n")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Unwrap() error { return ErrRefused }

var fileNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// IsWorkspaceFile reports whether name is a file a workspace may contain and the runner copies:
// *.tf, *.tf.json, *.tfvars, *.tfvars.json, .terraform.lock.hcl. Override files (override.tf,
// *_override.tf, and their .json forms) are NOT workspace files: Check refuses them, because
// Terraform merges them over the other files (and the runner owns the only override).
func IsWorkspaceFile(name string) bool {
	if name == lockFileName {
		return true
	}
	if !fileNameRE.MatchString(name) || strings.Contains(name, "..") {
		return false
	}
	return fileKindOf(name) != kindNone && !isOverrideFile(name)
}

const lockFileName = ".terraform.lock.hcl"

type fileKind int

const (
	kindNone fileKind = iota
	kindConfigHCL
	kindConfigJSON
	kindVarsHCL
	kindVarsJSON
	kindLock
)

func fileKindOf(name string) fileKind {
	switch {
	case name == lockFileName:
		return kindLock
	case strings.HasSuffix(name, ".tf"):
		return kindConfigHCL
	case strings.HasSuffix(name, ".tf.json"):
		return kindConfigJSON
	case strings.HasSuffix(name, ".tfvars"):
		return kindVarsHCL
	case strings.HasSuffix(name, ".tfvars.json"):
		return kindVarsJSON
	}
	return kindNone
}

// isOverrideFile reports whether Terraform would treat name as an override file (its
// configs.Parser rule: the name less .tf or .tf.json is "override" or ends in "_override").
func isOverrideFile(name string) bool {
	var base string
	switch {
	case strings.HasSuffix(name, ".tf"):
		base = strings.TrimSuffix(name, ".tf")
	case strings.HasSuffix(name, ".tf.json"):
		base = strings.TrimSuffix(name, ".tf.json")
	default:
		return false
	}
	return base == "override" || strings.HasSuffix(base, "_override")
}

// Check checks a whole workspace (file name -> content) against the allowlist. It returns nil or
// an error wrapping ErrRefused whose message lists every problem as "file:line,col: what and why"
// (one per line). Options that cannot be used (a ProviderVersion that is not a version) give an
// error that does not wrap ErrRefused; it is an error all the same, so a caller fails closed.
func Check(files map[string][]byte, opts Options) error {
	c, err := newChecker(opts)
	if err != nil {
		return err
	}
	c.checkFiles(files)
	return c.result()
}

// checker collects the problems of one workspace.
type checker struct {
	opts     Options
	provider *version.Version
	problems []Problem
	items    int
	file     string // the file being checked
}

func newChecker(opts Options) (*checker, error) {
	v, err := version.NewVersion(opts.ProviderVersion)
	if err != nil {
		return nil, fmt.Errorf("tfcheck: provider version %q: %w", opts.ProviderVersion, err)
	}
	return &checker{opts: opts, provider: v}, nil
}

func (c *checker) result() error {
	if len(c.problems) == 0 {
		return nil
	}
	ps := slices.Clone(c.problems)
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	ps = slices.Compact(ps)
	return &RefusedError{Problems: ps}
}

// full reports whether enough problems were found to stop looking.
func (c *checker) full() bool { return len(c.problems) >= maxProblems }

// refuse records a problem at a position of the current file.
func (c *checker) refuse(pos hcl.Pos, format string, args ...any) {
	if c.full() {
		return
	}
	c.problems = append(c.problems, Problem{File: c.file, Line: pos.Line, Column: pos.Column, Reason: fmt.Sprintf(format, args...)})
}

// refuseFile records a problem of the current file as a whole.
func (c *checker) refuseFile(format string, args ...any) {
	c.refuse(hcl.Pos{}, format, args...)
}

// count counts one block, argument or value, and reports false once there are too many.
func (c *checker) count(pos hcl.Pos) bool {
	c.items++
	if c.items == MaxItems+1 {
		c.refuse(pos, "more than %d blocks, arguments and values in the workspace", MaxItems)
	}
	return c.items <= MaxItems && !c.full()
}

// diags records the errors of a parser's diagnostics.
func (c *checker) diags(ds hcl.Diagnostics) {
	for _, d := range ds {
		if d.Severity != hcl.DiagError {
			continue
		}
		var pos hcl.Pos
		if d.Subject != nil {
			pos = d.Subject.Start
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		c.refuse(pos, "invalid syntax: %s", msg)
	}
}

func (c *checker) checkFiles(files map[string][]byte) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > MaxFiles {
		c.problems = append(c.problems, Problem{Reason: fmt.Sprintf("%d files: a workspace holds at most %d", len(names), MaxFiles)})
		return
	}
	total, configs := 0, 0
	for _, n := range names {
		total += len(files[n])
	}
	if total > MaxTotalSize {
		c.problems = append(c.problems, Problem{Reason: fmt.Sprintf("the files add up to %d bytes: a workspace holds at most %d", total, MaxTotalSize)})
		return
	}
	for _, n := range names {
		c.file = n
		if !IsWorkspaceFile(n) {
			switch {
			case isOverrideFile(n):
				c.refuseFile("override files are not allowed: Terraform merges them over the other files, and the runner owns the only override")
			default:
				c.refuseFile("not a workspace file: only *.tf, *.tf.json, *.tfvars, *.tfvars.json and .terraform.lock.hcl, named with [A-Za-z0-9._-]")
			}
			continue
		}
		c.checkFile(n, files[n])
		if k := fileKindOf(n); k == kindConfigHCL || k == kindConfigJSON {
			configs++
		}
	}
	c.file = ""
	if configs == 0 && !c.full() {
		c.problems = append(c.problems, Problem{Reason: "no .tf or .tf.json file"})
	}
}

// checkFile checks one file whose name IsWorkspaceFile admits.
func (c *checker) checkFile(name string, src []byte) {
	if len(src) > MaxFileSize {
		c.refuseFile("%d bytes: a file holds at most %d", len(src), MaxFileSize)
		return
	}
	if !utf8.Valid(src) {
		c.refuseFile("not valid UTF-8")
		return
	}
	switch fileKindOf(name) {
	case kindConfigHCL:
		c.checkNativeFile(src, configRules)
	case kindVarsHCL:
		c.checkNativeFile(src, varsRules)
	case kindLock:
		c.checkNativeFile(src, lockRules)
	case kindConfigJSON:
		c.checkJSONFile(src, configRules)
	case kindVarsJSON:
		c.checkJSONFile(src, varsRules)
	}
}
