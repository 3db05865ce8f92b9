package main

import (
	"bytes"
	"compress/gzip"
)

// gzipBytes compresses b with a header that records no name and no time, so that the result depends on b
// (and the Go version's compress/gzip) only.
func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
