package tfcheck

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"google.golang.org/protobuf/encoding/protowire"
)

// Limits on a saved plan.
const (
	// MaxPlanSize bounds a saved plan file (compressed).
	MaxPlanSize = 16 << 20
	// maxPlanEntries bounds the entries of a plan's zip.
	maxPlanEntries = MaxFiles + 8
	// maxTfplanSize bounds the tfplan entry (uncompressed).
	maxTfplanSize = 64 << 20
)

// The entries of a saved plan (Terraform v1.11 internal/plans/planfile).
const (
	planEntryPlan       = "tfplan"
	planEntryState      = "tfstate"
	planEntryPrevState  = "tfstate-prev"
	planEntryLock       = ".terraform.lock.hcl"
	planEntryManifest   = "tfconfig/modules.json"
	planEntryRootPrefix = "tfconfig/m-/" // the root module's key is ""
)

// tfplanFormatVersion is the tfplan format of Terraform v1.11.
const tfplanFormatVersion = 3

// Field numbers of tfplan's protobuf messages, from Terraform v1.11.4
// internal/plans/planproto/planfile.proto.
const (
	fieldPlanVersion   protowire.Number = 1
	fieldPlanBackend   protowire.Number = 13
	fieldBackendType   protowire.Number = 1
	fieldBackendConfig protowire.Number = 2
	fieldBackendWS     protowire.Number = 3
	fieldDynMsgpack    protowire.Number = 1
)

// planFields are the fields of message Plan in Terraform v1.11.4, with their wire types. A plan with
// any other field was not written by that Terraform and is refused.
var planFields = map[protowire.Number]protowire.Type{
	1:  protowire.VarintType, // version
	2:  protowire.BytesType,  // variables
	3:  protowire.BytesType,  // resource_changes
	4:  protowire.BytesType,  // output_changes
	5:  protowire.BytesType,  // target_addrs
	13: protowire.BytesType,  // backend
	14: protowire.BytesType,  // terraform_version
	15: protowire.BytesType,  // relevant_attributes
	16: protowire.BytesType,  // force_replace_addrs
	17: protowire.VarintType, // ui_mode
	18: protowire.BytesType,  // resource_drift
	19: protowire.BytesType,  // check_results
	20: protowire.VarintType, // errored
	21: protowire.BytesType,  // timestamp
	22: protowire.BytesType,  // provider_function_results
	25: protowire.VarintType, // applyable
	26: protowire.VarintType, // complete
	27: protowire.BytesType,  // deferred_changes
	28: protowire.BytesType,  // apply_time_variables
}

// CheckPlan checks a saved Terraform plan file (a zip). Terraform applies a saved plan with the
// configuration snapshot inside it (tfconfig/...), not with the working directory, and writes
// state to the backend recorded in it; so both must pass: the snapshot holds only the root module,
// its files pass Check (with the same Options; files the runner adds, opts.RunnerFiles, must be
// byte for byte the runner's), and the backend is exactly opts.Backend. It returns an error
// wrapping ErrRefused that lists the problems, like Check.
func CheckPlan(plan []byte, opts Options) error {
	_, err := PlanConfig(plan, opts)
	return err
}

// PlanConfig checks a saved plan like CheckPlan and returns the configuration Terraform will apply it
// with: the root module's files and the lock file, by file name, for the working directory in which the
// plan is initialised and applied.
func PlanConfig(plan []byte, opts Options) (map[string][]byte, error) {
	c, err := newChecker(opts)
	if err != nil {
		return nil, err
	}
	if opts.Backend.Type != "" && opts.Backend.Type != "local" {
		return nil, fmt.Errorf("tfcheck: backend type %q: only local is supported", opts.Backend.Type)
	}
	files, lock := c.planEntries(plan)
	if len(c.problems) > 0 {
		return nil, c.result()
	}
	// Check the workspace files with the rules of Check, then name each problem by its entry.
	if lock != nil {
		files[lockFileName] = lock
	}
	c.checkFiles(files)
	for i, p := range c.problems {
		switch p.File {
		case "":
		case lockFileName:
			c.problems[i].File = planEntryLock
		default:
			c.problems[i].File = planEntryRootPrefix + p.File
		}
	}
	if err := c.result(); err != nil {
		return nil, err
	}
	return files, nil
}

