package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
)

// BackendOverrideFile is the file the runner writes into every working directory to put Terraform's state
// in a Secret of the target namespace. Terraform merges override files over the module's own files, so a
// backend the workspace declares is replaced by this one.
const BackendOverrideFile = "zz_backend_override.tf"

// MaxWorkspaceFileSize bounds one workspace file; a ConfigMap cannot hold more than 1 MiB anyway.
const MaxWorkspaceFileSize = 1 << 20

// MaxWorkspaceNameLength bounds a workspace name (the policy allows 40): it becomes part of Secret names.
const MaxWorkspaceNameLength = 40

// ErrBadWorkspace marks a workspace that the runner refuses to copy.
var ErrBadWorkspace = errors.New("invalid workspace")

// codeExecRE finds Terraform constructs that run programs: a provider's exec credential plugin (it runs at
// plan time, with the plan credential) and local/remote-exec provisioners, in HCL and in JSON syntax. The
// workspace comes from the untrusted MCP server; its code must only describe resources.
var codeExecRE = regexp.MustCompile(`(?m)(^|[{\s])exec\s*\{|"exec"\s*:|(local|remote)-exec|\bexternal\b\s*"`)

// fileNameRE is the character set of ConfigMap keys, which is what workspace files are.
var fileNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// WorkspaceFiles reports what CopyWorkspace did.
type WorkspaceFiles struct {
	// Copied are the file names copied, in directory order.
	Copied []string
	// Skipped are files that are not Terraform configuration, variables or the lock file.
	Skipped []string
}

// CopyWorkspace copies the Terraform files of src, a flat folder (normally the read-only ConfigMap volume
// at /workspace), into dst: *.tf, *.tfvars and .terraform.lock.hcl. Other files are skipped. It refuses,
// with ErrBadWorkspace, names outside the ConfigMap key alphabet or containing "..", subdirectories,
// anything that is not a regular file, links that lead out of src, Terraform override files (they would
// compete with the runner's backend override), oversized files, and a workspace without a .tf file.
//
// Entries whose names start with ".." are the kubelet's own bookkeeping in a ConfigMap volume (..data and
// a timestamped folder, which the key files link into); ConfigMap keys may not start with "..", so they are
// never workspace files and are passed over.
func CopyWorkspace(src, dst string) (WorkspaceFiles, error) {
	var res WorkspaceFiles
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return res, fmt.Errorf("workspace %s: %w", src, err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return res, fmt.Errorf("read workspace %s: %w", src, err)
	}
	tfFiles := 0
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") {
			continue
		}
		if !fileNameRE.MatchString(name) || strings.Contains(name, "..") {
			return res, fmt.Errorf("%w: file name %q: use only letters, digits, '.', '-' and '_', and no \"..\"", ErrBadWorkspace, name)
		}
		path := filepath.Join(src, name)
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return res, fmt.Errorf("%w: %s: %v", ErrBadWorkspace, name, err)
		}
		if !strings.HasPrefix(real, root+string(filepath.Separator)) {
			return res, fmt.Errorf("%w: %s leads outside the workspace", ErrBadWorkspace, name)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return res, fmt.Errorf("%w: %s: %v", ErrBadWorkspace, name, err)
		}
		switch {
		case fi.IsDir():
			return res, fmt.Errorf("%w: %s is a directory; a workspace is one flat folder (no modules in subfolders)", ErrBadWorkspace, name)
		case !fi.Mode().IsRegular():
			return res, fmt.Errorf("%w: %s is not a regular file", ErrBadWorkspace, name)
		case fi.Size() > MaxWorkspaceFileSize:
			return res, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadWorkspace, name, MaxWorkspaceFileSize)
		}
		if isOverrideFile(name) {
			return res, fmt.Errorf("%w: %s is a Terraform override file; the runner owns the only override (the state backend)", ErrBadWorkspace, name)
		}
		if !isWorkspaceFile(name) {
			res.Skipped = append(res.Skipped, name)
			continue
		}
		if err := copyFile(real, filepath.Join(dst, name)); err != nil {
			return res, err
		}
		if strings.HasSuffix(name, ".tf") {
			tfFiles++
		}
		res.Copied = append(res.Copied, name)
	}
	if tfFiles == 0 {
		return res, fmt.Errorf("%w: no .tf file in %s", ErrBadWorkspace, src)
	}
	return res, nil
}

