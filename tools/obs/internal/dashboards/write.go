package dashboards

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes every dashboard's JSON into dir.
func Write(dir string) error {
	for _, d := range All() {
		out, err := JSON(d)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, d.File), out, 0o644); err != nil { //nolint:gosec // G306: dashboards are public files of the repository
			return err
		}
	}
	return nil
}

// Stale lists the dashboards whose file in dir differs from what their
// definition builds (or is missing).
func Stale(dir string) ([]string, error) {
	var stale []string
	for _, d := range All() {
		want, err := JSON(d)
		if err != nil {
			return nil, err
		}
		got, err := os.ReadFile(filepath.Join(dir, d.File)) //nolint:gosec // G304: dir is the chart's folder, given by the caller
		if err != nil || !bytes.Equal(got, want) {
			stale = append(stale, d.File)
		}
	}
	return stale, nil
}

// StaleError says how to refresh stale files.
func StaleError(stale []string) error {
	return fmt.Errorf("dashboards out of date with tools/obs/internal/dashboards: %v; regenerate them: cd tools/obs && GOWORK=off go run ./cmd/obs gen -out ../../charts/observability/dashboards", stale)
}
