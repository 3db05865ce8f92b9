package toolrun

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Terraform state lives where Terraform's own kubernetes backend keeps it — Secret
// tfstate-default-<workspace> of the target namespace, gzipped JSON under data.tfstate, locked by Lease
// lock-tfstate-default-<workspace> — so a person can still read it with the Terraform CLI. But the runner
// reads and writes it itself, and Terraform works on a local copy. That is what lets each phase have the
// least credential: a plan reads the state Secret by name and writes nothing at all (a backend would
// create the Secret and take a Lease, and RBAC cannot limit create to one name); only an approved apply
// locks the state and writes it back.
const (
	// maxStateSize bounds a state read from or written to the Secret (1 MiB is a Secret's limit).
	maxStateSize = 1 << 20
	stateKey     = "tfstate"
	// stateLockDuration is how long a lock is held at most: an apply's deadline is shorter.
	stateLockDuration = 15 * time.Minute
)

// ErrStateLocked means another run holds the workspace's state lock.
var ErrStateLocked = errors.New("the workspace's state is locked by another run")

// StateSecretName is the Secret that holds a workspace's state.
func StateSecretName(workspace string) string { return "tfstate-default-" + workspace }

// StateLockName is the Lease that locks a workspace's state.
func StateLockName(workspace string) string { return "lock-" + StateSecretName(workspace) }

// StateStore reads, writes and locks one workspace's state.
type StateStore struct {
	Client    kubernetes.Interface
	Namespace string
	Workspace string
	Now       func() time.Time
}

// State is a state as read: its bytes (nil when there is none yet) and the Secret's version, which a
// write must still find.
type State struct {
	Data            []byte
	ResourceVersion string
}

// Read returns the workspace's state, or an empty State when the workspace has none.
func (s *StateStore) Read(ctx context.Context) (State, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, StateSecretName(s.Workspace), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return State{}, nil
	case err != nil:
		return State{}, fmt.Errorf("read state Secret %s: %w", StateSecretName(s.Workspace), err)
	}
	gz, ok := sec.Data[stateKey]
	if !ok {
		return State{}, fmt.Errorf("state Secret %s has no %s key", sec.Name, stateKey)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return State{}, fmt.Errorf("state Secret %s: %w", sec.Name, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxStateSize+1))
	if err != nil {
		return State{}, fmt.Errorf("state Secret %s: %w", sec.Name, err)
	}
	if len(data) > maxStateSize {
		return State{}, fmt.Errorf("state Secret %s holds more than %d bytes", sec.Name, maxStateSize)
	}
	return State{Data: data, ResourceVersion: sec.ResourceVersion}, nil
}

// Write stores data as the workspace's state. The Secret must still be the version prev was read at
// (prev.ResourceVersion == "" means it must not exist yet): a state written by someone else in between is
// never overwritten.
func (s *StateStore) Write(ctx context.Context, prev State, data []byte) error {
	if len(data) > maxStateSize {
		return fmt.Errorf("the new state is %d bytes, more than a Secret holds", len(data))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: StateSecretName(s.Workspace), Namespace: s.Namespace, ResourceVersion: prev.ResourceVersion,
			Labels: map[string]string{"tfstate": "true", "tfstateWorkspace": "default", "tfstateSecretSuffix": s.Workspace,
				"app.kubernetes.io/managed-by": "terraform"},
		},
		Data: map[string][]byte{stateKey: gz.Bytes()},
	}
	var err error
	if prev.ResourceVersion == "" {
		_, err = s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	} else {
		_, err = s.Client.CoreV1().Secrets(s.Namespace).Update(ctx, sec, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("write state Secret %s: someone else wrote it since it was read: %w", sec.Name, err)
	}
	if err != nil {
		return fmt.Errorf("write state Secret %s: %w", sec.Name, err)
	}
	return nil
}

// Lock takes the workspace's state lock (a Lease), waiting up to wait for another holder to release it or
// for its lock to expire. The returned function releases it.
func (s *StateStore) Lock(ctx context.Context, wait time.Duration) (func(context.Context) error, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	id := "agent-sandbox-" + hex.EncodeToString(b[:])
	leases := s.Client.CoordinationV1().Leases(s.Namespace)
	name := StateLockName(s.Workspace)
	deadline := time.Now().Add(wait)
	for {
		now := metav1.NewMicroTime(s.now())
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id), AcquireTime: &now,
				LeaseDurationSeconds: ptr.To(int32(stateLockDuration / time.Second))}}
		_, err := leases.Create(ctx, lease, metav1.CreateOptions{})
		if err == nil {
			return func(ctx context.Context) error {
				err := leases.Delete(ctx, name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("release state lock %s: %w", name, err)
				}
				return nil
			}, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("take state lock %s: %w", name, err)
		}
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err == nil && expired(cur, s.now()) {
			// An abandoned lock (its holder died): remove it, then try again.
			_ = leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cur.ResourceVersion}})
			continue
		}
		if time.Now().After(deadline) {
			holder := "?"
			if cur != nil && cur.Spec.HolderIdentity != nil {
				holder = *cur.Spec.HolderIdentity
			}
			return nil, fmt.Errorf("%w (Lease %s, holder %s)", ErrStateLocked, name, holder)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func expired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.AcquireTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return now.After(l.Spec.AcquireTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

func (s *StateStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
