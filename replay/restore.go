package replay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/workspace"
)

// Rewound says what a rewind restored.
type Rewound struct {
	Call     string   `json:"call"`
	Restored []string `json:"restored"`
	Removed  []string `json:"removed"`
}

// Restore writes each checkpointed pre-image back into the workspace ws
// (atomically, with its mode) and removes the files that did not exist then.
// get reads a pre-image from the object store. Paths are confined to ws.
func Restore(ctx context.Context, get func(context.Context, string) ([]byte, error), ws string, files []events.FileCheckpointed) (Rewound, error) {
	res := Rewound{Restored: []string{}, Removed: []string{}}
	for _, f := range files {
		abs, rel, err := workspace.Resolve(ws, f.Path)
		if err != nil {
			return res, fmt.Errorf("rewind %s: %w", f.Path, err)
		}
		if !f.Existed {
			if err := os.Remove(abs); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return res, fmt.Errorf("rewind: removing %s: %w", rel, err)
			}
			res.Removed = append(res.Removed, rel)
			continue
		}
		data, err := get(ctx, f.Object)
		if err != nil {
			return res, fmt.Errorf("rewind: pre-image of %s: %w", rel, err)
		}
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			return res, err
		}
		tmp, err := os.CreateTemp(filepath.Dir(abs), ".rewind-*")
		if err != nil {
			return res, err
		}
		_, werr := tmp.Write(data)
		if cerr := tmp.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Chmod(tmp.Name(), fs.FileMode(f.Mode))
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), abs)
		}
		if werr != nil {
			os.Remove(tmp.Name())
			return res, fmt.Errorf("rewind: writing %s: %w", rel, werr)
		}
		res.Restored = append(res.Restored, rel)
	}
	return res, nil
}
