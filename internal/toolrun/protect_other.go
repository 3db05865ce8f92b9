//go:build !linux

package toolrun

// ProtectProcess does nothing outside Linux; the runner only runs in Linux containers.
func ProtectProcess() error { return nil }

func sweepStrays() error { return nil }
