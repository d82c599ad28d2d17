package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"testing"
)

func TestProfileURLSavesTheProfile(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "p.pprof")
	if err := profileURL(context.Background(), srv.URL+"/debug/pprof/profile", 1, file)(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || len(b) == 0 {
		t.Fatalf("profile file: %d bytes, %v", len(b), err)
	}
	// An endpoint that is not there is an error, not an empty file.
	if err := profileURL(context.Background(), srv.URL+"/missing", 1, filepath.Join(t.TempDir(), "q.pprof"))(); err == nil {
		t.Error("a 404 was saved as a profile")
	}
}