// isWorkspaceFile reports whether a file is one the runner copies.
func isWorkspaceFile(name string) bool {
	return strings.HasSuffix(name, ".tf") || strings.HasSuffix(name, ".tfvars") || name == ".terraform.lock.hcl"
}

// isOverrideFile reports whether Terraform would treat the file as an override file
// (override.tf, override.tf.json, *_override.tf, *_override.tf.json).
func isOverrideFile(name string) bool {
	base := strings.TrimSuffix(strings.TrimSuffix(name, ".json"), ".tf")
	if base == name {
		return false
	}
	return base == "override" || strings.HasSuffix(base, "_override")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy workspace file: %w", err)
	}
	defer in.Close()
	data, err := io.ReadAll(io.LimitReader(in, MaxWorkspaceFileSize+1))
	if err != nil {
		return fmt.Errorf("copy workspace file: %w", err)
	}
	if len(data) > MaxWorkspaceFileSize {
		return fmt.Errorf("%w: %s is larger than %d bytes", ErrBadWorkspace, filepath.Base(dst), MaxWorkspaceFileSize)
	}
	if m := codeExecRE.Find(data); m != nil {
		return fmt.Errorf("%w: %s runs programs (%q): provider exec credential plugins and provisioners are refused, because they would run with this sandbox's credential", ErrBadWorkspace, filepath.Base(dst), strings.TrimSpace(string(m)))
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		return fmt.Errorf("copy workspace file: %w", err)
	}
	return nil
}

// ValidateWorkspaceName checks a workspace name: a DNS label of at most MaxWorkspaceNameLength characters
// (it names the state Secret, tfstate-default-<workspace>) that does not end in "-<number>" (newer
// Terraform versions reserve that suffix for state split over several Secrets).
func ValidateWorkspaceName(ws string) error {
	if len(validation.IsDNS1123Label(ws)) > 0 {
		return fmt.Errorf("workspace %q: use lowercase letters, digits and '-', starting and ending with a letter or digit", ws)
	}
	if len(ws) > MaxWorkspaceNameLength {
		return fmt.Errorf("workspace %q: longer than %d characters", ws, MaxWorkspaceNameLength)
	}
	if i := strings.LastIndexByte(ws, '-'); i >= 0 && strings.Trim(ws[i+1:], "0123456789") == "" {
		return fmt.Errorf("workspace %q: must not end in -<number>", ws)
	}
	return nil
}

// BackendConfig is where Terraform keeps a workspace's state: Secret tfstate-default-<SecretSuffix> (and
// Lease lock-tfstate-default-<SecretSuffix>) in Namespace, reached with the kubeconfig at ConfigPath.
type BackendConfig struct {
	SecretSuffix string
	Namespace    string
	ConfigPath   string
}

// Validate checks the fields before they are written into HCL.
func (b BackendConfig) Validate() error {
	var errs []error
	if err := ValidateWorkspaceName(b.SecretSuffix); err != nil {
		errs = append(errs, err)
	}
	if len(validation.IsDNS1123Label(b.Namespace)) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: not a valid namespace name", b.Namespace))
	}
	switch {
	case !filepath.IsAbs(b.ConfigPath):
		errs = append(errs, fmt.Errorf("kubeconfig path %q is not absolute", b.ConfigPath))
	case strings.IndexFunc(b.ConfigPath, unicode.IsControl) >= 0:
		errs = append(errs, fmt.Errorf("kubeconfig path %q holds a control character", b.ConfigPath))
	}
	return errors.Join(errs...)
}

// RenderBackendOverride returns the contents of BackendOverrideFile.
func RenderBackendOverride(b BackendConfig) ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	var buf bytes.Buffer
	buf.WriteString("# Written by agent-sandbox: Terraform state lives in a Secret of the target namespace, reached with\n")
	buf.WriteString("# the per-action kubeconfig. This override replaces any backend the workspace declares.\n")
	buf.WriteString("terraform {\n  backend \"kubernetes\" {\n")
	fmt.Fprintf(&buf, "    secret_suffix = %s\n", hclString(b.SecretSuffix))
	fmt.Fprintf(&buf, "    namespace     = %s\n", hclString(b.Namespace))
	fmt.Fprintf(&buf, "    config_path   = %s\n", hclString(b.ConfigPath))
	buf.WriteString("  }\n}\n")
	return buf.Bytes(), nil
}

// hclString quotes s as an HCL string literal with no template interpolation.
func hclString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "${", "$${", "%{", "%%{")
	return `"` + r.Replace(s) + `"`
}