// planEntries reads the plan's zip: it refuses unknown, repeated and oversize entries, checks the
// module manifest and the backend, and returns the root module's workspace files (less the
// runner's own, which it compares) and the lock file.
func (c *checker) planEntries(plan []byte) (map[string][]byte, []byte) {
	c.file = "plan"
	defer func() { c.file = "" }()
	if len(plan) > MaxPlanSize {
		c.refuseFile("%d bytes: a saved plan holds at most %d", len(plan), MaxPlanSize)
		return nil, nil
	}
	zr, err := zip.NewReader(bytes.NewReader(plan), int64(len(plan)))
	if err != nil {
		c.refuseFile("not a plan file: %v", err)
		return nil, nil
	}
	if len(zr.File) > maxPlanEntries {
		c.refuseFile("%d entries: a saved plan holds at most %d", len(zr.File), maxPlanEntries)
		return nil, nil
	}
	files := map[string][]byte{}
	var lock []byte
	seen := map[string]bool{}
	var sawPlan, sawManifest bool
	for _, f := range zr.File {
		name := f.Name
		c.file = name
		if seen[name] {
			c.refuseFile("entry appears twice (which one Terraform reads depends on the entry)")
			continue
		}
		seen[name] = true
		if f.Method != zip.Store && f.Method != zip.Deflate {
			c.refuseFile("compression method %d is not allowed", f.Method)
			continue
		}
		switch {
		case name == planEntryState || name == planEntryPrevState:
			// State is data, not code; Terraform reads it with its own parser.
		case name == planEntryPlan:
			sawPlan = true
			if b, ok := c.readZipEntry(f, maxTfplanSize); ok {
				c.checkTfplan(b)
			}
		case name == planEntryManifest:
			sawManifest = true
			if b, ok := c.readZipEntry(f, MaxFileSize); ok {
				c.checkManifest(b)
			}
		case name == planEntryLock:
			if b, ok := c.readZipEntry(f, MaxFileSize); ok {
				lock = b
			}
		case strings.HasPrefix(name, planEntryRootPrefix):
			base := strings.TrimPrefix(name, planEntryRootPrefix)
			b, ok := c.readZipEntry(f, MaxFileSize)
			if !ok {
				continue
			}
			if want, isRunner := c.opts.RunnerFiles[base]; isRunner {
				if !bytes.Equal(b, want) {
					c.refuseFile("differs from the runner's own %s", base)
				}
				continue
			}
			if !IsWorkspaceFile(base) && !isOverrideFile(base) {
				c.refuseFile("not a workspace file of the root module")
				continue
			}
			files[base] = b
		case strings.HasPrefix(name, "tfconfig/m-"):
			c.refuseFile("a module other than the root module: a workspace is one flat folder")
		default:
			c.refuseFile("unknown entry in a saved plan")
		}
	}
	c.file = "plan"
	if !sawPlan {
		c.refuseFile("no %s entry", planEntryPlan)
	}
	if !sawManifest {
		c.refuseFile("no %s entry", planEntryManifest)
	}
	return files, lock
}

func (c *checker) readZipEntry(f *zip.File, limit int64) ([]byte, bool) {
	if f.UncompressedSize64 > uint64(limit) {
		c.refuseFile("%d bytes uncompressed: at most %d", f.UncompressedSize64, limit)
		return nil, false
	}
	r, err := f.Open()
	if err != nil {
		c.refuseFile("cannot read: %v", err)
		return nil, false
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		c.refuseFile("cannot read: %v", err)
		return nil, false
	}
	if int64(len(b)) > limit {
		c.refuseFile("more than %d bytes uncompressed", limit)
		return nil, false
	}
	return b, true
}

// checkManifest checks tfconfig/modules.json: the root module alone, at ".", with no source.
// Terraform reads it with encoding/json into a struct, which matches keys without regard to case
// and keeps the last of repeated keys; the strict parser and the exact key names below leave no
// room for a second reading.
func (c *checker) checkManifest(b []byte) {
	v, pos, err := parseJSON(b)
	if err != nil {
		c.refuse(pos, "module manifest: %v", err)
		return
	}
	if v.kind != jArray || len(v.elems) != 1 || v.elems[0].kind != jObject {
		c.refuse(v.pos, "module manifest must list the root module alone: a workspace is one flat folder, with no modules")
		return
	}
	got := map[string]string{}
	for _, m := range v.elems[0].members {
		if m.val.kind != jString {
			c.refuse(m.keyPos, "module manifest: %s must be a string", m.key)
			continue
		}
		got[m.key] = m.val.str
		switch m.key {
		case "Key", "Source", "Version":
			if m.val.str != "" {
				c.refuse(m.keyPos, "module manifest: %s %q: only the root module (key \"\", no source, no version) is allowed", m.key, m.val.str)
			}
		case "Dir":
			if m.val.str != "." {
				c.refuse(m.keyPos, "module manifest: Dir %q: the root module is at \".\"", m.val.str)
			}
		default:
			c.refuse(m.keyPos, "module manifest: unknown key %q", m.key)
		}
	}
	if _, ok := got["Key"]; !ok {
		c.refuse(v.pos, "module manifest: the root module record has no Key")
	}
	if _, ok := got["Dir"]; !ok {
		c.refuse(v.pos, "module manifest: the root module record has no Dir")
	}
}

