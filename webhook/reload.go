package webhook

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/go-logr/logr"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/tick"
)

// FileSource keeps the checker's policy and approver keys in step with two files, typically mounted from
// ConfigMaps (which Kubernetes updates in place). A policy that fails to load is refused with its reason
// logged and counted, and the last good one keeps serving. Keys never outlive their file: a missing, empty or
// unreadable keys file leaves no key trusted (see reloadKeys).
type FileSource struct {
	PolicyPath string
	KeysPath   string
	Checker    *Checker
	Metrics    *Metrics
	Log        logr.Logger

	policySum, keysSum [sha256.Size]byte
}

// Load reads both files once. The policy must load: without one the webhook would deny everything. A
// missing keys file only means no approval can be accepted, which is safe, so it is a warning.
func (s *FileSource) Load() error {
	if _, err := s.reloadPolicy(); err != nil {
		return err
	}
	if _, err := s.reloadKeys(); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		s.Log.Info("no approver keys file; tools that need approval will be denied", "path", s.KeysPath)
	}
	return nil
}

// Run polls the files every interval until ctx ends.
func (s *FileSource) Run(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, func() {
		if changed, err := s.reloadPolicy(); err != nil {
			s.Log.Error(err, "policy reload refused; the last good policy keeps serving", "path", s.PolicyPath)
		} else if changed {
			p := s.Checker.Policy()
			s.Log.Info("policy reloaded", "name", p.Metadata.Name, "version", p.Version)
		}
		// A file that cannot be read is reported when it takes keys out of trust, a version that does not
		// parse once (reloadKeys remembers it).
		switch changed, err := s.reloadKeys(); {
		case err != nil && (changed || !errors.As(err, new(*fs.PathError))):
			s.Log.Error(err, "approver keys refused; no key is trusted and every approval is denied until a valid key set is in place", "path", s.KeysPath)
		case err == nil && changed:
			s.Log.Info("approver keys reloaded", "path", s.KeysPath)
		}
	})
}

func (s *FileSource) reloadPolicy() (bool, error) {
	data, err := os.ReadFile(s.PolicyPath)
	if err != nil {
		s.Metrics.reloads.WithLabelValues("policy", "error").Inc()
		return false, fmt.Errorf("read policy: %w", err)
	}
	sum := sha256.Sum256(data)
	if sum == s.policySum {
		return false, nil
	}
	c, err := policy.Load(data)
	if err != nil {
		s.policySum = sum // report a bad version once, not on every poll
		s.Metrics.reloads.WithLabelValues("policy", "error").Inc()
		return false, fmt.Errorf("policy %s: %w", s.PolicyPath, err)
	}
	if old := s.Checker.Policy(); old != nil {
		s.Metrics.policyInfo.DeleteLabelValues(old.Metadata.Name, old.Version)
	}
	s.Checker.SetPolicy(c)
	s.policySum = sum
	s.Metrics.reloads.WithLabelValues("policy", "ok").Inc()
	s.Metrics.policyInfo.WithLabelValues(c.Metadata.Name, c.Version).Set(1)
	return true, nil
}

// reloadKeys loads the approver keys when their file changed. It reports changed when the trusted keys
// changed, also when an error left none trusted. Unlike the policy, the last good keys do not keep serving:
// an administrator takes a stolen or retired key out of trust by removing it from the set, and the chart
// renders an empty set as no file at all, so a file that is gone, empty or does not parse (an edit gone
// wrong) trusts no key and every approval is denied until a valid set is in place.
func (s *FileSource) reloadKeys() (bool, error) {
	if s.KeysPath == "" {
		return false, fs.ErrNotExist
	}
	data, err := os.ReadFile(s.KeysPath)
	if err != nil {
		s.keysSum = [sha256.Size]byte{} // the same keys coming back load again
		return s.distrustKeys(), fmt.Errorf("read approver keys: %w", err)
	}
	sum := sha256.Sum256(data)
	if sum == s.keysSum {
		return false, nil
	}
	ks, err := approval.LoadKeySet(data)
	if err != nil {
		s.keysSum = sum // report a bad version once, not on every poll
		s.Metrics.reloads.WithLabelValues("keys", "error").Inc()
		return s.distrustKeys(), fmt.Errorf("approver keys %s: %w", s.KeysPath, err)
	}
	s.Checker.SetKeys(ks)
	s.keysSum = sum
	s.Metrics.reloads.WithLabelValues("keys", "ok").Inc()
	return true, nil
}

// distrustKeys drops every trusted approver key; it reports whether any was trusted.
func (s *FileSource) distrustKeys() bool {
	had := s.Checker.keys.Load() != nil
	s.Checker.SetKeys(nil)
	return had
}