// checkTfplan reads the tfplan protobuf: a known format version, only fields of Terraform v1.11's
// Plan message, each singular field once, and exactly the expected backend.
func (c *checker) checkTfplan(b []byte) {
	var backend []byte
	var sawVersion, sawBackend bool
	seen := map[protowire.Number]bool{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			c.refuseFile("invalid protobuf: %v", protowire.ParseError(n))
			return
		}
		b = b[n:]
		want, known := planFields[num]
		if !known {
			c.refuseFile("unknown field %d: not a plan of Terraform v1.11", num)
			return
		}
		if typ != want {
			c.refuseFile("field %d has wire type %d, not %d", num, typ, want)
			return
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			c.refuseFile("invalid protobuf: %v", protowire.ParseError(m))
			return
		}
		val := b[:m]
		b = b[m:]
		switch num {
		case fieldPlanVersion:
			if seen[num] {
				c.refuseFile("the plan format version is set twice")
				return
			}
			v, _ := protowire.ConsumeVarint(val)
			if v != tfplanFormatVersion {
				c.refuseFile("plan format version %d: only %d (Terraform v1.11)", v, tfplanFormatVersion)
			}
			sawVersion = true
		case fieldPlanBackend:
			if seen[num] {
				// Protobuf merges repeated occurrences of a message field; a second backend could
				// change what the first one says.
				c.refuseFile("the backend is set twice")
				return
			}
			backend, _ = protowire.ConsumeBytes(val)
			sawBackend = true
		}
		seen[num] = true
	}
	if !sawVersion {
		c.refuseFile("the plan has no format version")
	}
	if !sawBackend {
		c.refuseFile("the plan records no backend")
		return
	}
	c.checkBackend(backend)
}

// checkBackend checks the plan's Backend message against opts.Backend.
func (c *checker) checkBackend(b []byte) {
	fields, ok := c.singularFields(b, "backend", map[protowire.Number]protowire.Type{
		fieldBackendType: protowire.BytesType, fieldBackendConfig: protowire.BytesType, fieldBackendWS: protowire.BytesType,
	})
	if !ok {
		return
	}
	if typ := string(fields[fieldBackendType]); typ != "local" {
		c.refuseFile("backend %q is not allowed: only the runner's local state file (other backends send state elsewhere, and some run programs)", typ)
		return
	}
	ws := c.opts.Backend.Workspace
	if ws == "" {
		ws = "default"
	}
	if got := string(fields[fieldBackendWS]); got != ws {
		c.refuseFile("backend workspace %q, not %q", got, ws)
	}
	dyn, ok := c.singularFields(fields[fieldBackendConfig], "backend config", map[protowire.Number]protowire.Type{
		fieldDynMsgpack: protowire.BytesType,
	})
	if !ok {
		return
	}
	c.checkBackendConfig(dyn[fieldDynMsgpack])
}

// singularFields reads a message whose fields are all singular and known, refusing repeats.
func (c *checker) singularFields(b []byte, what string, known map[protowire.Number]protowire.Type) (map[protowire.Number][]byte, bool) {
	out := map[protowire.Number][]byte{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			c.refuseFile("%s: invalid protobuf: %v", what, protowire.ParseError(n))
			return nil, false
		}
		b = b[n:]
		if want, ok := known[num]; !ok || typ != want {
			c.refuseFile("%s: unknown field %d (wire type %d)", what, num, typ)
			return nil, false
		}
		if _, dup := out[num]; dup {
			c.refuseFile("%s: field %d is set twice", what, num)
			return nil, false
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			c.refuseFile("%s: invalid protobuf: %v", what, protowire.ParseError(m))
			return nil, false
		}
		out[num] = v
		b = b[m:]
	}
	return out, true
}

// checkBackendConfig decodes the backend's configuration (a msgpack map, as cty encodes an object):
// path must be opts.Backend.Path (null when that is empty), and every other setting null.
func (c *checker) checkBackendConfig(b []byte) {
	r := bytes.NewReader(b)
	d := msgpack.NewDecoder(r)
	n, err := d.DecodeMapLen()
	if err != nil || n < 0 {
		c.refuseFile("backend config is not a msgpack map: %v", err)
		return
	}
	if n > 64 {
		c.refuseFile("backend config has %d settings", n)
		return
	}
	seen := map[string]bool{}
	sawPath := false
	for i := 0; i < n; i++ {
		key, err := d.DecodeString()
		if err != nil {
			c.refuseFile("backend config: invalid key: %v", err)
			return
		}
		if seen[key] {
			c.refuseFile("backend config: setting %q appears twice", key)
			return
		}
		seen[key] = true
		code, err := d.PeekCode()
		if err != nil {
			c.refuseFile("backend config: %v", err)
			return
		}
		if code == msgpcode.Nil {
			if err := d.DecodeNil(); err != nil {
				c.refuseFile("backend config: %v", err)
				return
			}
			continue
		}
		if key != "path" {
			c.refuseFile("backend config: setting %q is not allowed: the runner sets only path", key)
			return
		}
		if !msgpcode.IsString(code) {
			c.refuseFile("backend config: path is not a string")
			return
		}
		path, err := d.DecodeString()
		if err != nil {
			c.refuseFile("backend config: path: %v", err)
			return
		}
		if path != c.opts.Backend.Path {
			c.refuseFile("backend config: path %q, not the runner's %q", path, c.opts.Backend.Path)
			return
		}
		sawPath = true
	}
	if r.Len() != 0 {
		c.refuseFile("backend config: %d bytes after the settings", r.Len())
		return
	}
	if c.opts.Backend.Path != "" && !sawPath {
		c.refuseFile("backend config: no path, not the runner's %q", c.opts.Backend.Path)
	}
}
